//! The soak's counts, at the targets and in the database once the outbox
//! settled, and the bars they must meet: every broken bar is a line of
//! `violations`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use sqlx::{Connection, PgConnection};

use super::client::Tally;
use super::cluster::Owners;
use super::targets::{IgnoringTarget, KeyTarget};

/// What the soak ran against, for the verdict.
pub struct Scene<'a> {
    pub db_url: &'a str,
    pub tally: &'a Tally,
    pub honouring: &'a KeyTarget,
    pub ignoring: &'a IgnoringTarget,
    pub limited: &'a KeyTarget,
    pub rate: u32,
    pub window: Duration,
    pub owners: &'a Owners,
    pub instances: usize,
    pub kills: usize,
    pub kills_expected: usize,
    pub settled: bool,
}

/// The report and the broken bars.
pub struct Verdict {
    pub report: String,
    pub violations: Vec<String>,
}

async fn rows(db: &mut PgConnection, sql: &str) -> Result<Vec<Vec<String>>> {
    use sqlx::Row;
    let rows = sqlx::query(sql).fetch_all(db).await?;
    Ok(rows
        .iter()
        .map(|r| {
            (0..r.len())
                .map(|i| r.try_get::<String, _>(i).unwrap_or_default())
                .collect()
        })
        .collect())
}

/// How many of each value, largest first, as `value n, …`.
fn histogram<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    parts.join(", ")
}

