//! The qualitative results the lab exists to show, pinned on the default
//! seed so a change to a strategy, the ledger's move table or the
//! dispatcher's classification that breaks a lesson fails here.

use std::sync::OnceLock;

use super::*;

/// The default scenario with fewer events (one run shared by the tests).
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        run(&Scenario {
            events: 400,
            ..Scenario::standard()
        })
        .expect("the default scenario runs")
    })
}

fn tally(fault: Fault, strategy: Strategy, downstream: Downstream) -> Tally {
    report()
        .cell(fault, strategy, downstream)
        .unwrap_or_else(|| panic!("no cell {fault:?} {strategy:?} {downstream:?}"))
        .tally
}

fn inline(fault: Fault, strategy: Strategy) -> Tally {
    tally(fault, strategy, Downstream::NoKey)
}

const BEFORE: Fault = Fault::Crash(CrashPoint::Before);
const AFTER: Fault = Fault::Crash(CrashPoint::After);

#[test]
fn every_fault_hits_some_events_and_every_cell_is_there() {
    let r = report();
    assert_eq!(r.faults().len(), 6);
    assert_eq!(r.cells.len(), 6 * 9, "a–e once, f and g per downstream");
    for cell in &r.cells {
        assert!(cell.tally.hit > 40, "{cell:?}");
        assert!(cell.tally.deliveries >= 400, "{cell:?}");
    }
}

#[test]
fn no_guard_duplicates_under_redelivery_and_every_guard_stops_it() {
    assert!(inline(Fault::LostAck, Strategy::NoGuard).duplicates > 0);
    for cell in report().cells_of(Fault::LostAck) {
        if cell.strategy != Strategy::NoGuard {
            assert_eq!((cell.tally.duplicates, cell.tally.lost), (0, 0), "{cell:?}");
        }
    }
}

#[test]
fn seen_flag_and_lookup_then_insert_duplicate_under_concurrency() {
    let seen = inline(Fault::Concurrent, Strategy::SeenAfter);
    let lookup = inline(Fault::Concurrent, Strategy::LookupInsert);
    assert!(seen.duplicates > 0 && lookup.duplicates > 0);
    // The race is narrower than the whole call, so it hits less often.
    assert!(lookup.duplicates < seen.duplicates);
    for cell in report().cells_of(Fault::Concurrent) {
        if cell.strategy >= Strategy::AtomicClaim {
            assert_eq!((cell.tally.duplicates, cell.tally.lost), (0, 0), "{cell:?}");
        }
    }
}

#[test]
fn claims_without_states_lose_events_after_a_crash_before_the_effect() {
    let claim = inline(BEFORE, Strategy::AtomicClaim);
    assert!(claim.lost >= claim.hit, "{claim:?}");
    assert_eq!(claim.waiting_for_human, 0, "nothing says they are missing");
    let flag = inline(BEFORE, Strategy::LookupInsert);
    assert!(flag.lost >= flag.hit, "the inserted flag strands them too");
    assert_eq!(inline(BEFORE, Strategy::SeenAfter).lost, 0);
}

#[test]
fn leases_recover_crashes_but_repeat_effects_after_a_crash_or_timeout() {
    let before = inline(BEFORE, Strategy::Leases);
    assert_eq!(before.lost, 0);
    assert!(before.recovered >= before.hit, "{before:?}");
    assert!(inline(AFTER, Strategy::Leases).duplicates >= inline(AFTER, Strategy::Leases).hit);
    assert!(inline(Fault::Timeout, Strategy::Leases).duplicates > 0);
    // A key changes nothing when the target ignores it and nobody reconciles.
    for fault in [AFTER, Fault::Timeout] {
        assert!(tally(fault, Strategy::Outbox, Downstream::KeyIgnored).duplicates > 0);
    }
}

#[test]
fn outbox_with_an_honouring_target_never_duplicates_or_loses() {
    for fault in report().faults() {
        let t = tally(fault, Strategy::Outbox, Downstream::KeyHonoured);
        assert_eq!((t.duplicates, t.lost), (0, 0), "{fault:?}");
    }
}

#[test]
fn reconciliation_neither_duplicates_nor_loses_and_parks_the_undecidable() {
    let mut waiting = 0;
    for fault in report().faults() {
        for downstream in [Downstream::KeyHonoured, Downstream::KeyIgnored] {
            let t = tally(fault, Strategy::Reconcile, downstream);
            assert_eq!((t.duplicates, t.lost), (0, 0), "{fault:?} {downstream:?}");
            assert_eq!(t.operator_actions, t.waiting_for_human);
            waiting += t.waiting_for_human;
        }
    }
    // Effects no probe can see go to a person instead of being resent.
    assert!(waiting > 0);
    let t = tally(Fault::Timeout, Strategy::Reconcile, Downstream::KeyIgnored);
    assert!(t.recovered + t.waiting_for_human >= t.hit, "{t:?}");
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_another() {
    let scenario = Scenario {
        events: 150,
        ..Scenario::standard()
    };
    let a = report::json(&run(&scenario).unwrap()).unwrap();
    let b = report::json(&run(&scenario).unwrap()).unwrap();
    assert_eq!(a, b);
    let other = report::json(
        &run(&Scenario {
            seed: 2,
            ..scenario
        })
        .unwrap(),
    )
    .unwrap();
    assert_ne!(a, other);
}

#[test]
fn filters_keep_their_order() {
    let r = run(&Scenario {
        events: 50,
        strategies: vec![Strategy::Reconcile, Strategy::NoGuard],
        faults: Fault::of_kinds(&[FaultKind::Crash], &[CrashPoint::After]),
        ..Scenario::standard()
    })
    .unwrap();
    let rows: Vec<(Strategy, Downstream)> =
        r.cells.iter().map(|c| (c.strategy, c.downstream)).collect();
    assert_eq!(
        rows,
        [
            (Strategy::Reconcile, Downstream::KeyHonoured),
            (Strategy::Reconcile, Downstream::KeyIgnored),
            (Strategy::NoGuard, Downstream::NoKey),
        ]
    );
    assert_eq!(r.faults(), [AFTER]);
}

#[test]
fn bad_scenarios_and_names_are_refused_with_the_rule() {
    let bad = |s: Scenario| run(&s).unwrap_err().to_string();
    let base = Scenario::standard;
    assert!(bad(Scenario {
        events: 0,
        ..base()
    })
    .contains("between 1 and 100000"));
    assert!(bad(Scenario {
        rate: 0.0,
        ..base()
    })
    .contains("rate"));
    assert!(bad(Scenario {
        rate: 1.5,
        ..base()
    })
    .contains("at most 1"));
    assert!(bad(Scenario {
        faults: vec![],
        ..base()
    })
    .contains("at least one"));
    assert_eq!("a".parse::<Strategy>().unwrap(), Strategy::NoGuard);
    assert_eq!("G".parse::<Strategy>().unwrap(), Strategy::Reconcile);
    assert_eq!(
        "lookup-insert".parse::<Strategy>().unwrap(),
        Strategy::LookupInsert
    );
    let err = "h".parse::<Strategy>().unwrap_err().to_string();
    assert!(
        err.contains("a|no-guard") && err.contains("g|reconcile"),
        "{err}"
    );
    assert_eq!("storm".parse::<FaultKind>().unwrap(), FaultKind::Storm);
    assert!("flood".parse::<FaultKind>().is_err());
}
