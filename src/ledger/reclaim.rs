//! The reclaim rule, in one place: when a claim may take over an
//! existing run (DESIGN.md §2), when a run's reclaim budget is spent, when
//! an abandoned run counts as stranded, and why an owner's lease no longer
//! owns it.
//!
//! A claim takes a run over when the offered payload hash equals the
//! run's, the run is not archived, and it is `failed_retryable` within its
//! reclaim budget or `processing` with an expired lease. The budget
//! ([`Recovery`], per namespace): at most `max_reclaims` reclaims, and none
//! once `retry_window` has passed since the budget started (the run's
//! first claim, or the operator release that reset it). A
//! `failed_retryable` run past its budget goes to `dead_lettered`
//! (`reclaim_budget_exhausted`); a `processing` run whose lease expired
//! `stranded_after` ago goes there too (`stranded`).
//!
//! The claim statement, the read that answers duplicates without the
//! writer, PostgreSQL's single-statement claim, the recovery sweeper's
//! guards and the Retry Lab's twin all use these rules: the SQL statements
//! through the `*_sql` functions, the rest through [`reclaimable`] and the
//! [`Recovery`] methods.

use super::{Lease, PayloadHash, Run, RunState};
use crate::clock::Millis;

/// The dead-letter class of a stranded run (`deadletter::DeadLetterClass`
/// spells it too; its tests check the two agree).
pub const STRANDED: &str = "stranded";
/// The dead-letter class of a run past its reclaim budget.
pub const BUDGET_EXHAUSTED: &str = "reclaim_budget_exhausted";

/// One namespace's recovery rules: the reclaim budget and the stranded
/// window (`[ledger]`, overridden per namespace by `[[ledger.namespaces]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// A `processing` run whose lease expired this long ago, and that
    /// nobody reclaimed, is stranded.
    pub stranded_after_ms: Millis,
    /// The most reclaims a run may have since its budget started.
    pub max_reclaims: i64,
    /// How long after its budget started a run may still be reclaimed
    /// from `failed_retryable`.
    pub retry_window_ms: Millis,
}

impl Default for Recovery {
    fn default() -> Self {
        Self {
            stranded_after_ms: 3_600_000,
            max_reclaims: 5,
            retry_window_ms: 24 * 3_600_000,
        }
    }
}

impl Recovery {
    /// Whether `run` is `failed_retryable` with no reclaim left at `now`:
    /// it has been reclaimed `max_reclaims` times since its budget
    /// started (one more would be more than the budget), or its retry
    /// window has passed.
    pub fn budget_spent(&self, run: &Run, now: Millis) -> bool {
        run.state == RunState::FailedRetryable
            && run.archived_at.is_none()
            && (run.reclaims >= self.max_reclaims
                || run.budget_started() + self.retry_window_ms <= now)
    }

    /// Whether `run` is `processing` under a lease that expired at least
    /// `stranded_after` before `now`.
    pub fn stranded(&self, run: &Run, now: Millis) -> bool {
        run.state == RunState::Processing
            && run.archived_at.is_none()
            && run
                .lease_expires_at
                .is_some_and(|at| at + self.stranded_after_ms <= now)
    }
}

/// Whether a claim offering `payload_hash` at `now` may take `run` over,
/// under the namespace's `recovery` rules.
pub fn reclaimable(
    run: &Run,
    payload_hash: &PayloadHash,
    now: Millis,
    recovery: &Recovery,
) -> bool {
    &run.payload_hash == payload_hash
        && run.archived_at.is_none()
        && !recovery.budget_spent(run, now)
        && match run.state {
            RunState::FailedRetryable => true,
            RunState::Processing => run.lease_expires_at.is_some_and(|at| at <= now),
            _ => false,
        }
}

/// How a statement spells a namespace's budget (bound parameters, e.g.
/// `$15` and `$16`).
#[derive(Debug, Clone, Copy)]
pub struct BudgetSql<'a> {
    /// [`Recovery::max_reclaims`].
    pub max_reclaims: &'a str,
    /// [`Recovery::retry_window_ms`].
    pub retry_window_ms: &'a str,
}

/// The rule as a SQL condition: `column` spells a `runs` column (e.g.
/// with a table prefix), `hash` the offered payload hash and `now` the
/// claim's time. Without a `budget`, the condition says whether a claim
/// *could* win (the reads that answer duplicates send a run that might be
/// past its budget on to the claim statement, which decides).
pub fn reclaimable_sql(
    column: impl Fn(&str) -> String,
    hash: &str,
    now: &str,
    budget: Option<BudgetSql<'_>>,
) -> String {
    let spent = budget
        .map(|b| format!(" AND NOT {}", budget_spent_sql(&column, now, b)))
        .unwrap_or_default();
    format!(
        "{payload} = {hash} AND {archived} IS NULL \
         AND ({state} = '{retryable}' \
              OR ({state} = '{processing}' AND {expires} <= {now})){spent}",
        payload = column("payload_hash"),
        archived = column("archived_at"),
        state = column("state"),
        expires = column("lease_expires_at"),
        retryable = RunState::FailedRetryable.as_str(),
        processing = RunState::Processing.as_str(),
    )
}

