//! PostgreSQL's owner completion in one statement, for the runs this
//! node's claim batches won.
//!
//! The general owner move is a transaction: `BEGIN`, the move, the audit
//! append (its entry hashed onto the head the move returned), the proxy's
//! kept answer if any, `COMMIT`: four or five round trips. A run a claim
//! batch won ([`super::batch`]) has a chain this node wrote: one entry,
//! whose hash the batch computed. Remembered here under the claim's lease
//! owner, it lets the owner's completion hash its own entry before the
//! statement and go as one autocommitted statement ([`statement`]; the
//! proxy's also keeps the answer). That statement is guarded by the lease
//! and by the chain's number and head: a run renewed, reclaimed or
//! otherwise moved since matches nothing, writes nothing, and goes on to
//! the general path, which answers it exactly as before. So does every
//! run this node did not claim in a batch, or has forgotten.
//!
//! Memory is bounded: at most [`KEPT`] heads, the oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::PgBackend;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::proxy::keep_answer;
use crate::db::sql::runs::owner_finish;
use crate::db::sql::{Dialect, RUN_COLUMNS};
use crate::db::tx::ledger::{completion_at_head, Completion};
use crate::db::Backend;
use crate::ledger::storage::Result;
use crate::ledger::{FencingVersion, LeaseOwner, Move, Moved, OwnerCall};

/// Most heads remembered; each is a few hundred bytes.
const KEPT: usize = 4096;

/// The completion at a known chain head, in one autocommitted statement:
/// the owner's `finish` move of [`Move::Complete`] guarded also by the
/// chain's last number and head and moving the head to the entry the
/// caller hashed; the entry inserted from the moved row; with `answer`,
/// the proxy's answer kept beside it. Returns the moved run, or nothing
/// (the lease or the chain is not what the caller knew: nothing written).
/// Binds: now, namespace, key, owner, version, result, last_error,
/// reason, the chain's last number and head, the entry's hash, actor,
/// detail and time; with `answer`, then status, headers, body, window_ms.
pub fn statement(answer: bool) -> String {
    let dialect = Dialect::Postgres;
    let now = dialect.now();
    let kept = if answer {
        format!(
            ", kept AS ({})",
            keep_answer(&format!(
                "SELECT namespace, run_key, $15, $16, $17, {now}, {now} + $18 FROM moved"
            ))
        )
    } else {
        String::new()
    };
    format!(
        "WITH moved AS ({update}), \
         logged AS ( \
             INSERT INTO audit_events (namespace, run_key, seq, kind, actor, from_state, \
                 to_state, version, detail, prev_hash, hash, created_at) \
             SELECT namespace, run_key, audit_seq, '{kind}', $12, prev_state, state, version, \
                 $13, $10, $11, $14 FROM moved){kept} \
         SELECT {RUN_COLUMNS} FROM moved",
        update = owner_finish(
            dialect,
            Move::Complete.to_state().as_str(),
            &Move::Complete.sql_guard(),
            true
        ),
        kind = Move::Complete.as_str(),
    )
}

/// The chain heads of runs this node's claim batches won, by lease owner.
#[derive(Debug)]
pub(crate) struct WonHeads {
    inner: Mutex<Heads>,
    /// [`statement`] without and with the answer.
    statements: [String; 2],
    /// Completions that went as one statement.
    completed: AtomicU64,
}

impl Default for WonHeads {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            statements: [statement(false), statement(true)],
            completed: AtomicU64::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Heads {
    by_owner: HashMap<LeaseOwner, Won>,
    /// Owners in the order they were remembered (taken ones included,
    /// until they come up).
    order: VecDeque<LeaseOwner>,
}

/// A won run's chain: its key, its last number and its head.
#[derive(Debug)]
struct Won {
    namespace: String,
    key: String,
    seq: i64,
    head: String,
}

impl WonHeads {
    /// Remembers the chain of a run claimed by `owner` at its first
    /// version: one entry, `head`.
    pub(crate) fn remember(&self, owner: LeaseOwner, namespace: &str, key: &str, head: &str) {
        let won = Won {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            seq: 1,
            head: head.to_owned(),
        };
        let mut heads = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        heads.by_owner.insert(owner, won);
        heads.order.push_back(owner);
        while heads.order.len() > KEPT {
            if let Some(old) = heads.order.pop_front() {
                heads.by_owner.remove(&old);
            }
        }
    }

