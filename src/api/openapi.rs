//! The OpenAPI document, generated from the handlers' annotations and
//! served at `GET /openapi.json`.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::state::AppState;

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "oncegate", description = "Makes side-effecting workflow automation safe to retry."),
    paths(
        super::claims::claim,
        super::runs::renew,
        super::runs::complete,
        super::runs::fail,
        super::runs::get_run,
        super::hooks::receive,
        super::effects::commit,
        super::effects::list,
        super::effects::cancel,
        super::admin::set,
        super::admin::list,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics,
        super::deadletters::list,
        super::deadletters::show,
        super::deadletters::actions::resolve,
        super::deadletters::actions::replay,
        super::deadletters::actions::release,
        super::deadletters::actions::replace,
        super::deadletters::actions::assign,
        super::deadletters::actions::links,
        super::deadletters::fail::fail_by_execution,
        super::deadletters::jobs::dry_run,
        super::deadletters::jobs::create,
        super::deadletters::jobs::list,
        super::deadletters::jobs::show,
        super::deadletters::jobs::stop,
        super::deadletters::jobs::resume,
        super::timeline::timeline,
        super::gate::output,
        super::gate::gate,
        super::approvals::list,
        super::noop::noop,
        super::proxy::forward,
        super::proxy::resolve,
    ),
    components(schemas(super::Problem)),
    modifiers(&BearerAuth),
    tags(
        (name = "ledger", description = "Claims and the owner's moves"),
        (name = "ingress", description = "Signed webhook deliveries"),
        (name = "outbox", description = "Effects: commit, list, cancel"),
        (name = "ops", description = "Health, readiness, metrics"),
        (name = "dead letters", description = "Dead letters: list, inspect, resolve, replay, replace; bulk replay jobs"),
        (name = "audit", description = "A key's timeline and hash-chain status"),
        (name = "approvals", description = "Model output, the gate, the approvals inbox"),
        (name = "proxy", description = "The Idempotency-Key proxy and the resolution of its unknown keys"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// `GET /openapi.json`.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
}
