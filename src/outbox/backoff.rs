//! Retry timing: full-jitter backoff within the target's budget.

use std::time::Duration;

use rand::Rng;

use super::RetryBudget;
use crate::clock::Millis;

/// When the next attempt may start, or `None` when the budget is spent.
///
/// `attempts` is how many attempts were made so far (at least 1),
/// `first_sent_at` when the first one started. The delay is
/// `random(0, min(cap, base·2^(attempts-1)))`; a `Retry-After` from the
/// target replaces it, up to the cap. No retry starts past `max_elapsed`.
pub fn next_attempt_at(
    budget: &RetryBudget,
    attempts: u32,
    first_sent_at: Millis,
    now: Millis,
    retry_after: Option<Duration>,
    rng: &mut impl Rng,
) -> Option<Millis> {
    if attempts >= budget.max_attempts {
        return None;
    }
    let delay = match retry_after {
        Some(wait) => (wait.as_millis() as u64).min(budget.cap_ms),
        None => {
            let exp = budget
                .base_ms
                .saturating_mul(1u64 << (attempts.saturating_sub(1)).min(40));
            rng.gen_range(0..=exp.min(budget.cap_ms))
        }
    };
    let at = now.saturating_add(delay as i64);
    (at - first_sent_at <= budget.max_elapsed_ms as i64).then_some(at)
}

/// Whether a retry at `at` leaves little of the budget: it is the last
/// attempt allowed, or it starts after four fifths of `max_elapsed`.
/// Counted so an alert can fire before effects start dead-lettering.
pub fn near_budget(budget: &RetryBudget, attempts: u32, first_sent_at: Millis, at: Millis) -> bool {
    let last = attempts.saturating_add(1) >= budget.max_attempts;
    let late = (at - first_sent_at) as f64 >= budget.max_elapsed_ms as f64 * 0.8;
    last || late
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn budget() -> RetryBudget {
        RetryBudget {
            max_attempts: 5,
            base_ms: 100,
            cap_ms: 1_000,
            max_elapsed_ms: 10_000,
        }
    }

    #[test]
    fn delays_stay_inside_the_jitter_window_and_the_cap() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempts in 1..5u32 {
            let ceiling = (100u64 << (attempts - 1)).min(1_000) as i64;
            for _ in 0..200 {
                let at = next_attempt_at(&budget(), attempts, 0, 0, None, &mut rng).unwrap();
                assert!(
                    (0..=ceiling).contains(&at),
                    "attempt {attempts}: {at} > {ceiling}"
                );
            }
        }
    }

    #[test]
    fn budget_ends_at_max_attempts_and_max_elapsed() {
        let mut rng = StdRng::seed_from_u64(7);
        assert_eq!(next_attempt_at(&budget(), 5, 0, 0, None, &mut rng), None);
        assert_eq!(
            next_attempt_at(&budget(), 2, 0, 10_001, None, &mut rng),
            None
        );
        assert!(next_attempt_at(&budget(), 2, 0, 5_000, None, &mut rng).is_some());
    }

    #[test]
    fn near_budget_means_last_attempt_or_late() {
        let b = budget();
        assert!(!near_budget(&b, 1, 0, 1_000));
        assert!(near_budget(&b, 4, 0, 1_000), "the 5th attempt is the last");
        assert!(near_budget(&b, 1, 0, 8_000), "4/5 of max_elapsed");
        assert!(!near_budget(&b, 3, 0, 7_999));
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let mut rng = StdRng::seed_from_u64(7);
        let at = next_attempt_at(
            &budget(),
            1,
            0,
            0,
            Some(Duration::from_millis(700)),
            &mut rng,
        );
        assert_eq!(at, Some(700));
        let at = next_attempt_at(
            &budget(),
            1,
            0,
            0,
            Some(Duration::from_secs(3_600)),
            &mut rng,
        );
        assert_eq!(at, Some(1_000));
    }
}
