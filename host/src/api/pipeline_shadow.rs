//! The load pipeline's shadow (docs/pipeline-deploy.md "Shadow runs"):
//! `PUT`, `DELETE` and `GET /v2/pipeline/load/shadow`, by the org's (or
//! zone's) ZoneAdmin as the other pipeline paths (`pipeline.rs`).

use axum::{Json, body::Body, extract::State};
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    dailyrun_body::iso_date,
    error::ApiError,
    pipeline::{body_within, owner, version_body},
    principal::{Caller, PipelineRead, PipelineWrite},
    schemas,
};
use crate::store::pipeline_shadows::{ShadowRun, ShadowSetting};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(set_shadow, get_shadow, clear_shadow))
}

/// A shadow's run beside one commit.
pub(super) fn run_json(run: &ShadowRun) -> Result<Value, ApiError> {
    let steps: Value = serde_json::from_str(&run.steps_json)
        .map_err(|e| ApiError::failed("stored shadow steps", e))?;
    Ok(json!({
        "loadId": run.load_id,
        "version": run.version,
        "agreed": run.agreed,
        "activeOutcome": run.active_outcome,
        "shadowOutcome": run.shadow_outcome,
        "step": run.step,
        "message": run.message,
        "steps": steps,
        "ranAt": iso_date(run.ran_at),
    }))
}

fn setting_json(setting: Option<&ShadowSetting>) -> Value {
    json!({
        "version": setting.and_then(|s| s.version),
        "setBy": setting.map(|s| &s.set_by),
        "setAt": setting.map(|s| iso_date(s.set_at)),
    })
}

/// PUT /v2/pipeline/load/shadow: runs a version beside every commit.
#[utoipa::path(
    put,
    path = "/v2/pipeline/load/shadow",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    request_body(content = String, content_type = "application/json", description = "{\"version\": N}"),
    responses(
        (status = 200, description = "{version, setBy, setAt}"),
        (status = 400, description = "The body is not {\"version\": <integer>}", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "No such load pipeline version", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn set_shadow(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let (scope, who) = owner(&caller)?;
    let body = body_within(body, state.config.server.max_body_bytes).await?;
    let version = version_body(&body)?;
    let setting = state
        .deployments
        .set_shadow(&scope, Some(version), &who)
        .await?;
    Ok(Json(setting_json(Some(&setting))))
}

/// DELETE /v2/pipeline/load/shadow: no shadow from now.
#[utoipa::path(
    delete,
    path = "/v2/pipeline/load/shadow",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    responses(
        (status = 200, description = "{version: null, setBy, setAt}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn clear_shadow(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
) -> Result<Json<Value>, ApiError> {
    let (scope, who) = owner(&caller)?;
    let setting = state.deployments.set_shadow(&scope, None, &who).await?;
    Ok(Json(setting_json(Some(&setting))))
}

/// GET /v2/pipeline/load/shadow: the shadow and what it found.
#[utoipa::path(
    get,
    path = "/v2/pipeline/load/shadow",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    responses(
        (status = 200, description = "{version, setBy, setAt, loads, agreements, disagreements: [{loadId, version, \
agreed, activeOutcome, shadowOutcome, step, message, steps, ranAt}]}: the commits since it was set"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_shadow(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
) -> Result<Json<Value>, ApiError> {
    let (scope, _) = owner(&caller)?;
    let report = state.deployments.shadow_report(&scope).await?;
    let mut body = setting_json(report.setting.as_ref());
    let (loads, agreements, disagreements) = match &report.tally {
        Some(tally) => (
            tally.loads,
            tally.agreements,
            tally
                .disagreements
                .iter()
                .map(run_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => (0, 0, Vec::new()),
    };
    body["loads"] = json!(loads);
    body["agreements"] = json!(agreements);
    body["disagreements"] = json!(disagreements);
    Ok(Json(body))
}
