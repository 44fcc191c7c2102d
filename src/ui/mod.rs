//! The operator console at `/ui` (DESIGN.md §1 "api / ui", §7, §8).
//!
//! Server-rendered HTML (`maud`, which escapes every value), no script, no
//! front-end build, nothing fetched from elsewhere: the stylesheet is
//! embedded in the binary and served from this origin ([`assets`]), the
//! charts are inline SVG, and every page carries the
//! security headers of the approval pages
//! ([`crate::approval::pages::respond`]). People sign in once at `/login`
//! (the approval pages' session); every page needs the operator scope
//! except the approvals inbox, which approvers open too.
//!
//! GET never changes anything. Every change is a POST from a form that
//! carries a CSRF token bound to the session and to a purpose naming the
//! action and its object ([`purpose`]), answered by a `303` back to a page
//! (post, redirect, get). Commands call the same store and domain code as
//! the JSON API, with the signed-in subject as the actor in the audit log.
//!
//! One page per file:
//! - [`home`]: `/`, links to the console, the API document and health.
//! - [`dashboard`]: the numbers an operator checks first, with charts.
//! - [`runs`]: search runs by key, namespace, state or execution ref.
//! - [`run`]: one key's four audit answers, timeline, effects, attempts.
//! - [`approvals`]: pending challenges as cards, opening the decision page.
//! - [`deadletters`] and [`deadletter`]: filters, evidence, resolve, replay.
//! - [`deliveries`]: the deliveries log; forward anyway, redeliver.
//! - [`replay`]: bulk replay: the dry-run summary, then the job.
//! - [`jobs`]: replay jobs: progress, stop, resume.
//! - [`actions`]: the kill switch, with a confirmation step.
//! - [`targets`]: target health (paused, disabled), enable and disable.
//! - [`tokens`]: API tokens (admins): list, make (shown once), revoke.
//! - [`assets`]: the stylesheets the pages link.

use axum::response::Redirect;
use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

pub mod actions;
pub mod approvals;
pub mod assets;
pub mod charts;
pub mod dashboard;
pub mod deadletter;
pub mod deadletters;
pub mod deliveries;
pub mod error;
pub mod fix;
pub mod form;
pub mod frame;
pub mod home;
pub mod jobs;
pub mod replay;
pub mod run;
pub mod runs;
pub mod session;
pub mod targets;
pub mod tokens;

pub use error::UiError;
pub use session::{Operator, Viewer};

/// The console's routes (merged into the app by [`crate::app::router`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(home::show))
        .route(frame::STYLESHEET, get(assets::console))
        .route(crate::approval::pages::STYLESHEET, get(assets::pages))
        .route("/ui", get(dashboard::show))
        .route("/ui/runs", get(runs::show))
        .route("/ui/run", get(run::show))
        .route("/ui/approvals", get(approvals::show))
        .route("/ui/dead-letters", get(deadletters::show))
        .route("/ui/dead-letters/{id}", get(deadletter::show))
        .route("/ui/dead-letters/{id}/replay", post(deadletter::replay))
        .route("/ui/dead-letters/{id}/release", post(deadletter::release))
        .route("/ui/dead-letters/{id}/resolve", post(deadletter::resolve))
        .route("/ui/deliveries", get(deliveries::show))
        .route("/ui/deliveries/{id}/forward", post(deliveries::forward))
        .route("/ui/deliveries/{id}/redeliver", post(deliveries::redeliver))
        .route("/ui/dead-letters/{id}/fix", get(fix::show))
        .route("/ui/dead-letters/{id}/replay-fixed", post(fix::replay))
        .route("/ui/replay", get(replay::dry_run))
        .route("/ui/replay-jobs", get(jobs::list).post(replay::create))
        .route("/ui/replay-jobs/{id}", get(jobs::show))
        .route("/ui/replay-jobs/{id}/stop", post(jobs::stop))
        .route("/ui/replay-jobs/{id}/resume", post(jobs::resume))
        .route("/ui/actions", get(actions::show).post(actions::change))
        .route("/ui/actions/confirm", get(actions::confirm))
        .route("/ui/targets", get(targets::show).post(targets::change))
        .route("/ui/targets/confirm", get(targets::confirm))
        .route("/ui/tokens", get(tokens::show).post(tokens::create))
        .route("/ui/tokens/{id}/revoke", post(tokens::revoke))
        // The approval pages link their inbox here.
        .route(
            "/approvals",
            get(|| async { Redirect::to("/ui/approvals") }),
        )
}

/// The CSRF purpose of a console form: the action and its object, so a
/// token for one form is refused by every other.
pub fn purpose(action: &str, object: &str) -> String {
    format!("ui:{action}:{object}")
}

/// A bounded, trimmed, optional form or query text.
///
/// # Errors
/// [`UiError::Invalid`] naming `field` when it is longer than `max`.
pub fn text_field(
    field: &str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>, UiError> {
    match crate::criteria::filled(value) {
        Some(v) if v.len() > max => Err(UiError::Invalid(format!(
            "{field} is longer than {max} bytes"
        ))),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_name_action_and_object() {
        assert_eq!(purpose("replay", "dl-1"), "ui:replay:dl-1");
        assert_ne!(purpose("replay", "dl-1"), purpose("resolve", "dl-1"));
    }

    #[test]
    fn text_fields_are_trimmed_and_bounded() {
        assert_eq!(text_field("f", Some("  ".into()), 5).unwrap(), None);
        assert_eq!(
            text_field("f", Some(" ab ".into()), 5).unwrap(),
            Some("ab".into())
        );
        assert!(text_field("f", Some("abcdef".into()), 5).is_err());
    }
}
