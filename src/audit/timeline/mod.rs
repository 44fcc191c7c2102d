//! One key's history, arranged to answer the four audit questions: did we
//! process this key, did we send, who approved, which model drafted.
//!
//! Events are read by kind, generically: any `approval_*`, `gate`,
//! `replay*` or `resolve` event is a decision with its actor; any
//! `output_*` or `validation*` event is a model output with the provider,
//! model and revision its detail names. A kind added later shows up in the
//! raw event list at once, and in a section when its name fits.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

mod build;
mod load;

pub use build::{build, Material};
pub use load::load;

/// Did we process this key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Processed {
    /// Whether a run exists for the key.
    pub known: bool,
    /// Its state now.
    pub state: Option<String>,
    /// Times it was claimed.
    pub claims: i64,
    /// When retention slimmed it to a tombstone (its history is archived).
    pub archived_at: Option<String>,
    /// Every state change, oldest first.
    pub states: Vec<Step>,
}

/// One audited move.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Step {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind (`claim`, `complete`, …).
    pub kind: String,
    /// Who caused it.
    pub actor: String,
    /// State before.
    pub from: Option<String>,
    /// State after.
    pub to: Option<String>,
}

/// Did we send.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Sent {
    /// Whether any effect reached its target at least once.
    pub any_sent: bool,
    /// Whether every effect completed.
    pub all_completed: bool,
    /// Each effect with its attempts.
    pub effects: Vec<EffectLine>,
}

/// One effect.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EffectLine {
    /// Effect id.
    pub id: String,
    /// Declared operation.
    pub operation: String,
    /// Effect type.
    pub effect_type: String,
    /// Target name.
    pub target: String,
    /// State now.
    pub state: String,
    /// The downstream idempotency key.
    pub idempotency_key: String,
    /// The target's id for what it created.
    pub external_ref: Option<String>,
    /// When it was first sent (RFC 3339).
    pub first_sent_at: Option<String>,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptLine>,
}

/// One attempt (its evidence is at `GET /v1/runs/effects`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptLine {
    /// 1-based.
    pub attempt: i64,
    /// When it started (RFC 3339).
    pub at: String,
    /// Outcome class.
    pub class: String,
    /// HTTP status.
    pub status: Option<i64>,
    /// Error text.
    pub error: Option<String>,
}

/// A decision by a person or an operator (gate, approval, replay, resolve).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionLine {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind.
    pub kind: String,
    /// The token subject who acted.
    pub actor: String,
    /// The approver the event names (its `approver`, else the actor).
    pub approver: String,
    /// `approve`, `reject`, `expired`, `requested`, `replay`, or the detail's `decision`.
    pub decision: String,
    /// The event's detail.
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// A recorded model output.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelLine {
    /// Event sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Event kind.
    pub kind: String,
    /// Provider class (`openai`, `anthropic`, …).
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Model revision.
    pub revision: Option<String>,
    /// Whether the output validated.
    pub valid: Option<bool>,
    /// The event's detail.
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// Whether the key's hash chain verifies.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChainStatus {
    /// True when no row is bad.
    pub ok: bool,
    /// Events present.
    pub length: i64,
    /// The run row's head sequence number.
    pub head_seq: Option<i64>,
    /// The run row's head hash.
    pub head: Option<String>,
    /// The first bad row, in words.
    pub problem: Option<String>,
}

/// One raw audit event with its chain links.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventLine {
    /// Sequence number.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Kind.
    pub kind: String,
    /// Actor.
    pub actor: String,
    /// State before.
    pub from_state: Option<String>,
    /// State after.
    pub to_state: Option<String>,
    /// Fencing version after.
    pub version: Option<i64>,
    /// Redacted detail.
    #[schema(value_type = Object)]
    pub detail: Value,
    /// Previous event's hash.
    pub prev_hash: Option<String>,
    /// This event's hash.
    pub hash: String,
    /// False from the first bad row on.
    pub chain_ok: bool,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Timeline {
    /// Namespace.
    pub namespace: String,
    /// Key.
    pub key: String,
    /// Did we process this key.
    pub processed: Processed,
    /// Did we send.
    pub sent: Sent,
    /// Who approved (and every other human decision).
    pub approvals: Vec<DecisionLine>,
    /// Which model drafted.
    pub model_outputs: Vec<ModelLine>,
    /// The hash chain's status.
    pub chain: ChainStatus,
    /// Every event, oldest first.
    pub events: Vec<EventLine>,
}
