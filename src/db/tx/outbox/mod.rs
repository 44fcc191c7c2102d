//! The outbox's transactions: effects queued with the move that permits
//! them, leased and recorded by the dispatcher (a batch per statement),
//! cancelled, and the kill switch; and the [`OutboxStore`] port.

mod health;
mod limits;
mod record;

pub(crate) use record::complete_run_if_done;
use record::record_batch;

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use serde_json::{json, Value};

use super::chain::append_system_event;
use super::ledger::{owner_move, MoveFields};
use super::{to_json, Owned};
use crate::db::exec::{Args, Tx};
use crate::db::rows::{AttemptRow, EffectRow, SwitchRow};
use crate::db::{Backend, Db, Finish};
use crate::ledger::storage::{Result, StoreError};
use crate::ledger::{IdempotencyKey, Move, Moved, Namespace, OwnerCall, Run};
use crate::outbox::health::{HealthConfig, Signal, TargetHealth};
use crate::outbox::port::OutboxStore;
use crate::outbox::{
    ActionSwitch, AttemptView, Decision, Effect, Leased, NewEffect, Recorded, TargetRoom,
};

/// Queues an effect of `run` unless the same (run, effect type, target)
/// is queued already.
pub(crate) async fn insert_effect(tx: &mut Tx<'_>, run: &Run, effect: &NewEffect) -> Result<()> {
    let st = tx.st;
    let args = Args::new()
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(run.namespace.as_str())
        .bind(run.key.as_str())
        .bind(&effect.operation)
        .bind(&effect.effect_type)
        .bind(&effect.target)
        .bind(&effect.method)
        .bind(&effect.url)
        .bind(to_json(&effect.headers)?)
        .bind(effect.body.as_deref())
        .bind(&effect.idempotency_key)
        .bind(to_json(&effect.spec)?)
        .bind(effect.not_before)
        .bind(run.updated_at)
        .bind(effect.role.as_str())
        .bind(effect.schema_version.as_deref());
    tx.execute(&st.outbox.insert_effect, args).await?;
    Ok(())
}

/// The owner's decision: effects queued and the run `approved` (or
/// `completed` with no effects), in one transaction.
async fn commit(
    tx: &mut Tx<'_>,
    call: &OwnerCall,
    result: Option<&Value>,
    effects: &[NewEffect],
) -> Result<Finish<Owned<Moved>>> {
    let kind = if effects.is_empty() {
        Move::Complete
    } else {
        Move::Approve
    };
    let types: Vec<&str> = effects.iter().map(|e| e.effect_type.as_str()).collect();
    let detail = json!({ "effects": types, "has_result": result.is_some() });
    let fields = MoveFields {
        result: result.map(Value::to_string),
        ..MoveFields::default()
    };
    owner_move(tx, call, kind, fields, detail, effects).await
}

/// What a lease took: the effects, their runs' send fields, and the
/// targets whose half-open probe it holds.
type Lease = (
    Vec<EffectRow>,
    Vec<(String, String, i64, String)>,
    HashSet<String>,
);

