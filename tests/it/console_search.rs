//! The console's run search on both backends: every order pages through
//! all matches once, a key search is in byte order whatever the collation,
//! and each search's plan names the index it walks.

use std::sync::Arc;

use oncegate::clock::SystemClock;
use oncegate::db::exec::Arg;
use oncegate::db::sql::console::search_sql;
use oncegate::db::sql::Dialect;
use oncegate::ledger::port::{RunCursor, RunSearch};
use oncegate::ledger::{
    ClaimOutcome, ClaimRequest, IdempotencyKey, Namespace, OwnerCall, PayloadHash, RunMetadata,
    RunState,
};
use sqlx::{Connection, Row};

use crate::harness::{on_both_backends, Backend, TestDb};

on_both_backends!(
    run_search_pages_through_every_order,
    key_search_walks_an_index
);

type Ids = Vec<(String, String)>;

async fn every_page(store: &oncegate::db::SharedStore, mut search: RunSearch) -> Ids {
    let mut out = Vec::new();
    loop {
        let page = store.search_runs(&search).await.unwrap();
        out.extend(
            page.iter()
                .map(|r| (r.namespace.to_string(), r.key.to_string())),
        );
        match page.last() {
            Some(last) if page.len() as i64 == search.limit => {
                search.after = Some(RunCursor::after(last))
            }
            _ => return out,
        }
    }
}

fn ids(list: &[(&str, &str)]) -> Ids {
    list.iter()
        .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
        .collect()
}

fn sorted(mut v: Ids) -> Ids {
    v.sort();
    v
}

/// Seven runs in three namespaces; every third completed.
async fn seeded_store(db: &TestDb) -> oncegate::db::SharedStore {
    let store = db.store(Arc::new(SystemClock), true).await;
    let keys = [
        ("crm", "order/1?a#b"),
        ("crm", "order-2"),
        ("crm", "invoice-9"),
        ("shop", "order-3"),
        ("shop", "order-10"),
        ("shop", "zeta"),
        ("billing", "order-2"),
    ];
    for (i, (ns, key)) in keys.iter().enumerate() {
        let req = ClaimRequest {
            namespace: Namespace::parse(*ns).unwrap(),
            key: IdempotencyKey::parse(*key).unwrap(),
            business_key: None,
            payload_hash: PayloadHash::of_bytes(key.as_bytes()),
            lease_ms: 60_000,
            metadata: RunMetadata {
                execution_ref: Some(if i % 2 == 0 { "exec-even" } else { "exec-odd" }.into()),
                ..RunMetadata::default()
            },
            claimed_by: "test".into(),
        };
        let ClaimOutcome::Claimed { lease, .. } = store.claim(&req).await.unwrap() else {
            panic!("claim {key}")
        };
        if i % 3 == 0 {
            let call = OwnerCall {
                namespace: req.namespace,
                key: req.key,
                lease,
                actor: "test".into(),
            };
            store.commit(&call, None, &[]).await.unwrap();
        }
    }
    store
}