/// Judges the settled soak.
pub async fn judge(scene: &Scene<'_>) -> Result<Verdict> {
    let mut db = PgConnection::connect(scene.db_url).await?;
    let runs = rows(&mut db, "SELECT namespace, run_key, state FROM runs").await?;
    let dead: HashMap<String, String> = rows(
        &mut db,
        "SELECT namespace || '|' || run_key, class FROM dead_letters WHERE resolved_at IS NULL",
    )
    .await?
    .into_iter()
    .map(|r| (r[0].clone(), r[1].clone()))
    .collect();
    let effects = rows(
        &mut db,
        "SELECT namespace || '|' || run_key, target, idempotency_key, state FROM effects",
    )
    .await?;
    let attempts = rows(
        &mut db,
        "SELECT dispatcher, COUNT(*)::text, COUNT(*) FILTER (WHERE status BETWEEN 200 AND 299)::text \
         FROM effect_attempts GROUP BY dispatcher",
    )
    .await?;
    let raw: HashSet<String> = rows(
        &mut db,
        "SELECT event_id FROM raw_events WHERE source = 'stripe' AND status = 'accepted'",
    )
    .await?
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    db.close().await?;

    let t = scene.tally;
    let mut v: Vec<String> = t.violations.lock().unwrap().clone();
    let mut out = String::new();
    let state_of: HashMap<String, String> = runs
        .iter()
        .map(|r| (format!("{}|{}", r[0], r[1]), r[2].clone()))
        .collect();
    let ignoring_runs: HashSet<&str> = effects
        .iter()
        .filter(|e| e[1] == "ignore")
        .map(|e| e[0].as_str())
        .collect();

    // Accepted events: stored, forwarded and applied once.
    let accepted = t.accepted.lock().unwrap().clone();
    let applied_ids: HashSet<String> = scene
        .honouring
        .with(|b| b.applies_per_id.keys().cloned().collect());
    let mut lost = Vec::new();
    for id in &accepted {
        let state = state_of.get(&format!("stripe|{id}")).map(String::as_str);
        if !raw.contains(id) || state != Some("completed") || !applied_ids.contains(id) {
            lost.push(format!("{id} (stored {}, run {state:?})", raw.contains(id)));
        }
    }
    let _ = writeln!(
        out,
        "webhooks: {} events accepted over {} deliveries; {} not stored, completed and applied",
        accepted.len(),
        t.deliveries.load(Ordering::Relaxed),
        lost.len()
    );
    lost.sort();
    v.extend(
        lost.iter()
            .take(20)
            .map(|l| format!("accepted event lost: {l}")),
    );

    // Workflow runs the callers were told about exist.
    let driven = t.runs.lock().unwrap().clone();
    let missing: Vec<&String> = driven
        .iter()
        .filter(|r| !state_of.contains_key(*r))
        .collect();
    v.extend(
        missing
            .iter()
            .map(|r| format!("acknowledged run {r} is not stored")),
    );

    // Every run final, or dead-lettered with an unknown outcome at the
    // key-ignoring target (a person decides those).
    let mut unexplained = Vec::new();
    let mut explained = 0;
    for r in &runs {
        let id = format!("{}|{}", r[0], r[1]);
        match r[2].as_str() {
            "completed" | "failed_terminal" => {}
            "dead_lettered"
                if dead.get(&id).map(String::as_str) == Some("unknown_outcome")
                    && ignoring_runs.contains(id.as_str()) =>
            {
                explained += 1;
            }
            state => unexplained.push(format!(
                "{id}: {state} ({})",
                dead.get(&id).map_or("no dead letter", String::as_str)
            )),
        }
    }
    let _ = writeln!(
        out,
        "runs: {} ({}); {} workflow runs acknowledged, {} approvals; \
         {explained} dead-lettered as unknown at the key-ignoring target; {} unexplained",
        runs.len(),
        histogram(runs.iter().map(|r| r[2].as_str())),
        driven.len(),
        t.approvals.load(Ordering::Relaxed),
        unexplained.len()
    );
    unexplained.sort();
    v.extend(
        unexplained
            .iter()
            .take(30)
            .map(|u| format!("run not final: {u}")),
    );

    // Effects: a completed effect was applied at its target.
    for (target, book) in [
        ("apply", scene.honouring),
        ("hooks", scene.honouring),
        ("limited", scene.limited),
    ] {
        let applied: HashSet<String> = book.with(|b| b.applied.keys().cloned().collect());
        for e in effects
            .iter()
            .filter(|e| e[1] == target && e[3] == "completed")
        {
            if !applied.contains(&e[2]) {
                v.push(format!(
                    "{target}: effect {} completed but never applied",
                    e[2]
                ));
            }
        }
    }
    let _ = writeln!(
        out,
        "effects: {} ({})",
        effects.len(),
        histogram(effects.iter().map(|e| e[3].as_str()))
    );

    // Key-honouring targets: one apply per business id.
    for (name, target) in [
        ("key-honouring", scene.honouring),
        ("rate-limited", scene.limited),
    ] {
        let (requests, refused, duplicates, keyless, applied, doubles) = target.with(|b| {
            let doubles: Vec<String> = b
                .applies_per_id
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(id, n)| format!("{id} ×{n}"))
                .collect();
            (
                b.requests,
                b.refused,
                b.duplicates,
                b.keyless,
                b.applied.len(),
                doubles,
            )
        });
        let _ = writeln!(
            out,
            "{name} target: {requests} requests, {applied} applied, {duplicates} duplicates \
             answered as replays, {refused} refused with 503, {} applied twice",
            doubles.len()
        );
        v.extend(
            doubles
                .iter()
                .map(|d| format!("{name}: applied twice: {d}")),
        );
        if keyless > 0 {
            v.push(format!(
                "{name}: {keyless} requests without an idempotency key"
            ));
        }
    }

    // Key-ignoring target: never a second request for one effect.
    let (requests, keys, resets, resent) = scene.ignoring.with(|b| {
        let resent: Vec<String> = b
            .per_key
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        (b.requests, b.per_key.len(), b.reset.len(), resent)
    });
    let _ = writeln!(
        out,
        "key-ignoring target: {requests} requests for {keys} effects, {resets} answered with a \
         reset (outcome unknown), {} sent again",
        resent.len()
    );
    v.extend(
        resent
            .iter()
            .map(|r| format!("key-ignoring target got {r}")),
    );

    // The rate-limited target's busiest window.
    let busiest = scene.limited.busiest(scene.window);
    let observed = busiest as f64 / scene.window.as_secs_f64();
    let rate = f64::from(scene.rate);
    let _ = writeln!(
        out,
        "rate-limited target: {busiest} requests in the busiest {} s = {observed:.1}/s \
         (limit {rate}/s, bar {:.1}–{:.1})",
        scene.window.as_secs(),
        rate * 0.9,
        rate * 1.1
    );
    if !(rate * 0.9..=rate * 1.1).contains(&observed) {
        v.push(format!(
            "rate-limited target saw {observed:.1}/s, not within 10 % of {rate}/s"
        ));
    }

    // Dispatcher work per instance.
    let owners = scene.owners.lock().unwrap().clone();
    let mut per = vec![(0u64, 0u64); scene.instances];
    let mut unowned = 0u64;
    for a in &attempts {
        let (all, ok) = (a[1].parse().unwrap_or(0), a[2].parse().unwrap_or(0));
        match owners.get(&a[0]) {
            Some(&i) => {
                per[i].0 += all;
                per[i].1 += ok;
            }
            None => unowned += all,
        }
    }
    let total: u64 = per.iter().map(|p| p.0).sum::<u64>() + unowned;
    let shares: Vec<String> = per
        .iter()
        .enumerate()
        .map(|(i, (all, ok))| format!("instance {i}: {all} attempts ({ok} 2xx)"))
        .collect();
    let _ = writeln!(
        out,
        "dispatch: {}; {unowned} by dispatchers not seen starting",
        shares.join(", ")
    );
    for (i, (all, _)) in per.iter().enumerate() {
        if *all * 20 < total {
            v.push(format!(
                "instance {i} made {all} of {total} attempts (under 5 %)"
            ));
        }
    }

    let _ = writeln!(
        out,
        "kills: {} SIGKILLs; requests: {} sent through nginx, {} retried",
        scene.kills,
        t.requests.load(Ordering::Relaxed),
        t.retried.load(Ordering::Relaxed)
    );
    if scene.kills < scene.kills_expected {
        v.push(format!(
            "{} kills, {} expected",
            scene.kills, scene.kills_expected
        ));
    }
    if !scene.settled {
        v.push("the outbox did not settle in time".into());
    }
    Ok(Verdict {
        report: out,
        violations: v,
    })
}
