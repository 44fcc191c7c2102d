//! PostgreSQL's plans on tables without statistics: a fresh database, or
//! a burst before autovacuum's next `ANALYZE`. A plan made then can stay
//! as a statement's generic plan until the statistics change, so the hot
//! statements are checked here for the plan they get with none.

use oncegate::db::postgres::{claim, complete, intake};
use oncegate::db::sql::{Dialect, Statements};
use sqlx::postgres::PgArguments;

use crate::harness::{Backend, TestDb};

/// The plan of `statement` (PostgreSQL) with `binds`, run after `plan` in
/// one transaction that is rolled back.
pub async fn explain(
    db: &TestDb,
    plan: Option<&str>,
    statement: &str,
    binds: PgArguments,
) -> String {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut tx = c.begin().await.unwrap();
    if let Some(plan) = plan {
        sqlx::query(plan).execute(&mut *tx).await.unwrap();
    }
    let sql = format!("EXPLAIN {statement}");
    let lines: Vec<String> = sqlx::query_scalar_with(&sql, binds)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    lines.join("\n")
}

/// Bind values for [`explain`].
pub fn binds(
    values: impl FnOnce(&mut PgArguments) -> Result<(), sqlx::error::BoxDynError>,
) -> PgArguments {
    let mut args = PgArguments::default();
    values(&mut args).unwrap();
    args
}

/// A proxy's replay reads its run by key, alone or in a batch, even in
/// the generic plan made before any statistics, on an empty ledger and on
/// a few hundred runs: spelled with `EXISTS (… state = 'completed' …)`,
/// that plan walked `runs_state_updated` through every completed run on
/// each read.
#[tokio::test]
async fn postgres_replays_read_the_run_by_key_without_statistics() {
    let db = TestDb::new(Backend::Postgres).await;
    let st = Statements::new(Dialect::Postgres).proxy;
    let generic = Some("SET LOCAL plan_cache_mode = force_generic_plan");
    let single = || {
        binds(|a| {
            use sqlx::Arguments;
            a.add(None::<i64>)?;
            a.add("proxy:p")?;
            a.add("k")?;
            a.add("sha256:h")
        })
    };
    let batch = || {
        binds(|a| {
            use sqlx::Arguments;
            a.add(None::<i64>)?;
            a.add(vec!["proxy:p", "proxy:p"])?;
            a.add(vec!["k1", "k2"])?;
            a.add(vec!["sha256:h", "sha256:h"])
        })
    };
    let batched = st
        .replay_batch
        .as_deref()
        .expect("PostgreSQL batches replays");
    for seeded in [0, 300] {
        seed_runs(&db, seeded).await;
        for (statement, binds) in [(st.replay.as_str(), single()), (batched, batch())] {
            let plan = explain(&db, generic, statement, binds).await;
            assert!(
                plan.contains("Index Scan using runs_pkey"),
                "{seeded} runs:\n{plan}"
            );
            assert!(
                !plan.contains("runs_state_updated") && !plan.contains("runs_business_key"),
                "a replay walks the completed runs at {seeded} runs:\n{plan}"
            );
        }
    }
}

/// The generic plan of `statement` (PostgreSQL), its parameters' types
/// inferred by PostgreSQL and bound to NULL (a generic plan does not
/// depend on them). Nothing is executed: `EXPLAIN` only plans.
async fn generic_plan(db: &TestDb, statement: &str) -> String {
    use sqlx::Connection;
    let params = (1..=64)
        .take_while(|n| statement.contains(&format!("${n}")))
        .count();
    let nulls = vec!["NULL"; params].join(", ");
    // Inferred where the statement says (`unknown`); a parameter only ever
    // compared with another parameter is declared text.
    let mut types = vec!["unknown"; params];
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut c)
        .await
        .unwrap();
    loop {
        let prepare = format!("PREPARE keyed ({}) AS {statement}", types.join(", "));
        match sqlx::raw_sql(&prepare).execute(&mut c).await {
            Ok(_) => break,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P08") => {
                let n: usize = e.message().rsplit('$').next().unwrap().parse().unwrap();
                assert_eq!(types[n - 1], "unknown", "{e}: {statement}");
                types[n - 1] = "text";
            }
            Err(e) => panic!("{e}: {statement}"),
        }
    }
    let explain = format!("EXPLAIN EXECUTE keyed({nulls})");
    let lines: Vec<String> = sqlx::query_scalar(&explain)
        .fetch_all(&mut c)
        .await
        .unwrap();
    lines.join("\n")
}