async fn run_search_pages_through_every_order(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = seeded_store(&db).await;
    let search = |f: fn(&mut RunSearch)| {
        let mut s = RunSearch {
            limit: 2,
            ..RunSearch::default()
        };
        f(&mut s);
        s
    };
    let by_key = every_page(&store, search(|s| s.key_prefix = Some("order".into()))).await;
    assert_eq!(
        by_key,
        ids(&[
            ("shop", "order-10"),
            ("billing", "order-2"),
            ("crm", "order-2"),
            ("shop", "order-3"),
            ("crm", "order/1?a#b"),
        ]),
        "a key search is in byte order of (key, namespace), whatever the collation"
    );
    let exact = every_page(&store, search(|s| s.key_prefix = Some("order-2".into()))).await;
    assert_eq!(exact, ids(&[("billing", "order-2"), ("crm", "order-2")]));
    let in_crm = every_page(
        &store,
        search(|s| {
            s.key_prefix = Some("order".into());
            s.namespace = Some("crm".into());
        }),
    )
    .await;
    assert_eq!(in_crm, ids(&[("crm", "order-2"), ("crm", "order/1?a#b")]));
    let shop = every_page(&store, search(|s| s.namespace = Some("shop".into()))).await;
    assert_eq!(
        sorted(shop),
        ids(&[("shop", "order-10"), ("shop", "order-3"), ("shop", "zeta")])
    );
    let done = every_page(&store, search(|s| s.state = Some(RunState::Completed))).await;
    assert_eq!(
        done[0],
        ("billing".to_owned(), "order-2".to_owned()),
        "newest first"
    );
    assert_eq!(
        sorted(done),
        ids(&[
            ("billing", "order-2"),
            ("crm", "order/1?a#b"),
            ("shop", "order-3")
        ])
    );
    let even = every_page(
        &store,
        search(|s| s.execution_ref = Some("exec-even".into())),
    )
    .await;
    assert_eq!(even.len(), 4);
    let processing_even = every_page(
        &store,
        search(|s| {
            s.execution_ref = Some("exec-even".into());
            s.state = Some(RunState::Processing);
        }),
    )
    .await;
    assert_eq!(
        sorted(processing_even),
        ids(&[("crm", "invoice-9"), ("shop", "order-10")])
    );
    let all = every_page(&store, search(|_| {})).await;
    assert_eq!(all.len(), 7);
    assert_eq!(sorted(all.clone()).len(), {
        let mut d = sorted(all);
        d.dedup();
        d.len()
    });
    let none = every_page(&store, search(|s| s.key_prefix = Some("nothing".into()))).await;
    assert!(none.is_empty());
    store.close().await;
}

/// The plan of each search names its index (PostgreSQL told to avoid
/// sequential scans, which it prefers on a tiny table).
async fn key_search_walks_an_index(backend: Backend) {
    let db = TestDb::new(backend).await;
    let store = seeded_store(&db).await;
    let cases = [
        (
            RunSearch {
                key_prefix: Some("order".into()),
                limit: 50,
                ..RunSearch::default()
            },
            "runs_key",
        ),
        (
            RunSearch {
                state: Some(RunState::Completed),
                limit: 50,
                ..RunSearch::default()
            },
            "runs_state_updated",
        ),
        (
            RunSearch {
                execution_ref: Some("exec-odd".into()),
                limit: 50,
                ..RunSearch::default()
            },
            "runs_execution_ref",
        ),
    ];
    for (search, index) in cases {
        let plan = match backend {
            Backend::Sqlite => {
                let (sql, binds) = search_sql(Dialect::Sqlite, &search);
                let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                let sql = format!("EXPLAIN QUERY PLAN {sql}");
                let mut q = sqlx::query(&sql);
                for b in binds.into_inner() {
                    q = match b {
                        Arg::Text(t) => q.bind(t.map(|t| t.into_owned())),
                        Arg::Int(i) => q.bind(i),
                        other => panic!("a search binds text and integers only: {other:?}"),
                    };
                }
                let rows = q.fetch_all(&mut c).await.unwrap();
                rows.iter()
                    .map(|r| r.get::<String, _>("detail"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Backend::Postgres => {
                let (sql, binds) = search_sql(Dialect::Postgres, &search);
                let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
                sqlx::query("SET enable_seqscan = off")
                    .execute(&mut c)
                    .await
                    .unwrap();
                let sql = format!("EXPLAIN {sql}");
                let mut q = sqlx::query(&sql);
                for b in binds.into_inner() {
                    q = match b {
                        Arg::Text(t) => q.bind(t.map(|t| t.into_owned())),
                        Arg::Int(i) => q.bind(i),
                        other => panic!("a search binds text and integers only: {other:?}"),
                    };
                }
                let rows = q.fetch_all(&mut c).await.unwrap();
                rows.iter()
                    .map(|r| r.get::<String, _>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        assert!(
            plan.contains(index),
            "{search:?} should use {index}:\n{plan}"
        );
    }
    store.close().await;
}
