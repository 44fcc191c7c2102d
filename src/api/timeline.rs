//! `GET /v1/runs/timeline`: one key's audit answers (DESIGN.md §8).
//!
//! Did we process this key (claims and states), did we send (effects with
//! attempts and external ids), who approved (gate decisions with their
//! actor), which model drafted (recorded outputs with provider, model and
//! revision), and every raw event with its hash-chain status.

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{middleware, Json, Router};

use super::auth;
use super::error::{ApiError, Result};
use super::runs::RunRef;
use crate::audit::check_one;
use crate::audit::timeline::{build, Material, Timeline};
use crate::ledger::{IdempotencyKey, Namespace};
use crate::state::AppState;

pub(super) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/runs/timeline", get(timeline))
        .route_layer(middleware::from_fn_with_state(
            state,
            auth::workflow_or_operator,
        ))
}

/// One key's history, arranged to answer the four audit questions.
#[utoipa::path(get, path = "/v1/runs/timeline", tag = "audit", params(RunRef),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The key's timeline; `chain.ok` says whether its hash chain verifies", body = Timeline),
        (status = 400, description = "Malformed namespace or key", body = super::Problem),
        (status = 404, description = "No run and no audit event under this key", body = super::Problem),
    ))]
pub(super) async fn timeline(
    State(app): State<AppState>,
    query: std::result::Result<Query<RunRef>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Timeline>> {
    let (namespace, key) = RunRef::parse(query)?;
    load(&app, &namespace, &key)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no run and no audit event with key {key} in namespace {namespace}"
            ))
        })
}

/// One key's timeline: the run, its effects with their attempts, its audit
/// events and the chain's verification. `None` when there is neither a run
/// nor an audit event under the key. Shared with the console's run page.
///
/// # Errors
/// The store failed.
pub(crate) async fn load(
    app: &AppState,
    namespace: &Namespace,
    key: &IdempotencyKey,
) -> Result<Option<Timeline>> {
    let store = &app.store;
    let run = store.get_run(namespace, key).await?;
    let events = store.audit_trail(namespace, key).await?;
    if run.is_none() && events.is_empty() {
        return Ok(None);
    }
    let mut effects = Vec::new();
    for effect in store.effects_of(namespace, key).await? {
        let attempts = store.attempts(&effect.id).await?;
        effects.push((effect, attempts));
    }
    let anchor = store.chain_anchor(namespace.as_str(), key.as_str()).await?;
    let problem = check_one(namespace.as_str(), key.as_str(), events.clone(), &anchor);
    Ok(Some(build(Material {
        namespace: namespace.to_string(),
        key: key.to_string(),
        run,
        head: anchor.run.map(|(seq, head, _)| (seq, head)),
        effects,
        events,
        problem,
    })))
}
