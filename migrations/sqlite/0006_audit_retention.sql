-- Audit checkpoints, verification records, maintenance leases, and the
-- marker of effect bodies scrubbed by redaction.
-- Mirrors migrations/postgres/0006_audit_retention.sql column for column.

-- One row per checkpoint: a digest over every chain head (audit_heads as
-- it was when the row was written), chained to the previous checkpoint.
-- ids run 1, 2, 3, ...: a gap is a deleted checkpoint.
CREATE TABLE audit_checkpoints (
    id          INTEGER PRIMARY KEY,
    created_at  INTEGER NOT NULL,
    chain_count INTEGER NOT NULL,
    digest      TEXT    NOT NULL,
    changed     INTEGER NOT NULL,
    removed     INTEGER NOT NULL,
    anomalies   INTEGER NOT NULL,
    reason      TEXT    NOT NULL CHECK (reason IN ('periodic', 'manual', 'retention')),
    prev_hash   TEXT,
    hash        TEXT    NOT NULL
);

-- The head of every chain as of the latest checkpoint (one row per key);
-- written only together with a checkpoint row.
CREATE TABLE audit_heads (
    namespace     TEXT    NOT NULL,
    run_key       TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    head          TEXT    NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    PRIMARY KEY (namespace, run_key)
);

-- Results of `oncegate audit verify` and the periodic verification.
CREATE TABLE audit_verifications (
    id            TEXT    PRIMARY KEY,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER NOT NULL,
    namespace     TEXT,
    chains        INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    first_failure TEXT,
    checkpoint_id INTEGER
);
CREATE INDEX audit_verifications_finished ON audit_verifications (finished_at);

-- One holder at a time for a periodic job (checkpoint, retention, verify)
-- across every oncegate process on the database.
CREATE TABLE maintenance_leases (
    name       TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Set when the sweeper replaced a delivered effect's body by its redacted form.
ALTER TABLE effects ADD COLUMN redacted_at INTEGER;
CREATE INDEX effects_unredacted ON effects (namespace) WHERE redacted_at IS NULL AND body IS NOT NULL;
