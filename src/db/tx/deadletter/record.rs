//! Recording a dead letter: the run's history, gathered in the transaction\nthat fails it.

use crate::clock::Millis;
use crate::db::exec::{Args, Tx};
use crate::db::rows::{AttemptRow, EffectRow};
use crate::deadletter::DeadLetterInput;
use crate::ledger::storage::Result;
use crate::ledger::Run;
use crate::outbox::{AttemptView, Effect};
use serde_json::{json, Value};

/// Records a dead letter for `run` inside the caller's transaction (the
/// move that stopped the run, or the quarantine of a delivery) and returns
/// its id. Reads the run's metadata, payload reference and attempt history
/// in the same transaction, so the evidence is what the move saw.
pub(crate) async fn record_dead_letter(
    tx: &mut Tx<'_>,
    run: &Run,
    input: &DeadLetterInput,
    at: Millis,
) -> Result<String> {
    let st = tx.st;
    let (ns, key) = (run.namespace.as_str(), run.key.as_str());
    let raw_event_id = match &input.raw_event_id {
        Some(id) => Some(id.clone()),
        None => tx
            .optional::<(String,)>(
                &st.ingress.accepted_raw_event,
                Args::new().bind(ns).bind(key),
            )
            .await?
            .map(|(id,)| id),
    };
    let payload_hash = match &input.raw_event_id {
        Some(id) => tx
            .optional::<(String,)>(&st.ingress.raw_event_hash, Args::new().bind(id))
            .await?
            .map_or_else(|| run.payload_hash.to_string(), |(hash,)| hash),
        None => run.payload_hash.to_string(),
    };
    let payload_ref = raw_event_id
        .as_ref()
        .map(|id| format!("raw_event:{id}"))
        .or_else(|| run.metadata.source_url.clone());
    let History {
        mut attempts,
        last,
        last_effect,
    } = history(tx, run).await?;
    let mut evidence = input.evidence.clone().or(last);
    let schema_version = last_effect
        .as_ref()
        .and_then(|e| e.new.schema_version.clone());
    let mut request = last_effect.as_ref().map(request_sent);
    // Redaction: every payload-derived copy, before storage.
    let mut detail = input.detail.clone();
    st.redactor.value(ns, &mut detail);
    st.redactor.value(ns, &mut attempts);
    if let Some(e) = evidence.as_mut() {
        st.redactor.value(ns, e);
    }
    if let (Some(r), Some(effect)) = (request.as_mut(), &last_effect) {
        // The body is a document of its own: the rules' pointers start at its root.
        if let Some(body) = r.get_mut("body") {
            st.redactor.value(ns, body);
        }
        let secrets = st.redactor.secrets_in(ns, effect.new.body.as_deref());
        st.redactor.evidence(ns, r, &secrets);
    }
    let earlier: Vec<(String,)> = tx
        .all(
            &st.deadletter.replayed_before,
            Args::new().bind(ns).bind(key),
        )
        .await?;
    let id = uuid::Uuid::now_v7().to_string();
    let args = Args::new()
        .bind(&id)
        .bind(ns)
        .bind(key)
        .bind(input.class.as_str())
        .bind(input.class.component().as_str())
        .bind(&raw_event_id)
        .bind(detail.to_string())
        .bind(at)
        .bind(key)
        .bind(run.correlation_id())
        .bind(&run.metadata.operation)
        .bind(&run.metadata.workflow_version)
        .bind(schema_version)
        .bind(payload_ref)
        .bind(payload_hash)
        .bind(&input.error)
        .bind(attempts.to_string())
        .bind(evidence.as_ref().map(ToString::to_string))
        .bind(run.state.as_str())
        .bind(input.class.next_action_for(evidence.as_ref()))
        .bind(earlier.first().map(|(id,)| id.as_str()))
        .bind(earlier.len() as i64)
        .bind(request.as_ref().map(ToString::to_string));
    tx.execute(&st.deadletter.insert, args).await?;
    Ok(id)
}

/// The request an effect sends, as a dead letter shows it: what oncegate
/// stores of it. The target's credentials are added at send time from its
/// configuration and are never part of it; a JSON body is kept as JSON so
/// the redaction rules reach its fields.
pub(crate) fn request_sent(effect: &Effect) -> Value {
    let body = effect.new.body.as_deref().map(|b| {
        serde_json::from_slice::<Value>(b)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
    });
    json!({
        "effect_id": effect.id,
        "operation": effect.new.operation,
        "effect_type": effect.new.effect_type,
        "target": effect.new.target,
        "method": effect.new.method,
        "url": effect.new.url,
        "headers": effect.new.headers,
        "idempotency_key": effect.new.idempotency_key,
        "schema_version": effect.new.schema_version,
        "body": body,
    })
}

/// A run's effects as a dead letter records them.
pub(super) struct History {
    /// Each effect with its attempts.
    attempts: Value,
    /// The evidence of the latest attempt.
    last: Option<Value>,
    /// The effect that made the latest attempt.
    last_effect: Option<Effect>,
}

/// Each effect of the run with its attempts, the evidence of the latest
/// attempt, and the effect that made it.
pub(super) async fn history(tx: &mut Tx<'_>, run: &Run) -> Result<History> {
    let st = tx.st;
    let args = Args::new()
        .bind(run.namespace.as_str())
        .bind(run.key.as_str());
    let effects: Vec<EffectRow> = tx.all(&st.outbox.effects_of, args).await?;
    let mut out = Vec::new();
    let mut last: Option<(i64, Value)> = None;
    let mut last_effect = None;
    for row in effects {
        let effect = row.into_effect()?;
        let rows: Vec<AttemptRow> = tx
            .all(&st.outbox.attempts, Args::new().bind(&effect.id))
            .await?;
        let mut attempts = Vec::new();
        for a in rows {
            let AttemptView {
                attempt,
                outcome: a,
                ..
            } = a.into_view()?;
            if last.as_ref().is_none_or(|(at, _)| a.finished_at >= *at) {
                let evidence = json!({ "effect_id": effect.id, "attempt": attempt,
                    "class": a.class, "evidence": a.evidence });
                last = Some((a.finished_at, evidence));
                last_effect = Some(effect.id.clone());
            }
            attempts.push(
                json!({ "attempt": attempt, "class": a.class, "status": a.status,
                "error": a.error, "started_at": a.started_at, "finished_at": a.finished_at }),
            );
        }
        let summary = json!({
            "effect_id": effect.id, "effect_type": effect.new.effect_type,
            "operation": effect.new.operation, "target": effect.new.target,
            "idempotency_key": effect.new.idempotency_key, "state": effect.state.as_str(),
            "external_ref": effect.external_ref, "attempts": attempts,
        });
        out.push((summary, effect));
    }
    let last_effect =
        last_effect.and_then(|id| out.iter().find(|(_, e)| e.id == id).map(|(_, e)| e.clone()));
    Ok(History {
        attempts: Value::Array(out.into_iter().map(|(s, _)| s).collect()),
        last: last.map(|(_, e)| e),
        last_effect,
    })
}
