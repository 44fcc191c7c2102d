//! Crash points: named places where the chaos tests kill the process.
//!
//! A crash point marks a moment where a real process can die between two
//! durable steps: after a claim committed but before the provider heard
//! back, after a request was answered but before its outcome was recorded,
//! between two writes of one transaction. [`point`] is called there.
//!
//! With the cargo feature `chaos` off (every normal and release build),
//! [`point`] is an empty inline function and the environment is never
//! read. With it on, a process started with
//!
//! - `ONCEGATE_CRASH_AT=<name>` (one of [`POINTS`]) and
//! - `ONCEGATE_CRASH_AFTER=<n>`: die at the n-th time that point is reached
//!   (default 1), or instead
//! - `ONCEGATE_CRASH_PROBABILITY=<p>` with `ONCEGATE_CRASH_SEED=<u64>`: die
//!   at each hit with probability `p`, from a seeded generator
//!
//! sends itself `SIGKILL` there: no destructor runs, no buffer is flushed,
//! no transaction is committed or rolled back by the process, exactly as
//! `kill -9` from outside. A line naming the point goes to stderr first,
//! so a test can tell a planned death from any other.
//!
//! Where each point sits (see docs/reliability.md):
//!
//! | point | place |
//! | --- | --- |
//! | `after_claim` | `POST /v1/claims`: the store answered "claimed" (committed), before the HTTP answer. Ingress: inside the accept transaction, right after the claim statement, before the run's approval, effect and raw event are written (the crash rolls it all back) |
//! | `after_effect_insert` | `POST /hooks/{source}` and `POST /v1/runs/commit`: the store committed the run with its effects, before the HTTP answer |
//! | `after_send_before_record` | dispatcher: a batch was sent and answered, before its verdicts are recorded |
//! | `after_record_before_completion` | dispatcher: inside the record transaction, the effect is recorded completed, the run not yet moved (the crash rolls both back) |
//! | `approval_decide` | inside the approval transaction, after the challenge is consumed and the run moved, before the effects are inserted |
//! | `group_commit` | SQLite only, [`before_commit`]: a write transaction's writes are done, before its commit (claims, ingress accepts, owner moves, dispatcher records, approval decisions). Under a group commit the job's writes sit in the open batch: the crash loses the whole uncommitted batch |

/// Every crash point's name.
pub const POINTS: &[&str] = &[
    "after_claim",
    "after_effect_insert",
    "after_send_before_record",
    "after_record_before_completion",
    "approval_decide",
    "group_commit",
];

/// Marks crash point `name`. Without the `chaos` feature this does nothing.
#[cfg(not(feature = "chaos"))]
#[inline(always)]
pub fn point(_name: &str) {}

/// Checks the crash-point settings at start-up.
///
/// Without the `chaos` feature the settings are ignored, with a warning
/// when one is set (so nobody believes a normal build will crash).
///
/// # Errors
/// Never without the feature.
#[cfg(not(feature = "chaos"))]
pub fn arm() -> Result<(), String> {
    if std::env::var_os("ONCEGATE_CRASH_AT").is_some() {
        tracing::warn!("ONCEGATE_CRASH_AT is set, but this build has no crash points (cargo feature `chaos`); ignored");
    }
    Ok(())
}

#[cfg(feature = "chaos")]
pub use armed::{arm, point};

/// Marks crash point `group_commit` right before a write transaction of
/// `backend` (`"sqlite"` or `"postgres"`) commits; it exists on SQLite only
/// (where writes are committed by one writer), and compiles to nothing
/// without the feature.
#[inline(always)]
pub fn before_commit(backend: &str) {
    if backend == "sqlite" {
        point("group_commit");
    }
}

