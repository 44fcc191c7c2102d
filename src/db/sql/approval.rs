//! The SQL of approval challenges, browser sessions and recorded model
//! output, written once for both backends.

use super::Dialect;
use crate::approval::ChallengeMove;

/// The `challenges` columns statements return, in `ChallengeRow` order.
pub(crate) const CHALLENGE_COLUMNS: &str =
    "id, namespace, run_key, token_hash, operation, decisions, audience, required_roles, \
    approver_auth, state, effects, callback_url, callback_target, card, escalation, created_at, \
    expires_at, decided_at, decided_by, auth_method, reason";

/// The approval statements, spelled for one backend.
#[derive(Debug, Clone)]
pub struct ApprovalStatements {
    /// Creates a challenge. Binds (21): the columns of [`CHALLENGE_COLUMNS`]
    /// in order, `state` given.
    pub insert_challenge: String,
    /// One challenge by token digest. Binds: token_hash.
    pub by_token: String,
    /// One challenge by id. Binds: id.
    pub by_id: String,
    /// Newest challenges in one state. Binds: state, limit.
    pub in_state: String,
    /// Newest challenges. Binds: limit.
    pub newest: String,
    /// Consumes a pending, unexpired challenge. Binds: now, id, state,
    /// decided_by, auth_method, reason.
    pub consume: String,
    /// Pending challenges past expiry. Binds: now, limit.
    pub due: String,
    /// Closes a pending challenge past its expiry. Binds: now, id, state.
    pub close_due: String,
    /// Stores a session. Binds: id_hash, subject, scopes, roles,
    /// auth_method, created_at, expires_at, credential.
    pub insert_session: String,
    /// An unexpired session. Binds: now, id_hash.
    pub session: String,
    /// Ends a session. Binds: id_hash.
    pub delete_session: String,
    /// Deletes expired sessions. Binds: now.
    pub purge_sessions: String,
    /// Records a model output as the run's next attempt. Binds: namespace,
    /// key, operation, valid, output, violations, provider_class, model,
    /// revision, actor, created_at.
    pub insert_output: String,
    /// The run's latest output. Binds: namespace, key.
    pub latest_output: String,
    /// Stores a server secret unless one exists. Binds: name, value, now.
    pub insert_secret: String,
    /// A server secret. Binds: name.
    pub secret: String,
}

impl ApprovalStatements {
    /// The statements spelled for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        let now = dialect.now();
        Self {
            insert_secret: "INSERT INTO server_secrets (name, value, created_at) \
                 VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING"
                .into(),
            secret: "SELECT value FROM server_secrets WHERE name = $1".into(),
            insert_challenge: format!(
                "INSERT INTO challenges ({CHALLENGE_COLUMNS}) VALUES ({})",
                super::placeholders(1, 21)
            ),
            by_token: format!("SELECT {CHALLENGE_COLUMNS} FROM challenges WHERE token_hash = $1"),
            by_id: format!("SELECT {CHALLENGE_COLUMNS} FROM challenges WHERE id = $1"),
            in_state: format!(
                "SELECT {CHALLENGE_COLUMNS} FROM challenges WHERE state = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            ),
            newest: format!(
                "SELECT {CHALLENGE_COLUMNS} FROM challenges ORDER BY created_at DESC, id DESC LIMIT $1"
            ),
            consume: format!(
                "UPDATE challenges SET state = $3, decided_at = {now}, decided_by = $4, \
                     auth_method = $5, reason = $6 \
                 WHERE id = $2 AND state IN {pending} AND expires_at > {now} \
                 RETURNING {CHALLENGE_COLUMNS}",
                pending = ChallengeMove::Decide.rule().sql_guard(),
            ),
            due: format!(
                "SELECT {CHALLENGE_COLUMNS} FROM challenges \
                 WHERE state = 'pending' AND expires_at <= {now} ORDER BY expires_at LIMIT $2"
            ),
            close_due: format!(
                "UPDATE challenges SET state = $3, decided_at = {now} \
                 WHERE id = $2 AND state IN {pending} AND expires_at <= {now} \
                 RETURNING {CHALLENGE_COLUMNS}",
                pending = ChallengeMove::Expire.rule().sql_guard(),
            ),
            insert_session: "INSERT INTO sessions (id_hash, subject, scopes, roles, auth_method, \
                 created_at, expires_at, credential) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (id_hash) DO NOTHING"
                .into(),
            session: format!(
                "SELECT id_hash, subject, scopes, roles, auth_method, expires_at, credential \
                 FROM sessions \
                 WHERE id_hash = $2 AND expires_at > {now}"
            ),
            delete_session: "DELETE FROM sessions WHERE id_hash = $1".into(),
            purge_sessions: format!("DELETE FROM sessions WHERE expires_at <= {now}"),
            insert_output: "INSERT INTO run_outputs (namespace, run_key, attempt, operation, valid, \
                 output, violations, provider_class, model, revision, actor, created_at) \
                 VALUES ($1, $2, (SELECT COUNT(*) + 1 FROM run_outputs WHERE namespace = $1 \
                     AND run_key = $2), $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 RETURNING attempt"
                .into(),
            latest_output: "SELECT attempt, operation, valid, output, violations, provider_class, \
                 model, revision, created_at FROM run_outputs WHERE namespace = $1 AND run_key = $2 \
                 ORDER BY attempt DESC LIMIT 1"
                .into(),
        }
    }
}