/// Every move of a run or an effect found by its key reads it by key in
/// the generic plan made before any statistics, on an empty ledger and on
/// a few hundred runs: spelled `… AND state IN ('processing')`, the
/// owner's completion walked `runs_state_updated` through every run in
/// flight.
#[tokio::test]
async fn postgres_keyed_moves_never_walk_a_state_index_without_statistics() {
    let db = TestDb::new(Backend::Postgres).await;
    let st = Statements::new(Dialect::Postgres);
    let (runs, outbox) = (&st.runs, &st.outbox);
    let mut keyed: Vec<(&str, &String)> = vec![
        ("renew", &runs.renew),
        ("owner_touch", &runs.owner_touch),
        ("exhaust", &runs.exhaust),
        ("strand", &runs.strand),
        ("complete_run", &runs.complete_run),
        ("fail_run", &runs.fail_run),
        ("requeue_effects", &outbox.requeue_effects),
        ("correct_effect", &outbox.correct_effect),
        ("cancel", &outbox.cancel),
    ];
    let at_head = [complete::statement(false), complete::statement(true)];
    keyed.extend(at_head.iter().map(|sql| ("complete_at_head", sql)));
    for moves in [
        &runs.finish,
        &runs.system_move,
        &runs.operator_move,
        &runs.fail_by_execution,
    ] {
        keyed.extend(moves.values().map(|sql| ("move", sql)));
    }
    for seeded in [0, 300] {
        seed_runs(&db, seeded).await;
        for (name, statement) in &keyed {
            let plan = generic_plan(&db, statement).await;
            assert!(
                !plan.contains("runs_state_updated") && !plan.contains("effects_due"),
                "{name} walks a state index at {seeded} runs:\n{plan}"
            );
            assert!(
                !plan.contains("runs_business_key"),
                "{name} walks the business keys at {seeded} runs:\n{plan}"
            );
            assert!(
                plan.contains("Index Scan using"),
                "{name}, {seeded} runs:\n{plan}"
            );
        }
    }
}

/// `n` runs written straight into `runs` of `db`, with autovacuum off for
/// the table, so that no statistics exist when a plan is made: a young
/// ledger, or one just after a burst.
async fn seed_runs(db: &TestDb, n: i64) {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("ALTER TABLE runs SET (autovacuum_enabled = false)")
        .execute(&mut c)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO runs (namespace, run_key, state, payload_hash, version, attempts, \
             claimed_by, correlation_id, audit_seq, created_at, updated_at) \
         SELECT 'seeded', 'k' || g, 'completed', 'sha256:x', 1, 1, 'seed', 'c', 1, 0, 0 \
         FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(&mut c)
    .await
    .unwrap();
}

/// A batched claim or intake reads the run already holding a key by that
/// key in its generic plan, on an empty ledger and on one of a few hundred
/// runs without statistics. While every run stood in `runs_business_key`
/// (a NULL business key too), the plan made at a few hundred runs scanned
/// that index for the namespace instead: every run of it, for each
/// duplicate of the batch, for as long as the connection kept the plan.
#[tokio::test]
async fn postgres_batched_claims_read_an_existing_run_by_key_without_statistics() {
    let db = TestDb::new(Backend::Postgres).await;
    let batches = [
        ("claim", claim::statement_for_batch()),
        ("intake", intake::statement_for_batch()),
    ];
    for seeded in [0, 300] {
        seed_runs(&db, seeded).await;
        for (name, statement) in &batches {
            let plan = generic_plan(&db, statement).await;
            assert!(
                plan.contains("Index Scan using runs_pkey on runs"),
                "{name}, {seeded} runs:\n{plan}"
            );
            assert!(
                !plan.contains("runs_business_key"),
                "{name} walks the business keys at {seeded} runs:\n{plan}"
            );
        }
    }
}