#[cfg(feature = "chaos")]
mod armed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, OnceLock};

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::POINTS;

    /// When the armed point kills the process.
    #[derive(Debug)]
    enum Trigger {
        /// At this hit (1-based).
        After(u64),
        /// At each hit with probability `p`.
        Chance { p: f64, rng: Box<Mutex<ChaCha8Rng>> },
    }

    /// The point this process dies at, and when.
    #[derive(Debug)]
    struct Plan {
        at: String,
        trigger: Trigger,
        hits: AtomicU64,
    }

    static PLAN: OnceLock<Result<Option<Plan>, String>> = OnceLock::new();

    /// A lookup of a setting by name (the environment, or a test's map).
    type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

    fn env_var(name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    fn parse<T: std::str::FromStr>(var: Vars<'_>, name: &str) -> Result<Option<T>, String> {
        var(name)
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("{name}: cannot parse {v:?}"))
            })
            .transpose()
    }

    fn load(var: Vars<'_>) -> Result<Option<Plan>, String> {
        let Some(at) = var("ONCEGATE_CRASH_AT") else {
            return Ok(None);
        };
        if !POINTS.contains(&at.as_str()) {
            return Err(format!(
                "ONCEGATE_CRASH_AT: unknown crash point {at:?}; known: {}",
                POINTS.join(", ")
            ));
        }
        let after: Option<u64> = parse(var, "ONCEGATE_CRASH_AFTER")?;
        let p: Option<f64> = parse(var, "ONCEGATE_CRASH_PROBABILITY")?;
        let trigger = match (after, p) {
            (Some(_), Some(_)) => {
                return Err(
                    "set ONCEGATE_CRASH_AFTER or ONCEGATE_CRASH_PROBABILITY, not both".into(),
                )
            }
            (Some(0), None) => return Err("ONCEGATE_CRASH_AFTER: must be at least 1".into()),
            (after, None) => Trigger::After(after.unwrap_or(1)),
            (None, Some(p)) if !(p > 0.0 && p <= 1.0) => {
                return Err("ONCEGATE_CRASH_PROBABILITY: must be above 0 and at most 1".into())
            }
            (None, Some(p)) => {
                let seed: u64 = parse(var, "ONCEGATE_CRASH_SEED")?.ok_or(
                    "ONCEGATE_CRASH_SEED: required with ONCEGATE_CRASH_PROBABILITY (runs must be repeatable)",
                )?;
                Trigger::Chance {
                    p,
                    rng: Box::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
                }
            }
        };
        Ok(Some(Plan {
            at,
            trigger,
            hits: AtomicU64::new(0),
        }))
    }

    fn plan() -> &'static Result<Option<Plan>, String> {
        PLAN.get_or_init(|| load(&env_var))
    }

    /// Reads and checks the settings; call once at start-up so a typo
    /// stops the process instead of silently never crashing.
    ///
    /// # Errors
    /// A setting names an unknown point or does not parse.
    pub fn arm() -> Result<(), String> {
        match plan() {
            Ok(Some(plan)) => {
                tracing::warn!(point = %plan.at, trigger = ?plan.trigger, "crash point armed: this process will kill itself");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(err) => Err(err.clone()),
        }
    }

    /// Kills the process when `name` is the armed point and its trigger fires.
    pub fn point(name: &str) {
        let Ok(Some(plan)) = plan() else { return };
        if plan.at != name {
            return;
        }
        let hit = plan.hits.fetch_add(1, Ordering::SeqCst) + 1;
        let fire = match &plan.trigger {
            Trigger::After(n) => hit == *n,
            Trigger::Chance { p, rng } => rng.lock().map(|mut r| r.gen_bool(*p)).unwrap_or(true),
        };
        if fire {
            die(name, hit);
        }
    }

    fn die(name: &str, hit: u64) -> ! {
        use std::io::Write;
        // Unbuffered, so the line is out before the signal lands.
        // A closed stderr must not turn the crash into a panic.
        let _ = writeln!(
            std::io::stderr(),
            "oncegate chaos: crash point {name} reached (hit {hit}); SIGKILL"
        );
        #[cfg(unix)]
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        std::process::abort()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn load_from(pairs: &[(&str, &str)]) -> Result<Option<Plan>, String> {
            let map: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            load(&move |name: &str| map.get(name).cloned())
        }

        #[test]
        fn nothing_set_arms_nothing() {
            assert!(load_from(&[]).unwrap().is_none());
        }

        #[test]
        fn after_defaults_to_the_first_hit() {
            let plan = load_from(&[("ONCEGATE_CRASH_AT", "after_claim")])
                .unwrap()
                .unwrap();
            assert!(matches!(plan.trigger, Trigger::After(1)));
            let plan = load_from(&[
                ("ONCEGATE_CRASH_AT", "group_commit"),
                ("ONCEGATE_CRASH_AFTER", "7"),
            ])
            .unwrap()
            .unwrap();
            assert!(matches!(plan.trigger, Trigger::After(7)));
        }

        #[test]
        fn bad_settings_are_named() {
            let err = load_from(&[("ONCEGATE_CRASH_AT", "after_lunch")]).unwrap_err();
            assert!(
                err.contains("unknown crash point") && err.contains("after_claim"),
                "{err}"
            );
            let err = load_from(&[
                ("ONCEGATE_CRASH_AT", "after_claim"),
                ("ONCEGATE_CRASH_AFTER", "0"),
            ])
            .unwrap_err();
            assert!(err.starts_with("ONCEGATE_CRASH_AFTER"), "{err}");
            let err = load_from(&[
                ("ONCEGATE_CRASH_AT", "after_claim"),
                ("ONCEGATE_CRASH_AFTER", "x"),
            ])
            .unwrap_err();
            assert!(
                err.starts_with("ONCEGATE_CRASH_AFTER: cannot parse"),
                "{err}"
            );
            let err = load_from(&[
                ("ONCEGATE_CRASH_AT", "after_claim"),
                ("ONCEGATE_CRASH_PROBABILITY", "0.5"),
            ])
            .unwrap_err();
            assert!(err.starts_with("ONCEGATE_CRASH_SEED"), "{err}");
            let err = load_from(&[
                ("ONCEGATE_CRASH_AT", "after_claim"),
                ("ONCEGATE_CRASH_PROBABILITY", "1.5"),
                ("ONCEGATE_CRASH_SEED", "1"),
            ])
            .unwrap_err();
            assert!(err.starts_with("ONCEGATE_CRASH_PROBABILITY"), "{err}");
        }

        #[test]
        fn a_probability_needs_a_seed_and_is_repeatable() {
            let draws = || {
                let plan = load_from(&[
                    ("ONCEGATE_CRASH_AT", "after_claim"),
                    ("ONCEGATE_CRASH_PROBABILITY", "0.3"),
                    ("ONCEGATE_CRASH_SEED", "42"),
                ])
                .unwrap()
                .unwrap();
                let Trigger::Chance { p, rng } = plan.trigger else {
                    panic!("chance")
                };
                let mut rng = rng.into_inner().unwrap();
                (0..64).map(|_| rng.gen_bool(p)).collect::<Vec<_>>()
            };
            assert_eq!(draws(), draws());
        }

        #[test]
        fn another_point_never_fires() {
            // `point` reads the process environment, which this test does
            // not set: reaching any point must return.
            for name in POINTS {
                point(name);
            }
        }
    }
}
