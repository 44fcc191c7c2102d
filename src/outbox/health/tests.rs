use std::time::Duration;

use super::*;

fn policy() -> HealthConfig {
    HealthConfig {
        failure_threshold: 3,
        cool_down_ms: 1_000,
        cool_down_cap_ms: 5_000,
    }
}

fn failure(retry_after: Option<Duration>) -> Signal {
    Signal::Failure {
        retry_after,
        cause: "the target answered 503".into(),
    }
}

/// Applies `signal` and returns the health after it (unchanged when
/// nothing is to be stored).
fn step(h: TargetHealth, signal: &Signal, probe: bool, now: Millis) -> TargetHealth {
    apply(h.clone(), signal, probe, &policy(), now, "d").map_or(h, |c| c.health)
}

#[test]
fn the_threshold_of_consecutive_failures_pauses_and_a_success_resets_the_count() {
    let mut h = TargetHealth::healthy("t", 0);
    h = step(h, &failure(None), false, 1);
    h = step(h, &failure(None), false, 2);
    assert_eq!((h.state, h.failures), (HealthState::Healthy, 2));
    h = step(h, &Signal::Success, false, 3);
    assert_eq!(h.failures, 0, "a success resets the count");
    for now in 4..6 {
        h = step(h, &failure(None), false, now);
    }
    let change = apply(h, &failure(None), false, &policy(), 10, "d").expect("a change");
    assert_eq!(change.event, Some("target_paused"));
    let h = change.health;
    assert_eq!(h.state, HealthState::Paused);
    assert_eq!((h.paused_at, h.paused_until), (Some(10), Some(1_010)));
    assert_eq!(h.lease_gate(1_009), None, "no lease while cooling down");
    assert_eq!(h.lease_gate(1_010), Some(true), "then one probe");
}

#[test]
fn a_zero_threshold_never_pauses() {
    let policy = HealthConfig {
        failure_threshold: 0,
        ..policy()
    };
    let mut h = TargetHealth::healthy("t", 0);
    for now in 0..50 {
        h = apply(h.clone(), &failure(None), false, &policy, now, "d").map_or(h, |c| c.health);
    }
    assert_eq!(h.state, HealthState::Healthy);
}

#[test]
fn cool_downs_double_honour_retry_after_and_stop_at_the_cap() {
    let p = policy();
    assert_eq!(p.cool_down(1, None), 1_000);
    assert_eq!(p.cool_down(2, None), 2_000);
    assert_eq!(p.cool_down(3, None), 4_000);
    assert_eq!(p.cool_down(4, None), 5_000, "capped");
    assert_eq!(p.cool_down(1, Some(Duration::from_secs(3))), 3_000);
    assert_eq!(p.cool_down(1, Some(Duration::from_secs(3_600))), 5_000);
    assert_eq!(p.cool_down(90, None), 5_000, "no overflow");
}

fn paused() -> TargetHealth {
    let mut h = TargetHealth::healthy("t", 0);
    for now in 0..3 {
        h = step(h, &failure(None), false, now);
    }
    assert_eq!(h.state, HealthState::Paused);
    h
}

#[test]
fn the_probe_resumes_on_success_and_re_pauses_longer_on_failure() {
    let mut probing = paused();
    probing.state = HealthState::Probing;
    let resumed = apply(
        probing.clone(),
        &Signal::Success,
        true,
        &policy(),
        3_002,
        "d",
    )
    .unwrap();
    assert_eq!(resumed.event, Some("target_resumed"));
    assert_eq!(resumed.health.state, HealthState::Healthy);
    assert_eq!(resumed.health.paused_ms, 3_000, "the time paused is kept");
    let again = step(probing.clone(), &failure(None), true, 3_002);
    assert_eq!(again.state, HealthState::Paused);
    assert_eq!(
        again.paused_until,
        Some(5_002),
        "the second cool-down doubles"
    );
    assert_eq!(again.paused_at, Some(2), "the same pause goes on");
    // Answers to sends leased before the pause change nothing.
    assert_eq!(
        apply(probing, &Signal::Success, false, &policy(), 3_003, "d"),
        None
    );
    assert_eq!(
        apply(paused(), &failure(None), false, &policy(), 9, "d"),
        None
    );
}

#[test]
fn gone_disables_until_an_operator_enables() {
    let change = apply(
        TargetHealth::healthy("t", 0),
        &Signal::Gone,
        false,
        &policy(),
        5,
        "d",
    );
    let h = change.expect("disabled").health;
    assert_eq!(h.state, HealthState::Disabled);
    assert_eq!(h.lease_gate(i64::MAX), None, "never leased by time alone");
    assert_eq!(
        apply(h.clone(), &Signal::Success, true, &policy(), 9, "d"),
        None
    );
    let enabled = operator(h, true, 105, "ops");
    assert_eq!(enabled.event, Some("target_enabled"));
    assert_eq!(enabled.health.state, HealthState::Healthy);
    assert_eq!(enabled.health.changed_by, "ops");
    assert_eq!(enabled.health.paused_total_ms(200), 100);
}

#[test]
fn signals_follow_the_outcome_and_status() {
    use axum::http::{HeaderMap, StatusCode};
    let answered = |s: u16| Attempted::Answered {
        status: StatusCode::from_u16(s).unwrap(),
        headers: HeaderMap::new(),
        body: Vec::new(),
    };
    let transient = Outcome::Transient { retry_after: None };
    assert!(matches!(
        signal(&answered(503), &transient, false),
        Some(Signal::Failure { .. })
    ));
    assert!(matches!(
        signal(&Attempted::NotSent("refused".into()), &transient, false),
        Some(Signal::Failure { .. })
    ));
    assert_eq!(
        signal(&answered(410), &Outcome::Permanent, false),
        Some(Signal::Gone)
    );
    let ok = Outcome::Success { external_ref: None };
    assert_eq!(signal(&answered(200), &ok, false), Some(Signal::Success));
    assert_eq!(signal(&answered(404), &Outcome::Permanent, false), None);
    assert!(matches!(
        signal(&answered(404), &Outcome::Permanent, true),
        Some(Signal::Failure { .. })
    ));
    let ambiguous = Outcome::Ambiguous { status: Some(503) };
    assert!(matches!(
        signal(&answered(503), &ambiguous, false),
        Some(Signal::Failure { .. })
    ));
}
