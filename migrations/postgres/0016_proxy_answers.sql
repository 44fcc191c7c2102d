-- The Idempotency-Key proxy (DESIGN.md §10): the answer a completed key
-- replays, byte for byte, kept beside its run (namespace `proxy:<name>`)
-- until `expires_at` (the proxy's `retention`). The run's result holds
-- only the answer's status, size and digest; the retention sweeper
-- deletes answers past their window, and a run slimmed to a tombstone
-- loses its answer with it.
CREATE TABLE proxy_answers (
    namespace  TEXT    NOT NULL,
    run_key    TEXT    NOT NULL,
    status     BIGINT  NOT NULL,
    headers    TEXT    NOT NULL,
    body       BYTEA   NOT NULL,
    stored_at  BIGINT  NOT NULL,
    expires_at BIGINT  NOT NULL,
    PRIMARY KEY (namespace, run_key)
);
CREATE INDEX proxy_answers_expiry ON proxy_answers (expires_at);
