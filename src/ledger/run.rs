//! A run as stored, and the requests and answers of the ledger calls.

use serde_json::Value;

use super::ids::{BusinessKey, IdempotencyKey, Namespace, PayloadHash};
use super::lease::{FencingVersion, Lease};
use super::state::RunState;
use crate::clock::Millis;

/// Who and what a run is about, beyond its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunMetadata {
    /// The operation the run performs, as declared in the config.
    pub operation: Option<String>,
    /// Ties the run to logs and downstream calls; generated when absent.
    pub correlation_id: Option<String>,
    /// The version of the workflow that claimed the run.
    pub workflow_version: Option<String>,
    /// A link to the source record.
    pub source_url: Option<String>,
    /// The workflow engine's execution id (never the key).
    pub execution_ref: Option<String>,
    /// The person on whose behalf the workflow acts, when known.
    pub requested_by: Option<String>,
}

/// One row of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Provider or tenant.
    pub namespace: Namespace,
    /// Business identity inside the namespace.
    pub key: IdempotencyKey,
    /// Optional identity unique across all runs.
    pub business_key: Option<BusinessKey>,
    /// Current state.
    pub state: RunState,
    /// The state before the last move, if any.
    pub prev_state: Option<RunState>,
    /// Hash of the payload the run was first claimed with.
    pub payload_hash: PayloadHash,
    /// Current owner and version while someone holds the run.
    pub lease: Option<Lease>,
    /// When the current lease ends.
    pub lease_expires_at: Option<Millis>,
    /// When the current owner first took the lease (bounds its total life).
    /// Kept after the run leaves `processing`, so the time it spent there
    /// is known; the next claim sets it afresh.
    pub lease_started_at: Option<Millis>,
    /// The fencing token.
    pub version: FencingVersion,
    /// How many times the run was claimed.
    pub attempts: i64,
    /// Reclaims since the run's reclaim budget started (its first claim,
    /// or the operator release that reset the budget).
    pub reclaims: i64,
    /// When an operator release restarted the reclaim budget (`None`:
    /// it runs from the first claim, `created_at`).
    pub budget_started_at: Option<Millis>,
    /// The owner's result, returned to duplicates.
    pub result: Option<Value>,
    /// The last sanitised error.
    pub last_error: Option<String>,
    /// Why the run ended where it did.
    pub reason: Option<String>,
    /// Metadata given at claim time.
    pub metadata: RunMetadata,
    /// The token subject that claimed the run last.
    pub claimed_by: String,
    /// When the run was first claimed.
    pub created_at: Millis,
    /// When the run last changed.
    pub updated_at: Millis,
    /// When retention slimmed the run to a tombstone.
    pub archived_at: Option<Millis>,
}

impl Run {
    /// When the run's reclaim budget started: the last operator release,
    /// or the first claim.
    pub fn budget_started(&self) -> Millis {
        self.budget_started_at.unwrap_or(self.created_at)
    }

    /// The correlation id (always set on stored runs).
    pub fn correlation_id(&self) -> &str {
        self.metadata.correlation_id.as_deref().unwrap_or_default()
    }
}

/// A request to claim `(namespace, key)`.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Provider or tenant.
    pub namespace: Namespace,
    /// Business identity.
    pub key: IdempotencyKey,
    /// Optional identity unique across all runs.
    pub business_key: Option<BusinessKey>,
    /// Hash of the payload; a different one under the same key is a conflict.
    pub payload_hash: PayloadHash,
    /// How long the lease lives before someone else may reclaim.
    pub lease_ms: i64,
    /// Metadata stored with the run.
    pub metadata: RunMetadata,
    /// The token subject making the claim.
    pub claimed_by: String,
}

impl ClaimRequest {
    /// The correlation id a new run takes: the caller's, or a fresh UUID v7.
    pub fn correlation_id(&self) -> String {
        self.metadata
            .correlation_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
    }
}

/// The answer to a claim (DESIGN.md §2).
#[derive(Debug, Clone)]
pub enum ClaimOutcome {
    /// The caller owns the run now.
    Claimed {
        /// The run after the claim.
        run: Run,
        /// The caller's lease.
        lease: Lease,
        /// The state the run was reclaimed from, if it existed before.
        reclaimed_from: Option<RunState>,
    },
    /// The key is completed: here is its stored result.
    Duplicate(Run),
    /// The key is being worked on (live lease, awaiting a human, or approved).
    InFlight(Run),
    /// The key ended without success (failed_terminal or dead_lettered).
    Finished(Run),
    /// The key was `failed_retryable` past its reclaim budget: this claim
    /// moved it to `dead_lettered` (`reclaim_budget_exhausted`) and owns
    /// nothing. Answered like [`Self::Finished`].
    Exhausted(Run),
    /// Another run already holds the business key.
    DuplicateOf(Run),
    /// The key exists with a different payload hash.
    Conflict(Run),
}

impl ClaimOutcome {
    /// Every value [`Self::label`] returns.
    pub const LABELS: [&'static str; 6] = [
        "claimed",
        "duplicate",
        "in_flight",
        "finished",
        "duplicate_of",
        "conflict",
    ];

    /// The metric label of a duplicate's answer.
    pub const DUPLICATE: &'static str = "duplicate";

    /// The metric label of this outcome (one of [`Self::LABELS`]).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Claimed { .. } => "claimed",
            Self::Duplicate(_) => Self::DUPLICATE,
            Self::InFlight(_) => "in_flight",
            Self::Finished(_) | Self::Exhausted(_) => "finished",
            Self::DuplicateOf(_) => "duplicate_of",
            Self::Conflict(_) => "conflict",
        }
    }

    /// Classifies an existing run that a claim could not take over.
    pub fn for_existing(existing: Run, payload_hash: &PayloadHash) -> Self {
        if &existing.payload_hash != payload_hash {
            return Self::Conflict(existing);
        }
        match existing.state {
            RunState::Completed => Self::Duplicate(existing),
            RunState::FailedTerminal | RunState::DeadLettered => Self::Finished(existing),
            RunState::Processing
            | RunState::AwaitingHuman
            | RunState::Approved
            | RunState::FailedRetryable => Self::InFlight(existing),
        }
    }
}

/// How an owner finishes its run.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnerMove {
    /// `processing -> completed` with the result duplicates will receive.
    Complete {
        /// The result JSON.
        result: Option<Value>,
    },
    /// `processing -> failed_retryable`: a later claim may try again.
    FailRetryable {
        /// A sanitised error description.
        error: String,
    },
    /// `processing -> failed_terminal`: final.
    FailTerminal {
        /// A sanitised error description.
        error: String,
    },
}

impl OwnerMove {
    /// The lifecycle move this is.
    pub fn as_move(&self) -> super::state::Move {
        use super::state::Move;
        match self {
            Self::Complete { .. } => Move::Complete,
            Self::FailRetryable { .. } => Move::FailRetryable,
            Self::FailTerminal { .. } => Move::FailTerminal,
        }
    }
}

/// An owner call: the run, the caller's lease, and who is calling.
#[derive(Debug, Clone)]
pub struct OwnerCall {
    /// Provider or tenant.
    pub namespace: Namespace,
    /// Business identity.
    pub key: IdempotencyKey,
    /// The lease the caller holds.
    pub lease: Lease,
    /// The token subject calling.
    pub actor: String,
}

/// A successful owner call: the run after it and the next lease, if the
/// caller still holds the run.
#[derive(Debug, Clone)]
pub struct Moved {
    /// The run after the move.
    pub run: Run,
    /// The lease to present next (only while the run stays `processing`).
    pub lease: Option<Lease>,
}
