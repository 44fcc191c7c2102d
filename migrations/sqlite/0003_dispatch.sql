-- Dispatch evidence and the kill switch.
-- Mirrors migrations/postgres/0003_dispatch.sql column for column.

CREATE TABLE effect_attempts (
    effect_id   TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    dispatcher  TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    class       TEXT    NOT NULL,
    status      INTEGER,
    error       TEXT,
    evidence    TEXT    NOT NULL,
    PRIMARY KEY (effect_id, attempt)
);

-- scope is '*' (every target) or a target name; enabled = 0 holds effects.
CREATE TABLE action_switches (
    scope      TEXT    PRIMARY KEY,
    enabled    INTEGER NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at INTEGER NOT NULL
);

CREATE INDEX effects_run ON effects (namespace, run_key, state);
