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
        super::deliveries::list,
        super::deliveries::refused,
        super::deliveries::show,
        super::deliveries::forward,
        super::deliveries::redeliver,
        super::effects::commit,
        super::effects::list,
        super::effects::cancel,
        super::admin::set,
        super::admin::list,
        super::targets::set,
        super::targets::list,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics,
        super::deadletters::list,
        super::deadletters::show,
        super::deadletters::actions::resolve,
        super::deadletters::actions::replay,
        super::deadletters::fix::dry_run,
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
        super::audit_status::status,
        super::gate::output,
        super::gate::gate,
        super::approvals::list,
        super::noop::noop,
        super::proxy::forward,
        super::proxy::resolve,
        super::tokens::create,
        super::tokens::list,
        super::tokens::revoke,
    ),
    components(schemas(super::Problem)),
    modifiers(&BearerAuth, &CommonAnswers),
    tags(
        (name = "ledger", description = "Claims and the owner's moves"),
        (name = "ingress", description = "Signed webhook deliveries; the deliveries log and its forwards"),
        (name = "outbox", description = "Effects: commit, list, cancel"),
        (name = "ops", description = "Health, readiness, metrics"),
        (name = "dead letters", description = "Dead letters: list, inspect, resolve, replay, replace; bulk replay jobs"),
        (name = "audit", description = "A key's timeline and hash-chain status"),
        (name = "approvals", description = "Model output, the gate, the approvals inbox"),
        (name = "proxy", description = "The Idempotency-Key proxy and the resolution of its unknown keys"),
        (name = "tokens", description = "API tokens made at run time: create (shown once), list, revoke"),
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

/// The answers every route can give besides its own, as problem+json:
/// 400 for a malformed request (parameters or body), 401 and 403 for a
/// token route, 404 for an id in the path, 408 for the request timeout,
/// 413 for a body over the limit, 503 when the database cannot take the
/// call now. A handler documents the ones that mean something for it (with
/// its own description); this fills in the rest, so a client (and the
/// fuzzer in `scripts/check-api`) sees every status the server sends.
/// It also files every problem body under `application/problem+json`, the
/// content type the server answers errors with.
struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::HttpMethod;
        for (path, item) in openapi.paths.paths.iter_mut() {
            let ops = [
                (HttpMethod::Get, &mut item.get),
                (HttpMethod::Post, &mut item.post),
                (HttpMethod::Put, &mut item.put),
                (HttpMethod::Delete, &mut item.delete),
                (HttpMethod::Patch, &mut item.patch),
            ];
            for (_, op) in ops {
                if let Some(op) = op.as_mut() {
                    common_answers(path, op);
                }
            }
        }
    }
}

fn common_answers(path: &str, op: &mut utoipa::openapi::path::Operation) {
    use utoipa::openapi::RefOr;
    let problem_type = "application/problem+json";
    // Problem bodies are answered as problem+json.
    for response in op.responses.responses.values_mut() {
        if let RefOr::T(response) = response {
            let is_problem = response.content.get("application/json").is_some_and(|c| {
                matches!(&c.schema, Some(RefOr::Ref(r)) if r.ref_location.ends_with("/Problem"))
            });
            if is_problem {
                if let Some(content) = response.content.shift_remove("application/json") {
                    response.content.insert(problem_type.to_owned(), content);
                }
            }
        }
    }
    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let takes_input =
        op.request_body.is_some() || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let has_path_id = path.contains('{');
    let mut add = |status: &str, description: &str| {
        if !op.responses.responses.contains_key(status) {
            let response = utoipa::openapi::ResponseBuilder::new()
                .description(description)
                .content(
                    problem_type,
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                            "Problem",
                        ))))
                        .build(),
                )
                .build();
            op.responses
                .responses
                .insert(status.to_owned(), RefOr::T(response));
        }
    };
    if takes_input {
        add("400", "Malformed request: the problem names the field");
    }
    if secured {
        add("401", "No token, or an unknown one");
        add("403", "The token lacks the route's scope");
    }
    if has_path_id {
        add("404", "Nothing by that name or id");
    }
    if path != "/healthz" && path != "/openapi.json" {
        add("408", "The request outlived server.request_timeout_ms");
    }
    if op.request_body.is_some() {
        add("413", "The body is over the limit");
    }
    if path.starts_with("/v1/") || path.starts_with("/hooks/") || path.starts_with("/proxy/") {
        add(
            "503",
            "The database cannot take the call now (down, read-only, full): retry later",
        );
    }
}

/// `GET /openapi.json`.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
}
