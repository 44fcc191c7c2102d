-- Approval challenges, browser sessions and recorded model output.
-- Mirrors migrations/postgres/0004_approvals.sql column for column.

-- One human decision point of a run. Only the SHA-256 of the link's token
-- is kept (NULL for challenges reached only from the approvals inbox, such
-- as escalations). The effects the decision releases are staged here, not
-- in the outbox, until the approval is consumed.
CREATE TABLE challenges (
    id              TEXT    PRIMARY KEY,
    namespace       TEXT    NOT NULL,
    run_key         TEXT    NOT NULL,
    token_hash      TEXT    UNIQUE,
    operation       TEXT    NOT NULL,
    decisions       TEXT    NOT NULL,
    audience        TEXT    NOT NULL,
    required_roles  TEXT    NOT NULL,
    approver_auth   TEXT    NOT NULL CHECK (approver_auth IN ('token_or_sso', 'sso')),
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'rejected',
                        'expired', 'escalated')),
    effects         TEXT    NOT NULL,
    callback_url    TEXT,
    callback_target TEXT,
    card            TEXT    NOT NULL,
    escalation      INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    decided_at      INTEGER,
    decided_by      TEXT,
    auth_method     TEXT,
    reason          TEXT,
    FOREIGN KEY (namespace, run_key) REFERENCES runs (namespace, run_key)
);
CREATE INDEX challenges_due ON challenges (state, expires_at);
CREATE INDEX challenges_run ON challenges (namespace, run_key);

-- A person's browser session: only the SHA-256 of the cookie is kept.
CREATE TABLE sessions (
    id_hash     TEXT    PRIMARY KEY,
    subject     TEXT    NOT NULL,
    scopes      TEXT    NOT NULL,
    roles       TEXT    NOT NULL,
    auth_method TEXT    NOT NULL CHECK (auth_method IN ('token', 'sso')),
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);

-- Every model output a run's owner posted, valid or not (attempts count).
CREATE TABLE run_outputs (
    namespace      TEXT    NOT NULL,
    run_key        TEXT    NOT NULL,
    attempt        INTEGER NOT NULL,
    operation      TEXT    NOT NULL,
    valid          INTEGER NOT NULL,
    output         TEXT    NOT NULL,
    violations     TEXT    NOT NULL,
    provider_class TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    revision       TEXT    NOT NULL,
    actor          TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (namespace, run_key, attempt),
    FOREIGN KEY (namespace, run_key) REFERENCES runs (namespace, run_key)
);
