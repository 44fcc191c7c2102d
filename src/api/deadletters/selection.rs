//! A bulk replay's selection and dry-run summary as the API takes and
//! shows them (their schemas); the planning itself is
//! [`crate::deadletter::plan`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::deadletter::plan;

/// Which open dead letters a filter selects (at least one criterion).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectionFilter {
    /// Class.
    pub class: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// The run's current state.
    pub state: Option<String>,
    /// At least this old (`90s`, `15m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// At most this old.
    pub newer_than: Option<String>,
}

/// An explicit selection: `ids`, or a `filter` frozen into ids at creation.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Dead letter ids, in the order to replay them.
    pub ids: Option<Vec<String>>,
    /// Or a filter over open dead letters (oldest first).
    pub filter: Option<SelectionFilter>,
}

impl From<Selection> for plan::Selection {
    fn from(s: Selection) -> Self {
        Self {
            ids: s.ids,
            filter: s.filter.map(|f| plan::SelectionFilter {
                class: f.class,
                namespace: f.namespace,
                state: f.state,
                older_than: f.older_than,
                newer_than: f.newer_than,
            }),
        }
    }
}

/// A selected item the gate holds back.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatedItem {
    /// Dead letter id.
    pub id: String,
    /// The gated operation.
    pub operation: String,
    /// Its gate policy.
    pub gate: String,
}

/// A selected item that would be refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct RefusedItem {
    /// Dead letter id.
    pub id: String,
    /// Why.
    pub why: String,
}

/// What a bulk replay would do; computing it writes and sends nothing.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Summary {
    /// Items selected.
    pub total: usize,
    /// Items that would be replayed now (effects re-sent, or re-run).
    pub replayable: usize,
    /// Of those, runs with no effect that go back to the workflow's re-run.
    pub rerun: usize,
    /// Effects that would be sent again (same idempotency keys), per target.
    pub targets: BTreeMap<String, usize>,
    /// Items per class.
    pub classes: BTreeMap<String, usize>,
    /// Items held by a gate (they need a new approval).
    pub gated: Vec<GatedItem>,
    /// Items that would be refused, and why.
    pub refused: Vec<RefusedItem>,
}

impl From<plan::Summary> for Summary {
    fn from(s: plan::Summary) -> Self {
        Self {
            total: s.total,
            replayable: s.replayable,
            rerun: s.rerun,
            targets: s.targets,
            classes: s.classes,
            gated: s
                .gated
                .into_iter()
                .map(|g| GatedItem {
                    id: g.id,
                    operation: g.operation,
                    gate: g.gate,
                })
                .collect(),
            refused: s
                .refused
                .into_iter()
                .map(|r| RefusedItem {
                    id: r.id,
                    why: r.why,
                })
                .collect(),
        }
    }
}
