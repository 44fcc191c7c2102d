-- The idempotency ledger, its audit log and stored API token digests.
-- Times are milliseconds since the Unix epoch; JSON is stored as text.
-- Mirrors migrations/postgres/0001_ledger.sql column for column.

CREATE TABLE runs (
    namespace        TEXT    NOT NULL,
    run_key          TEXT    NOT NULL,
    business_key     TEXT,
    state            TEXT    NOT NULL CHECK (state IN ('processing', 'awaiting_human', 'approved',
                         'completed', 'failed_retryable', 'failed_terminal', 'dead_lettered')),
    prev_state       TEXT,
    payload_hash     TEXT    NOT NULL,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    lease_started_at INTEGER,
    version          INTEGER NOT NULL CHECK (version >= 1),
    attempts         INTEGER NOT NULL,
    result           TEXT,
    last_error       TEXT,
    reason           TEXT,
    operation        TEXT,
    correlation_id   TEXT    NOT NULL,
    workflow_version TEXT,
    source_url       TEXT,
    execution_ref    TEXT,
    requested_by     TEXT,
    claimed_by       TEXT    NOT NULL,
    audit_seq        INTEGER NOT NULL DEFAULT 0,
    audit_head       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    archived_at      INTEGER,
    PRIMARY KEY (namespace, run_key)
);

CREATE UNIQUE INDEX runs_business_key ON runs (business_key);
CREATE INDEX runs_state_updated ON runs (state, updated_at);
CREATE INDEX runs_execution_ref ON runs (execution_ref) WHERE execution_ref IS NOT NULL;

CREATE TABLE audit_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    run_key    TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    from_state TEXT,
    to_state   TEXT,
    version    INTEGER,
    detail     TEXT    NOT NULL,
    prev_hash  TEXT,
    hash       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (namespace, run_key, seq)
);

CREATE TABLE api_tokens (
    digest     TEXT    PRIMARY KEY,
    subject    TEXT    NOT NULL,
    scopes     TEXT    NOT NULL,
    roles      TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