/// Leases up to `limit` due effects for `owner`, of each target in
/// `rooms` up to its own limit, past the targets that are paused or
/// disabled (one effect of a target due for its half-open probe); the
/// lease is durable before anything is sent.
async fn lease(
    tx: &mut Tx<'_>,
    owner: &str,
    lease_ms: i64,
    limit: i64,
    rooms: &[TargetRoom],
) -> Result<Lease> {
    let st = tx.st;
    let (rooms, probes) = health::gate(tx, owner, lease_ms, rooms).await?;
    if let Some(plan) = &st.outbox.lease_plan {
        tx.execute(plan, Args::new()).await?;
    }
    let mut allowances = limits::allowances(tx, &rooms).await?;
    let mut rows: Vec<EffectRow> = Vec::new();
    for TargetRoom {
        target,
        limit: target_limit,
        ..
    } in &rooms
    {
        let (target_limit, bucket) = allowances.remove(target).unwrap_or((*target_limit, None));
        let mut taken = 0;
        for statement in &st.outbox.lease {
            let room = (target_limit - taken).min(limit - rows.len() as i64);
            if room <= 0 {
                break;
            }
            let args = Args::new()
                .bind(tx.now)
                .bind(owner)
                .bind(lease_ms)
                .bind(room)
                .bind(target);
            let leased: Vec<EffectRow> = tx.all(statement, args).await?;
            taken += leased.len() as i64;
            rows.extend(leased);
        }
        if let Some(bucket) = bucket {
            limits::charge(tx, target, bucket, taken).await?;
        }
    }
    let idle: Vec<String> = probes
        .iter()
        .filter(|t| !rows.iter().any(|r| r.target() == t.as_str()))
        .cloned()
        .collect();
    health::unclaim(tx, owner, &idle).await?;
    if rows.is_empty() {
        return Ok((rows, Vec::new(), HashSet::new()));
    }
    let runs = tx
        .all(&st.outbox.runs_for_send, Args::new().bind(owner))
        .await?;
    Ok((rows, runs, probes))
}

/// The leased effects with the run fields their sends need.
fn leased(owner: &str, (rows, runs, probes): Lease) -> Result<Vec<Leased>> {
    let runs: HashMap<(String, String), (i64, String)> = runs
        .into_iter()
        .map(|(ns, key, version, corr)| ((ns, key), (version, corr)))
        .collect();
    let mut leased = Vec::with_capacity(rows.len());
    for row in rows {
        let effect = row.into_effect()?;
        let Some((version, correlation_id)) =
            runs.get(&(effect.namespace.clone(), effect.key.clone()))
        else {
            return Err(StoreError::Corrupt(format!(
                "effect {} has no run",
                effect.id
            )));
        };
        leased.push(Leased {
            probe: probes.contains(&effect.new.target),
            first_sent_at: effect.first_sent_at,
            run_version: *version,
            correlation_id: correlation_id.clone(),
            effect,
            owner: owner.to_owned(),
        });
    }
    Ok(leased)
}

/// Cancels a pending effect; the run completes if nothing else is outstanding.
async fn cancel(tx: &mut Tx<'_>, id: &str, actor: &str) -> Result<Finish<Option<Effect>>> {
    let st = tx.st;
    let args = Args::new().bind(tx.now).bind(id);
    let Some(row) = tx.optional::<EffectRow>(&st.outbox.cancel, args).await? else {
        return Ok(Finish::Rollback(None));
    };
    let effect = row.into_effect()?;
    complete_run_if_done(tx, &effect, actor).await?;
    Ok(Finish::Commit(Some(effect)))
}

/// Sets a kill-switch scope and audits the change under
/// `oncegate / actions:<scope>`, chained like any key.
async fn set_switch(tx: &mut Tx<'_>, scope: &str, enabled: bool, actor: &str) -> Result<()> {
    let st = tx.st;
    let now = tx.clock_now;
    let args = Args::new()
        .bind(scope)
        .bind(i64::from(enabled))
        .bind(actor)
        .bind(now);
    tx.execute(&st.outbox.set_switch, args).await?;
    let kind = if enabled {
        "actions_enabled"
    } else {
        "actions_disabled"
    };
    let detail = json!({ "scope": scope, "enabled": enabled });
    append_system_event(tx, &format!("actions:{scope}"), kind, actor, detail, now).await
}

#[async_trait]
impl<B: Backend> OutboxStore for Db<B> {
    async fn commit(
        &self,
        call: &OwnerCall,
        result: Option<&Value>,
        effects: &[NewEffect],
    ) -> Result<Moved> {
        let (owned, result, effects) = (call.clone(), result.cloned(), effects.to_vec());
        let moved = self
            .write(move |tx| {
                Box::pin(async move { commit(tx, &owned, result.as_ref(), &effects).await })
            })
            .await?;
        self.owned(call, moved).await
    }