/// [`Recovery::budget_spent`] as a SQL condition.
pub fn budget_spent_sql(column: impl Fn(&str) -> String, now: &str, b: BudgetSql<'_>) -> String {
    format!(
        "({state} = '{retryable}' AND {archived} IS NULL \
          AND ({reclaims} >= {max} OR COALESCE({started}, {created}) + {window} <= {now}))",
        state = column("state"),
        archived = column("archived_at"),
        reclaims = column("reclaims"),
        started = column("budget_started_at"),
        created = column("created_at"),
        retryable = RunState::FailedRetryable.as_str(),
        max = b.max_reclaims,
        window = b.retry_window_ms,
    )
}

/// [`Recovery::stranded`] as a SQL condition, `after` spelling
/// `stranded_after` in milliseconds.
pub fn stranded_sql(column: impl Fn(&str) -> String, now: &str, after: &str) -> String {
    format!(
        "({state} = '{processing}' AND {archived} IS NULL AND {expires} + {after} <= {now})",
        state = column("state"),
        archived = column("archived_at"),
        expires = column("lease_expires_at"),
        processing = RunState::Processing.as_str(),
    )
}

/// Says, for the caller, why its lease no longer owns the run.
pub fn explain_lost(current: Option<&Run>, lease: &Lease, now: Millis) -> String {
    let Some(run) = current else {
        return "no run exists with this namespace and key".into();
    };
    if run.state != RunState::Processing {
        return format!("the run is {} and no longer owned by a lease", run.state);
    }
    match run.lease {
        Some(current) if current.owner != lease.owner => {
            "another owner reclaimed the run after this lease expired".into()
        }
        Some(current) if current.version != lease.version => format!(
            "the lease is stale: version {} was superseded by version {}",
            lease.version, current.version
        ),
        _ if run.lease_expires_at.is_some_and(|at| at <= now) => {
            "the lease expired; claim the key again".into()
        }
        _ => "the lease reached its maximum total life; finish or fail the run".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{FencingVersion, IdempotencyKey, Namespace, RunMetadata};

    fn run(state: RunState, reclaims: i64) -> Run {
        Run {
            namespace: Namespace::parse("crm").unwrap(),
            key: IdempotencyKey::parse("k").unwrap(),
            business_key: None,
            state,
            prev_state: None,
            payload_hash: PayloadHash::of_bytes(b"p"),
            lease: None,
            lease_expires_at: Some(1_000),
            lease_started_at: Some(0),
            version: FencingVersion::FIRST,
            attempts: reclaims + 1,
            reclaims,
            budget_started_at: None,
            result: None,
            last_error: None,
            reason: None,
            metadata: RunMetadata::default(),
            claimed_by: "n8n".into(),
            created_at: 0,
            updated_at: 0,
            archived_at: None,
        }
    }

    #[test]
    fn the_sql_names_every_part_of_the_rule() {
        let sql = reclaimable_sql(|c| format!("runs.{c}"), "$5", "$1", None);
        assert_eq!(
            sql,
            "runs.payload_hash = $5 AND runs.archived_at IS NULL \
             AND (runs.state = 'failed_retryable' \
                  OR (runs.state = 'processing' AND runs.lease_expires_at <= $1))"
        );
        let budget = BudgetSql {
            max_reclaims: "$15",
            retry_window_ms: "$16",
        };
        let sql = reclaimable_sql(|c| c.to_owned(), "$5", "$1", Some(budget));
        assert!(
            sql.ends_with(
                "AND NOT (state = 'failed_retryable' AND archived_at IS NULL \
              AND (reclaims >= $15 OR COALESCE(budget_started_at, created_at) + $16 <= $1))"
            ),
            "{sql}"
        );
        assert_eq!(
            stranded_sql(|c| c.to_owned(), "$1", "$6"),
            "(state = 'processing' AND archived_at IS NULL AND lease_expires_at + $6 <= $1)"
        );
    }

    #[test]
    fn the_budget_counts_reclaims_and_the_window_from_its_start() {
        let rules = Recovery {
            stranded_after_ms: 500,
            max_reclaims: 2,
            retry_window_ms: 10_000,
        };
        let hash = PayloadHash::of_bytes(b"p");
        let mut r = run(RunState::FailedRetryable, 1);
        assert!(!rules.budget_spent(&r, 9_999));
        assert!(reclaimable(&r, &hash, 9_999, &rules));
        assert!(rules.budget_spent(&r, 10_000), "the window has passed");
        assert!(!reclaimable(&r, &hash, 10_000, &rules));
        r.budget_started_at = Some(5_000);
        assert!(
            !rules.budget_spent(&r, 10_000),
            "a release restarts the window"
        );
        r.reclaims = 2;
        assert!(rules.budget_spent(&r, 10_000), "every reclaim is spent");
        assert!(
            !rules.budget_spent(&run(RunState::Processing, 9), 99_999),
            "only failed_retryable runs spend a budget"
        );
    }

    #[test]
    fn a_run_is_stranded_once_its_lease_expired_long_enough_ago() {
        let rules = Recovery {
            stranded_after_ms: 500,
            ..Recovery::default()
        };
        let r = run(RunState::Processing, 0);
        assert!(!rules.stranded(&r, 1_499));
        assert!(rules.stranded(&r, 1_500));
        assert!(!rules.stranded(&run(RunState::FailedRetryable, 0), 9_999));
    }
}
