//! The owner's completion of a run its claim batch won (PostgreSQL: one
//! statement at the chain head the batch wrote) answers and records
//! exactly as the general move does on either backend; a run moved since
//! its claim (renewed, or its chain moved on at the same version), or a
//! lease that is not the live one, goes the general way.

use oncegate::audit::verify_chain;
use oncegate::db::StoreError;
use oncegate::ledger::{
    ClaimOutcome, IdempotencyKey, Lease, LeaseOwner, Namespace, OwnerCall, OwnerMove, RunState,
};
use oncegate::proxy::Answer;
use oncegate::validate::port::NewOutput;
use serde_json::json;

use crate::claim_batches::{request, Store};
use crate::harness::{on_both_backends, Backend, TestDb};

on_both_backends!(owner_completions_answer_and_chain_as_the_general_move,);

/// Claims `key` (a new key: on PostgreSQL, through the claim batch).
async fn claimed(store: &Store, key: &str) -> OwnerCall {
    let ClaimOutcome::Claimed { run, lease, .. } =
        store.ledger().claim(&request(key)).await.unwrap()
    else {
        panic!("{key} is new");
    };
    OwnerCall {
        namespace: run.namespace,
        key: run.key,
        lease,
        actor: "n8n".into(),
    }
}

async fn owner_completions_answer_and_chain_as_the_general_move(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = Store::open(&db).await;
    let (ledger, proxy) = (store.ledger(), store.proxy());
    let complete = OwnerMove::Complete {
        result: Some(json!({"lead": "l_1"})),
    };

    // Completed right after the claim.
    let call = claimed(&store, "done_plain").await;
    let moved = ledger.finish(&call, &complete).await.unwrap();
    assert_eq!(moved.run.state, RunState::Completed);
    assert_eq!(moved.run.version.get(), 2);
    assert_eq!(moved.run.result, Some(json!({"lead": "l_1"})));
    assert_eq!(moved.lease, None);
    // A second completion by the same owner finds the run gone from it.
    let again = ledger.finish(&call, &complete).await.unwrap_err();
    assert!(
        matches!(again, StoreError::LostOwnership { .. }),
        "{again:?}"
    );

    // The proxy's completion keeps its answer beside the run.
    let call = claimed(&store, "done_proxy").await;
    let answer = Answer {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"id":"lead_1"}"#.to_vec(),
    };
    let moved = proxy
        .complete_with_answer(&call, &answer, 60_000)
        .await
        .unwrap();
    assert_eq!(moved.run.state, RunState::Completed);
    let kept = proxy
        .replay(&call.namespace, &call.key, &request("x").payload_hash)
        .await
        .unwrap();
    assert_eq!(kept, Some(answer.clone()), "the answer, byte for byte");

    // Renewed after the claim: the chain moved on, the general move runs.
    let call = claimed(&store, "done_renewed").await;
    let renewed = ledger.renew(&call, 30_000, 600_000).await.unwrap();
    let call = OwnerCall {
        lease: renewed.lease.expect("still owned"),
        ..call
    };
    let moved = ledger.finish(&call, &complete).await.unwrap();
    assert_eq!(moved.run.version.get(), 3);

    // An output recorded after the claim: the chain moved on at the same
    // version, the general move runs.
    let call = claimed(&store, "done_after_output").await;
    let output = NewOutput {
        operation: "draft".into(),
        output: json!({"subject": "hi"}),
        violations: Vec::new(),
        provider_class: "hosted".into(),
        model: "m".into(),
        revision: "1".into(),
    };
    store
        .outputs()
        .record_output(&call, &output, 2)
        .await
        .unwrap();
    let moved = ledger.finish(&call, &complete).await.unwrap();
    assert_eq!(moved.run.version.get(), 2);

    // Another owner's lease: refused, nothing written.
    let call = claimed(&store, "held").await;
    let forged = OwnerCall {
        lease: Lease {
            owner: LeaseOwner::generate(),
            ..call.lease
        },
        ..call.clone()
    };
    let lost = proxy
        .complete_with_answer(&forged, &answer, 60_000)
        .await
        .unwrap_err();
    assert!(matches!(lost, StoreError::LostOwnership { .. }), "{lost:?}");
    let run = ledger
        .get_run(&call.namespace, &call.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.state, RunState::Processing);

    let trail = |key: &str| {
        let audit = store.audit();
        let key = IdempotencyKey::parse(key).unwrap();
        async move {
            let ns = Namespace::parse("stripe").unwrap();
            audit.audit_trail(&ns, &key).await.unwrap()
        }
    };
    for (key, kinds) in [
        ("done_plain", &["claim", "complete"][..]),
        ("done_proxy", &["claim", "complete"]),
        ("done_renewed", &["claim", "renew", "complete"]),
        (
            "done_after_output",
            &["claim", "output_recorded", "complete"],
        ),
        ("held", &["claim"]),
    ] {
        let trail = trail(key).await;
        let got: Vec<_> = trail.iter().map(|r| r.entry.kind.as_str()).collect();
        assert_eq!(got, kinds, "{key}'s chain");
        verify_chain(&trail).unwrap_or_else(|seq| panic!("{key}'s chain breaks at {seq}"));
        let last = &trail.last().unwrap().entry;
        if key != "held" {
            assert_eq!(last.from_state.as_deref(), Some("processing"));
            assert_eq!(last.to_state.as_deref(), Some("completed"));
            assert_eq!(last.actor, "n8n");
        }
    }
    let plain = trail("done_plain").await;
    assert_eq!(
        plain[1].entry.detail,
        json!({"error": null, "has_result": true})
    );
    assert_eq!(plain[1].entry.version, Some(2));
    let proxied = trail("done_proxy").await;
    assert_eq!(proxied[1].entry.detail["proxy_answer"]["status"], 201);
    // Every run's head is its chain's last entry.
    assert_eq!(
        db.count(
            "SELECT COUNT(*) FROM runs r JOIN audit_events a ON a.namespace = r.namespace \
             AND a.run_key = r.run_key AND a.seq = r.audit_seq AND a.hash = r.audit_head"
        )
        .await,
        5
    );
    if let Store::Postgres(s) = &store {
        assert_eq!(
            s.completions_at_head(),
            2,
            "the two completions right after their claims went as one statement"
        );
    }
}
