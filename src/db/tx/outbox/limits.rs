//! A target's rate and concurrency held across every instance
//! (PostgreSQL; DESIGN.md §4, §9), inside the lease transaction: the
//! target's token-bucket row is locked, so the leases of one target, on
//! any instance, take their turns; under that lock the target's in-flight
//! (`sending`) effects are counted exactly and the bucket is refilled at
//! `rate_per_second` and charged for what the lease took. A single SQLite
//! node has no such statements and keeps its in-process limits.

use std::collections::HashMap;

use crate::db::exec::{Args, Tx};
use crate::ledger::storage::Result;
use crate::outbox::TargetRoom;

/// A bucket as refilled for this lease, to charge after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    tokens_milli: i64,
    refilled_at: i64,
}

/// The bucket's size in thousandths of a send: a quarter second of the
/// rate (at least one send), so any window of T seconds sees at most
/// rate·(T + ¼) leases. A leaser that took effects of a rate-limited target
/// leases again within 50 ms, so the refill is not lost to a full bucket.
fn burst_milli(rate: i64) -> i64 {
    ((rate + 3) / 4).max(1) * 1000
}

/// How many effects each limited room may lease now under the cluster's
/// limits, with its bucket to charge. The rows are locked in name order,
/// so two instances leasing the same targets never wait on each other in
/// a circle. Rooms without limits (and every room on SQLite) are absent.
pub(super) async fn allowances(
    tx: &mut Tx<'_>,
    rooms: &[TargetRoom],
) -> Result<HashMap<String, (i64, Option<Bucket>)>> {
    let mut allowed = HashMap::new();
    if tx.st.health.limits.is_none() {
        return Ok(allowed);
    }
    let mut limited: Vec<&TargetRoom> = rooms.iter().filter(|r| r.cluster.any()).collect();
    limited.sort_by(|a, b| a.target.cmp(&b.target));
    for room in limited {
        allowed.insert(room.target.clone(), allowance(tx, room).await?);
    }
    Ok(allowed)
}

/// One room's allowance: its limit, less the target's effects in flight
/// on every instance below its concurrency, and no more than the whole
/// sends in its refilled bucket.
async fn allowance(tx: &mut Tx<'_>, room: &TargetRoom) -> Result<(i64, Option<Bucket>)> {
    let Some(st) = &tx.st.health.limits else {
        return Ok((room.limit, None));
    };
    let now = tx.clock_now;
    let rate = i64::from(room.cluster.rate_per_second);
    let cap = burst_milli(rate);
    let target = room.target.as_str();
    let args = Args::new().bind(target).bind(cap).bind(now);
    tx.execute(&st.ensure, args).await?;
    let (tokens, refilled_at): (i64, i64) = tx.one(&st.lock, Args::new().bind(target)).await?;
    let mut allowed = room.limit;
    if room.cluster.concurrency > 0 {
        let (in_flight,): (i64,) = tx.one(&st.in_flight, Args::new().bind(target)).await?;
        allowed = allowed.min(i64::from(room.cluster.concurrency) - in_flight);
    }
    let bucket = (rate > 0).then(|| {
        // `rate` sends a second is `rate` thousandths a millisecond.
        let elapsed = (now - refilled_at).max(0);
        let tokens_milli = tokens.saturating_add(elapsed.saturating_mul(rate)).min(cap);
        allowed = allowed.min(tokens_milli / 1000);
        Bucket {
            tokens_milli,
            refilled_at: refilled_at.max(now),
        }
    });
    Ok((allowed.max(0), bucket))
}

/// Charges `target`'s bucket for the `leased` effects.
pub(super) async fn charge(
    tx: &mut Tx<'_>,
    target: &str,
    bucket: Bucket,
    leased: i64,
) -> Result<()> {
    let Some(st) = &tx.st.health.limits else {
        return Ok(());
    };
    let left = bucket.tokens_milli - leased * 1000;
    let args = Args::new().bind(target).bind(left).bind(bucket.refilled_at);
    tx.execute(&st.spend, args).await?;
    Ok(())
}
