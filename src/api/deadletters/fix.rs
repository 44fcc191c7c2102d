//! Replay after a fix over HTTP: the corrected body of a replay (whole, or
//! a declared transform) and its dry run.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::super::error::{ApiError, Result};
use super::super::ApiJson;
use super::actions::replay_error;
use crate::api::PathId;
use crate::deadletter::correct::{Correction, Preview};
use crate::deadletter::fix::{self, Fix};
use crate::state::AppState;

/// A declared transform, by name and version.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformRef {
    /// Its name in `[[dead_letters.transforms]]`.
    pub name: String,
    /// Its version.
    pub version: u32,
}

/// A correction in a request: a whole body or a transform, never both.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FixFields {
    /// The whole corrected JSON body of the failed effect.
    #[schema(value_type = Option<Object>)]
    pub body: Option<Value>,
    /// A declared transform (RFC 6902 JSON Patch) applied to the body that was sent.
    pub transform: Option<TransformRef>,
    /// The effect to correct; by default the one whose request failed.
    pub effect_id: Option<String>,
}

impl FixFields {
    /// The correction asked for, if any.
    ///
    /// # Errors
    /// 400 when both a body and a transform are given, or only an effect id.
    pub fn parse(self) -> Result<Option<Fix>> {
        let correction = match (self.body, self.transform) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "body",
                    "give the corrected body whole or by a transform, not both",
                ))
            }
            (Some(body), None) => Correction::Body(body),
            (None, Some(t)) => Correction::Transform {
                name: t.name,
                version: t.version,
            },
            (None, None) if self.effect_id.is_some() => {
                return Err(ApiError::invalid(
                    "effect_id",
                    "an effect id names the effect a body or transform corrects: give one",
                ))
            }
            (None, None) => return Ok(None),
        };
        Ok(Some(Fix {
            correction,
            effect_id: self.effect_id,
        }))
    }
}

/// The dry run of a corrected replay: the bodies before and after (as the
/// redaction rules let them be shown), their RFC 6902 diff, the hashes,
/// the transform, and the key the corrected request goes under. Nothing
/// is written.
#[utoipa::path(post, path = "/v1/dead-letters/{id}/replay/dry-run", tag = "dead letters", operation_id = "replay_dry_run",
    params(("id" = String, Path, description = "Dead letter id")), request_body = FixFields,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the corrected replay would send", body = Preview),
        (status = 400, description = "No correction, or both a body and a transform", body = super::super::Problem),
        (status = 404, description = "No such dead letter", body = super::super::Problem),
        (status = 409, description = "Already resolved, or nothing to replay", body = super::super::Problem),
        (status = 422, description = "Unknown transform, one for another operation or effect type, a patch that does not apply, a body that is not JSON, or no effect to correct", body = super::super::Problem),
    ))]
pub(in crate::api) async fn dry_run(
    State(app): State<AppState>,
    PathId(id): PathId,
    ApiJson(fields): ApiJson<FixFields>,
) -> Result<Json<Preview>> {
    let Some(fix) = fields.parse()? else {
        return Err(ApiError::invalid(
            "body",
            "a dry run shows a correction: give a body or a transform",
        ));
    };
    let preview = fix::preview(&app.replay, &id, &fix)
        .await
        .map_err(replay_error)?;
    Ok(Json(preview))
}