    /// The chain `call`'s claim left (its last number and head), forgotten
    /// here; `None` unless the call holds the lease that claim took.
    fn take(&self, call: &OwnerCall) -> Option<(i64, String)> {
        let mut heads = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let won = heads.by_owner.remove(&call.lease.owner)?;
        let same = won.namespace == call.namespace.as_str()
            && won.key == call.key.as_str()
            && call.lease.version == FencingVersion::FIRST;
        same.then_some((won.seq, won.head))
    }

    /// The completions that went as one statement so far.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// How many heads are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|h| h.by_owner.len()).unwrap_or(0)
    }
}

impl PgBackend {
    /// `call`'s completion (`done` builds it) in one statement if this
    /// node knows its run's chain;
    /// `None`: nothing was written (no head known, or the run is not where
    /// its claim left it), and the general move decides.
    pub(super) async fn complete_at_head<'a>(
        &self,
        call: &OwnerCall,
        done: impl FnOnce() -> Completion<'a>,
    ) -> Result<Option<Moved>> {
        let Some((seq, head)) = self.heads.take(call) else {
            return Ok(None);
        };
        let done = done();
        let st = &self.st;
        let clock_now = self.clock.now_ms();
        let foreseen = completion_at_head(st, call, seq, &head, done.detail, clock_now);
        let entry = foreseen.entry();
        let mut args = Args::new()
            .bind(self.now())
            .bind(call.namespace.as_str())
            .bind(call.key.as_str())
            .bind(call.lease.owner.to_hex())
            .bind(call.lease.version.get())
            .bind(done.result)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(seq)
            .bind(head.as_str())
            .bind(foreseen.hash())
            .bind(entry.actor.as_str())
            .bind(entry.detail.to_string())
            .bind(entry.created_at);
        if let Some((answer, window_ms)) = done.answer {
            args = args
                .bind(i64::from(answer.status))
                .bind(answer.headers_json())
                .bind(answer.body.as_slice())
                .bind(window_ms);
        }
        let sql = &self.heads.statements[usize::from(done.answer.is_some())];
        let mut conn = self.pool.acquire().await?;
        let mut tx = Tx::new(&mut *conn, st, self.now(), clock_now, Self::NAME);
        let Some(row) = tx.optional::<RunRow>(sql, args).await? else {
            return Ok(None);
        };
        let run = row.to_run()?;
        self.heads.completed.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Moved {
            lease: run.lease,
            run,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{IdempotencyKey, Lease, Namespace};

    fn call(owner: LeaseOwner, key: &str, version: FencingVersion) -> OwnerCall {
        OwnerCall {
            namespace: Namespace::parse("ns").expect("a namespace"),
            key: IdempotencyKey::parse(key).expect("a key"),
            lease: Lease { owner, version },
            actor: "wf".into(),
        }
    }

    #[test]
    fn a_head_is_taken_once_by_the_lease_that_won_it() {
        let heads = WonHeads::default();
        let owner = LeaseOwner::generate();
        heads.remember(owner, "ns", "k", "sha256:aa");
        let other = call(owner, "other", FencingVersion::FIRST);
        assert_eq!(heads.take(&other), None, "another key");
        heads.remember(owner, "ns", "k", "sha256:aa");
        let later = call(owner, "k", FencingVersion::new(2).expect("a version"));
        assert_eq!(heads.take(&later), None, "a later version");
        heads.remember(owner, "ns", "k", "sha256:aa");
        let won = call(owner, "k", FencingVersion::FIRST);
        assert_eq!(heads.take(&won), Some((1, "sha256:aa".to_owned())));
        assert_eq!(heads.take(&won), None, "taken once");
    }

    #[test]
    fn the_oldest_heads_are_forgotten_first() {
        let heads = WonHeads::default();
        let owners: Vec<LeaseOwner> = (0..KEPT + 10).map(|_| LeaseOwner::generate()).collect();
        for owner in &owners {
            heads.remember(*owner, "ns", "k", "sha256:aa");
        }
        assert_eq!(heads.len(), KEPT);
        let first = call(owners[0], "k", FencingVersion::FIRST);
        assert_eq!(heads.take(&first), None, "forgotten");
        let last = call(owners[KEPT + 9], "k", FencingVersion::FIRST);
        assert!(heads.take(&last).is_some());
        // Taking does not let the order grow past its bound.
        for _ in 0..3 * KEPT {
            let owner = LeaseOwner::generate();
            heads.remember(owner, "ns", "k", "sha256:aa");
            assert!(heads
                .take(&call(owner, "k", FencingVersion::FIRST))
                .is_some());
        }
        assert!(heads.inner.lock().expect("not poisoned").order.len() <= KEPT);
    }
}
