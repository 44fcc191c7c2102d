//! The idempotency ledger: runs keyed by `(namespace, key)`, their states,
//! leases and fencing versions (DESIGN.md §2).
//!
//! This module holds the pure domain: parsed identifiers ([`ids`]), the
//! owner's [`Lease`], the lifecycle ([`RunState`], [`Move`]) and the
//! request/answer types of the ledger calls ([`run`]), the reclaim rule
//! ([`reclaim`]), the recovery sweeper that applies it to abandoned runs
//! ([`recovery`]) and the storage the ledger needs ([`port`]). The atomic
//! claim and the compare-and-set moves themselves are statements of each
//! [`crate::db`] backend, guarded by the same move table.

pub mod config;
pub mod ids;
pub mod lease;
pub mod port;
pub mod reclaim;
pub mod recovery;
pub mod run;
pub mod service;
pub mod span;
pub mod state;
pub mod storage;
pub mod tier;

pub use config::{LedgerConfig, NamespaceRecovery, Span};
pub use ids::{BusinessKey, IdempotencyKey, InvalidId, Namespace, PayloadHash};
pub use lease::{FencingVersion, Lease, LeaseMs, LeaseOwner};
pub use reclaim::{
    budget_spent_sql, explain_lost, reclaimable, reclaimable_sql, stranded_sql, BudgetSql, Recovery,
};
pub use recovery::{recover, RecoveryConfig, RecoveryReport};
pub use run::{ClaimOutcome, ClaimRequest, Moved, OwnerCall, OwnerMove, Run, RunMetadata};
pub use state::{InvalidTransition, Move, RunState};
pub use tier::{RedisConfig, Tier, Tiered, Tiers};
