-- Dispatch evidence and the kill switch.
-- Mirrors migrations/sqlite/0003_dispatch.sql column for column.

CREATE TABLE effect_attempts (
    effect_id   TEXT    NOT NULL,
    attempt     BIGINT NOT NULL,
    dispatcher  TEXT    NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    class       TEXT    NOT NULL,
    status      BIGINT,
    error       TEXT,
    evidence    TEXT    NOT NULL,
    PRIMARY KEY (effect_id, attempt)
);

-- scope is '*' (every target) or a target name; enabled = 0 holds effects.
CREATE TABLE action_switches (
    scope      TEXT    PRIMARY KEY,
    enabled    BIGINT NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at BIGINT NOT NULL
);

CREATE INDEX effects_run ON effects (namespace, run_key, state);
