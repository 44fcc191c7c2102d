-- Dead-letter records with their evidence, replacement links, and bulk
-- replay jobs. Mirrors migrations/sqlite/0005_deadletters.sql column for
-- column. Times are milliseconds since the Unix epoch; JSON is text.

-- What a dead letter holds beyond 0002's columns (DESIGN.md §7). Columns
-- written once when the record is made: event_id .. previous_id. Columns an
-- operator's action writes: owner, retain_until, replay_count,
-- resolved_by, resolution_note, replaced_by_*.
ALTER TABLE dead_letters ADD COLUMN event_id TEXT;
ALTER TABLE dead_letters ADD COLUMN correlation_id TEXT;
ALTER TABLE dead_letters ADD COLUMN operation TEXT;
ALTER TABLE dead_letters ADD COLUMN workflow_version TEXT;
ALTER TABLE dead_letters ADD COLUMN schema_version TEXT;
ALTER TABLE dead_letters ADD COLUMN payload_ref TEXT;
ALTER TABLE dead_letters ADD COLUMN payload_hash TEXT;
ALTER TABLE dead_letters ADD COLUMN error TEXT;
ALTER TABLE dead_letters ADD COLUMN attempts TEXT;
ALTER TABLE dead_letters ADD COLUMN last_evidence TEXT;
ALTER TABLE dead_letters ADD COLUMN run_state TEXT;
ALTER TABLE dead_letters ADD COLUMN next_action TEXT;
ALTER TABLE dead_letters ADD COLUMN previous_id TEXT;
ALTER TABLE dead_letters ADD COLUMN owner TEXT;
ALTER TABLE dead_letters ADD COLUMN retain_until BIGINT;
ALTER TABLE dead_letters ADD COLUMN replay_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN resolved_by TEXT;
ALTER TABLE dead_letters ADD COLUMN resolution_note TEXT;
ALTER TABLE dead_letters ADD COLUMN replaced_by_namespace TEXT;
ALTER TABLE dead_letters ADD COLUMN replaced_by_key TEXT;
CREATE INDEX dead_letters_run ON dead_letters (namespace, run_key);
CREATE INDEX dead_letters_page ON dead_letters (created_at, id);

-- A replacement event (a new upstream key) and the run it corrects; read
-- from either side.
CREATE TABLE run_links (
    namespace          TEXT    NOT NULL,
    run_key            TEXT    NOT NULL,
    replaced_by_ns     TEXT    NOT NULL,
    replaced_by_key    TEXT    NOT NULL,
    dead_letter_id     TEXT    NOT NULL,
    actor              TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    created_at         BIGINT  NOT NULL,
    PRIMARY KEY (namespace, run_key, replaced_by_ns, replaced_by_key)
);
CREATE INDEX run_links_replacement ON run_links (replaced_by_ns, replaced_by_key);

-- Bulk replay: the selection frozen into items at creation, worked by one
-- runner at a time (lease), item by item under a rate limit.
CREATE TABLE replay_jobs (
    id               TEXT    PRIMARY KEY,
    state            TEXT    NOT NULL CHECK (state IN ('running', 'stopped', 'completed')),
    created_by       TEXT    NOT NULL,
    reason           TEXT    NOT NULL,
    rate_per_sec     BIGINT  NOT NULL CHECK (rate_per_sec >= 1),
    selection        TEXT    NOT NULL,
    summary          TEXT    NOT NULL,
    total            BIGINT  NOT NULL,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    changed_by       TEXT    NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX replay_jobs_runnable ON replay_jobs (state, created_at);

CREATE TABLE replay_job_items (
    job_id         TEXT    NOT NULL REFERENCES replay_jobs (id),
    seq            BIGINT  NOT NULL,
    dead_letter_id TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('pending', 'replayed', 'refused')),
    outcome        TEXT,
    finished_at    BIGINT,
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX replay_job_items_state ON replay_job_items (job_id, state, seq);
