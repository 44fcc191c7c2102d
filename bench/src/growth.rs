//! Seeding a database with existing runs, by SQL, for the growth phase.
//!
//! Each seeded run is a completed run in the benchmark's namespace with a
//! random key (so new claims land among them in every index) and its one
//! audit event, as a real ledger holds.

use anyhow::Result;

use crate::db::Database;

/// Rows inserted per statement (bounded memory, visible progress).
const CHUNK: u64 = 500_000;

/// Inserts `n` completed runs (and their audit events), then refreshes the
/// planner's statistics.
pub async fn seed(db: &Database, n: u64) -> Result<()> {
    let mut done = 0;
    while done < n {
        let count = CHUNK.min(n - done);
        let sql = if db.backend == "sqlite" {
            sqlite_chunk(count)
        } else {
            postgres_chunk(done, count)
        };
        db.exec(&sql).await?;
        done += count;
        if n >= 2 * CHUNK {
            eprintln!("  seeded {done} of {n} rows");
        }
    }
    if db.backend == "sqlite" {
        db.exec("PRAGMA wal_checkpoint(TRUNCATE); ANALYZE").await
    } else {
        // VACUUM refuses to run inside the implicit transaction of a
        // multi-statement string: one statement per call.
        db.exec("VACUUM ANALYZE runs").await?;
        db.exec("VACUUM ANALYZE audit_events").await
    }
}

fn sqlite_chunk(count: u64) -> String {
    format!(
        "PRAGMA cache_size = -262144; PRAGMA synchronous = OFF; BEGIN; \
         CREATE TEMP TABLE IF NOT EXISTS seed_keys (k TEXT, t INTEGER); DELETE FROM seed_keys; \
         WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {count}) \
         INSERT INTO seed_keys SELECT 'seed_' || lower(hex(randomblob(8))), \
             1700000000000 + abs(random() % 100000000000) FROM s; \
         INSERT OR IGNORE INTO runs (namespace, run_key, state, prev_state, payload_hash, version, \
             attempts, result, correlation_id, claimed_by, audit_seq, audit_head, created_at, updated_at) \
         SELECT 'bench', k, 'completed', 'processing', \
             'sha256:' || lower(hex(randomblob(32))), 2, 1, '{{\"ok\":true}}', \
             lower(hex(randomblob(16))), 'seed', 1, 'sha256:' || lower(hex(randomblob(32))), t, t \
         FROM seed_keys; \
         INSERT OR IGNORE INTO audit_events (namespace, run_key, seq, kind, actor, from_state, \
             to_state, version, detail, prev_hash, hash, created_at) \
         SELECT 'bench', k, 1, 'claim', 'seed', NULL, 'processing', 1, '{{\"attempt\":1}}', NULL, \
             'sha256:' || lower(hex(randomblob(32))), t FROM seed_keys; \
         COMMIT;"
    )
}

fn postgres_chunk(offset: u64, count: u64) -> String {
    let (from, to) = (offset + 1, offset + count);
    format!(
        "INSERT INTO runs (namespace, run_key, state, prev_state, payload_hash, version, attempts, \
             result, correlation_id, claimed_by, audit_seq, audit_head, created_at, updated_at) \
         SELECT 'bench', 'seed_' || md5(i::text), 'completed', 'processing', \
             'sha256:' || md5(i::text) || md5((i + 1)::text), 2, 1, '{{\"ok\":true}}', md5((-i)::text), \
             'seed', 1, 'sha256:' || md5((i + 7)::text), 1700000000000 + i, 1700000000000 + i \
         FROM generate_series({from}, {to}) AS i ON CONFLICT DO NOTHING; \
         INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, to_state, \
             version, detail, prev_hash, hash, created_at) \
         SELECT 'bench', 'seed_' || md5(i::text), 1, 'claim', 'seed', NULL, 'processing', 1, \
             '{{\"attempt\":1}}', NULL, 'sha256:' || md5((i + 3)::text), 1700000000000 + i \
         FROM generate_series({from}, {to}) AS i ON CONFLICT DO NOTHING;"
    )
}
