//! The operator console's read calls ([`ConsoleStore`], a part of every
//! [`super::Store`]): run search with keyset pages, and the numbers of the
//! dashboard that the database can tell.
//!
//! Every query walks an index (see [`super::console_sql`] for which one
//! each search uses), so the console stays cheap as the ledger grows.

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::Result;
use crate::clock::Millis;
use crate::ledger::{Run, RunState};

/// A run search. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSearch {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only keys starting with this text (a whole key finds itself).
    pub key_prefix: Option<String>,
    /// Only runs now in this state.
    pub state: Option<RunState>,
    /// Only runs holding this execution ref (e.g. an n8n execution id).
    pub execution_ref: Option<String>,
    /// The last run of the previous page.
    pub after: Option<RunCursor>,
    /// Page size.
    pub limit: i64,
}

/// How a search's results are ordered, chosen by its filters so that the
/// order is the order of the index the search walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchOrder {
    /// By (namespace, key): the primary key, or the execution-ref index.
    Identity,
    /// By (key, namespace): the `runs_key` index, for a key search.
    Key,
    /// Most recently changed first: the `(state, updated_at)` index, for a
    /// search by state alone.
    Recent,
}

impl RunSearch {
    /// The order (and so the index) this search uses.
    pub fn order(&self) -> SearchOrder {
        if self.execution_ref.is_some() {
            SearchOrder::Identity
        } else if self.key_prefix.is_some() {
            SearchOrder::Key
        } else if self.namespace.is_none() && self.state.is_some() {
            SearchOrder::Recent
        } else {
            SearchOrder::Identity
        }
    }
}

/// Where a page of runs ended: the last run's sort fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCursor {
    /// The run's `updated_at`.
    #[serde(rename = "u")]
    pub updated_at: Millis,
    /// Its namespace.
    #[serde(rename = "n")]
    pub namespace: String,
    /// Its key.
    #[serde(rename = "k")]
    pub key: String,
}

impl RunCursor {
    /// The cursor after `run`.
    pub fn after(run: &Run) -> Self {
        Self {
            updated_at: run.updated_at,
            namespace: run.namespace.to_string(),
            key: run.key.to_string(),
        }
    }

    /// An opaque, URL-safe text.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads [`RunCursor::encode`]'s text back.
    ///
    /// # Errors
    /// A message when the text is not a cursor.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| "not a page cursor".to_owned())?;
        serde_json::from_slice(&bytes).map_err(|_| "not a page cursor".to_owned())
    }
}

/// Dead letters recorded in one hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct HourCount {
    /// Hours after the window's start (0 is the first hour).
    pub hour: i64,
    /// How many.
    pub count: i64,
}

/// Storage calls of the operator console (all read-only).
#[async_trait]
pub trait ConsoleStore: Send + Sync {
    /// One page of runs matching `search`, in [`RunSearch::order`].
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn search_runs(&self, search: &RunSearch) -> Result<Vec<Run>>;

    /// How long people took to decide (approve or reject) the challenges
    /// decided since `since`, in milliseconds, most recent first, at most
    /// `limit` of them.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn gate_waits(&self, since: Millis, limit: i64) -> Result<Vec<i64>>;

    /// Dead letters recorded since `since`, counted per hour (hours with
    /// none are absent).
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn dead_letters_by_hour(&self, since: Millis) -> Result<Vec<HourCount>>;

    /// How many approval challenges wait for a decision.
    ///
    /// # Errors
    /// [`super::StoreError::Database`] on database failure.
    async fn pending_challenges(&self) -> Result<i64>;
}

/// Implements [`ConsoleStore`] for a backend whose `ops` module expanded
/// [`console_ops!`](crate::console_ops) and which has `fn cx()`.
#[macro_export]
#[doc(hidden)]
macro_rules! impl_console_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::console::ConsoleStore for $store {
            async fn search_runs(
                &self,
                search: &$crate::store::console::RunSearch,
            ) -> $crate::store::Result<Vec<$crate::ledger::Run>> {
                ops::console::search_runs(self.cx().read, search).await
            }

            async fn gate_waits(
                &self,
                since: $crate::clock::Millis,
                limit: i64,
            ) -> $crate::store::Result<Vec<i64>> {
                ops::console::gate_waits(self.cx().read, since, limit).await
            }

            async fn dead_letters_by_hour(
                &self,
                since: $crate::clock::Millis,
            ) -> $crate::store::Result<Vec<$crate::store::console::HourCount>> {
                ops::console::dead_letters_by_hour(self.cx().read, since).await
            }

            async fn pending_challenges(&self) -> $crate::store::Result<i64> {
                ops::console::pending_challenges(self.cx().read).await
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_rejects_junk() {
        let c = RunCursor {
            updated_at: 42,
            namespace: "crm".into(),
            key: "a/b?c#d".into(),
        };
        let text = c.encode();
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(RunCursor::decode(&text).unwrap(), c);
        assert!(RunCursor::decode("??").is_err());
        assert!(RunCursor::decode(&URL_SAFE_NO_PAD.encode(b"{}")).is_err());
    }

    #[test]
    fn the_filters_choose_the_index() {
        let mut s = RunSearch::default();
        assert_eq!(s.order(), SearchOrder::Identity);
        s.state = Some(RunState::DeadLettered);
        assert_eq!(s.order(), SearchOrder::Recent);
        s.namespace = Some("crm".into());
        assert_eq!(s.order(), SearchOrder::Identity);
        s.key_prefix = Some("ord".into());
        assert_eq!(s.order(), SearchOrder::Key);
        s.execution_ref = Some("e-1".into());
        assert_eq!(s.order(), SearchOrder::Identity);
    }
}
