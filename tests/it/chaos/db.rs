//! Reads the database under test by URL, from outside the process under
//! test (which may be dead): SQLite or PostgreSQL, one short connection per
//! question.

use std::time::Duration;

use sqlx::Connection;

use crate::harness::eventually;

/// Rows of one text column (NULL as "").
pub async fn texts(url: &str, sql: &str) -> Vec<String> {
    let rows: Vec<Option<String>> = if url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        let rows = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
        c.close().await.unwrap();
        rows
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let rows = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
        c.close().await.unwrap();
        rows
    };
    rows.into_iter().map(Option::unwrap_or_default).collect()
}

/// Rows of two text columns.
pub async fn pairs(url: &str, sql: &str) -> Vec<(String, String)> {
    if url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        let rows = sqlx::query_as(sql).fetch_all(&mut c).await.unwrap();
        c.close().await.unwrap();
        rows
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let rows = sqlx::query_as(sql).fetch_all(&mut c).await.unwrap();
        c.close().await.unwrap();
        rows
    }
}

/// The one integer `sql` selects.
pub async fn count(url: &str, sql: &str) -> i64 {
    if url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        let n = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
        c.close().await.unwrap();
        n
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let n = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
        c.close().await.unwrap();
        n
    }
}

/// After an oncegate process died: waits until PostgreSQL has closed every
/// session it held, so no commit it sent is still landing when the test
/// looks (SQLite needs no wait: a dead process holds no lock).
pub async fn wait_for_sessions_gone(url: &str) {
    if url.starts_with("sqlite:") {
        return;
    }
    eventually(
        "PostgreSQL to close the dead process's sessions",
        Duration::from_secs(20),
        || async {
            let left = count(
                url,
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = 'oncegate'",
            )
            .await;
            (left == 0).then_some(())
        },
    )
    .await;
}

/// Effects a process was sending when it died (their idempotency keys).
pub async fn sending_keys(url: &str) -> Vec<String> {
    texts(
        url,
        "SELECT idempotency_key FROM effects WHERE state = 'sending'",
    )
    .await
}

/// The effects whose outcome the dispatcher has declared unknown.
pub async fn unknown_keys(url: &str) -> Vec<String> {
    texts(
        url,
        "SELECT idempotency_key FROM effects WHERE state = 'unknown'",
    )
    .await
}

/// Whether every effect and run has reached a state no worker moves again
/// (an `unknown` effect whose run is dead-lettered waits for a person).
pub async fn settled(url: &str) -> bool {
    let open_effects = count(
        url,
        "SELECT COUNT(*) FROM effects WHERE state IN ('pending', 'sending')",
    )
    .await;
    let open_runs = count(
        url,
        "SELECT COUNT(*) FROM runs WHERE state IN ('processing', 'approved', 'failed_retryable')",
    )
    .await;
    open_effects == 0 && open_runs == 0
}

/// What keeps a run from settling, for the failure message.
pub async fn unsettled(url: &str) -> String {
    let effects = texts(
        url,
        "SELECT idempotency_key || ' ' || state || ' ' || COALESCE(last_class, '-') || ' ' || COALESCE(last_error, '-') \
         FROM effects WHERE state IN ('pending', 'sending') LIMIT 10",
    )
    .await;
    let runs = texts(
        url,
        "SELECT namespace || '/' || run_key || ' ' || state FROM runs \
         WHERE state IN ('processing', 'approved', 'failed_retryable') LIMIT 10",
    )
    .await;
    format!("open effects: {effects:#?}\nopen runs: {runs:#?}")
}
