-- The outbox (effects), raw ingress events, and dead letters.
-- Mirrors migrations/postgres/0002_outbox_ingress.sql column for column.

CREATE TABLE effects (
    id               TEXT    PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    run_key          TEXT    NOT NULL,
    operation        TEXT    NOT NULL,
    effect_type      TEXT    NOT NULL,
    target           TEXT    NOT NULL,
    method           TEXT    NOT NULL,
    url              TEXT    NOT NULL,
    headers          TEXT    NOT NULL,
    body             BLOB,
    idempotency_key  TEXT    NOT NULL,
    spec             TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'sending', 'completed',
                         'unknown', 'failed', 'cancelled')),
    not_before       INTEGER,
    next_attempt_at  INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_sent_at    INTEGER,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    external_ref     TEXT,
    last_status      INTEGER,
    last_class       TEXT,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    FOREIGN KEY (namespace, run_key) REFERENCES runs (namespace, run_key),
    UNIQUE (namespace, run_key, effect_type, target)
);
CREATE INDEX effects_due ON effects (state, next_attempt_at);

CREATE TABLE raw_events (
    id           TEXT    PRIMARY KEY,
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    event_type   TEXT,
    status       TEXT    NOT NULL CHECK (status IN ('accepted', 'quarantined')),
    payload_hash TEXT    NOT NULL,
    content_type TEXT,
    headers      TEXT    NOT NULL,
    body         BLOB    NOT NULL,
    received_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX raw_events_accepted ON raw_events (source, event_id) WHERE status = 'accepted';

CREATE TABLE dead_letters (
    id           TEXT    PRIMARY KEY,
    namespace    TEXT    NOT NULL,
    run_key      TEXT    NOT NULL,
    class        TEXT    NOT NULL,
    component    TEXT    NOT NULL,
    raw_event_id TEXT,
    detail       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    resolved_at  INTEGER,
    resolution   TEXT
);
CREATE INDEX dead_letters_open ON dead_letters (class, created_at) WHERE resolved_at IS NULL;
