//! The reclaim rule, in one place: when a claim may take over an
//! existing run (DESIGN.md §2), and why an owner's lease no longer owns it.
//!
//! A claim takes a run over when the offered payload hash equals the
//! run's, the run is not archived, and it is `failed_retryable` or
//! `processing` with an expired lease. The claim statement, the read that
//! answers duplicates without the writer, PostgreSQL's single-statement
//! claim and the Retry Lab's twin all use this rule: the SQL statements
//! through [`reclaimable_sql`], the rest through [`reclaimable`].

use super::{Lease, PayloadHash, Run, RunState};
use crate::clock::Millis;

/// Whether a claim offering `payload_hash` at `now` may take `run` over.
pub fn reclaimable(run: &Run, payload_hash: &PayloadHash, now: Millis) -> bool {
    &run.payload_hash == payload_hash
        && run.archived_at.is_none()
        && match run.state {
            RunState::FailedRetryable => true,
            RunState::Processing => run.lease_expires_at.is_some_and(|at| at <= now),
            _ => false,
        }
}

/// The rule as a SQL condition: `column` spells a `runs` column (e.g.
/// with a table prefix), `hash` the offered payload hash and `now` the
/// claim's time.
pub fn reclaimable_sql(column: impl Fn(&str) -> String, hash: &str, now: &str) -> String {
    format!(
        "{payload} = {hash} AND {archived} IS NULL \
         AND ({state} = '{retryable}' \
              OR ({state} = '{processing}' AND {expires} <= {now}))",
        payload = column("payload_hash"),
        archived = column("archived_at"),
        state = column("state"),
        expires = column("lease_expires_at"),
        retryable = RunState::FailedRetryable.as_str(),
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

    #[test]
    fn the_sql_names_every_part_of_the_rule() {
        let sql = reclaimable_sql(|c| format!("runs.{c}"), "$5", "$1");
        assert_eq!(
            sql,
            "runs.payload_hash = $5 AND runs.archived_at IS NULL \
             AND (runs.state = 'failed_retryable' \
                  OR (runs.state = 'processing' AND runs.lease_expires_at <= $1))"
        );
    }
}