    async fn lease_effects(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: i64,
        rooms: &[TargetRoom],
    ) -> Result<Vec<Leased>> {
        let (lessee, rooms) = (owner.to_owned(), rooms.to_vec());
        let taken = self
            .commit(move |tx| {
                Box::pin(async move { lease(tx, &lessee, lease_ms, limit, &rooms).await })
            })
            .await?;
        leased(owner, taken)
    }

    async fn record_decisions(&self, decisions: &[Decision]) -> Result<Vec<Recorded>> {
        let decisions = decisions.to_vec();
        self.commit(move |tx| {
            Box::pin(async move {
                let recorded = record_batch(tx, &decisions).await?;
                tx.before_commit();
                Ok(recorded)
            })
        })
        .await
    }

    async fn expire_sending(&self) -> Result<u64> {
        self.commit(move |tx| {
            Box::pin(async move {
                let st = tx.st;
                tx.execute(&st.outbox.expire, Args::new().bind(tx.now))
                    .await
            })
        })
        .await
    }

    async fn cancel_effect(&self, id: &str, actor: &str) -> Result<Option<Effect>> {
        let (id, actor) = (id.to_owned(), actor.to_owned());
        self.write(move |tx| Box::pin(async move { cancel(tx, &id, &actor).await }))
            .await
    }

    async fn effect(&self, id: &str) -> Result<Option<Effect>> {
        let rd = self.reader();
        rd.optional::<EffectRow>(&rd.st.outbox.effect, Args::new().bind(id))
            .await?
            .map(EffectRow::into_effect)
            .transpose()
    }

    async fn attempts(&self, effect_id: &str) -> Result<Vec<AttemptView>> {
        let rd = self.reader();
        rd.all::<AttemptRow>(&rd.st.outbox.attempts, Args::new().bind(effect_id))
            .await?
            .into_iter()
            .map(AttemptRow::into_view)
            .collect()
    }

    async fn effects_of(&self, namespace: &Namespace, key: &IdempotencyKey) -> Result<Vec<Effect>> {
        let rd = self.reader();
        let args = Args::new().bind(namespace.as_str()).bind(key.as_str());
        rd.all::<EffectRow>(&rd.st.outbox.effects_of, args)
            .await?
            .into_iter()
            .map(EffectRow::into_effect)
            .collect()
    }

    async fn set_actions(&self, scope: &str, enabled: bool, actor: &str) -> Result<()> {
        let (scope, actor) = (scope.to_owned(), actor.to_owned());
        self.commit(move |tx| {
            Box::pin(async move { set_switch(tx, &scope, enabled, &actor).await })
        })
        .await
    }

    async fn action_switches(&self) -> Result<Vec<ActionSwitch>> {
        let rd = self.reader();
        let rows: Vec<SwitchRow> = rd.all(&rd.st.outbox.switches, Args::new()).await?;
        Ok(rows.into_iter().map(ActionSwitch::from).collect())
    }

    async fn note_health(
        &self,
        target: &str,
        signal: &Signal,
        probe: bool,
        policy: &HealthConfig,
        actor: &str,
    ) -> Result<TargetHealth> {
        let (target, signal, policy) = (target.to_owned(), signal.clone(), policy.clone());
        let actor = actor.to_owned();
        self.commit(move |tx| {
            Box::pin(
                async move { health::note(tx, &target, &signal, probe, &policy, &actor).await },
            )
        })
        .await
    }

    async fn set_target_enabled(
        &self,
        target: &str,
        enabled: bool,
        actor: &str,
    ) -> Result<TargetHealth> {
        let (target, actor) = (target.to_owned(), actor.to_owned());
        self.commit(move |tx| {
            Box::pin(async move { health::set_enabled(tx, &target, enabled, &actor).await })
        })
        .await
    }

    async fn target_health(&self) -> Result<Vec<TargetHealth>> {
        let rd = self.reader();
        Ok(health::rows(rd.all(&rd.st.health.all, Args::new()).await?))
    }
}
