//! Pipelines deployed over the API (docs/pipeline-deploy.md; beyond the
//! spec, on paths of their own): components, manifest versions, activation
//! and rollback, on the Org API for the org and on a Zone API for the zone,
//! by its ZoneAdmin with `pipeline:read` / `pipeline:write`; and what judged
//! a load. Thin: extract, check the role, call `pipeline::deployed`, shape
//! the body.

use axum::{
    Json,
    body::{Body, Bytes},
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    dailyrun_body::iso_date,
    error::ApiError,
    json_body::JsonBody,
    principal::{Caller, LakeCallerOf, LoadRead, PipelineRead, PipelineWrite, RequiredScope},
    schemas,
};
use crate::{
    pipeline::{
        PipelineKind,
        deployed::{ActivationInfo, ComponentInfo, Stored, VersionInfo, scope},
    },
    store::pipelines::PipelineScope,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put_component, get_component))
        .routes(routes!(create_version, list_versions))
        .routes(routes!(get_version))
        .routes(routes!(set_active, get_active, clear_active))
        .routes(routes!(history))
        .routes(routes!(load_pipeline))
        .merge(super::pipeline_shadow::router())
}

/// The role that owns an org's (or zone's) pipelines.
const OWNER_ROLE: &str = "ZoneAdmin";

/// The caller's scope and name, once its role owns the pipelines.
pub(super) fn owner<S: RequiredScope>(
    caller: &Caller<S>,
) -> Result<(PipelineScope, String), ApiError> {
    let lake_caller = caller.lake_caller()?;
    if !lake_caller
        .grant
        .roles
        .iter()
        .any(|role| role == OWNER_ROLE)
    {
        return Err(ApiError::Forbidden(format!("role {OWNER_ROLE}")));
    }
    let zone = caller.target.zone();
    Ok((scope(&caller.target.org, zone), lake_caller.sub))
}

/// `load` or `daily` (a zone has no daily run, so no daily pipeline); any
/// other is an unknown path.
fn kind_of<S: RequiredScope>(kind: &str, caller: &Caller<S>) -> Result<PipelineKind, ApiError> {
    match kind {
        "load" => Ok(PipelineKind::Load),
        "daily" if caller.target.zone().is_none() => Ok(PipelineKind::Daily),
        _ => Err(ApiError::NotFound),
    }
}

/// A body of at most `max` bytes, read once the caller was let in.
pub(super) async fn body_within(body: Body, max: u64) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, usize::try_from(max).unwrap_or(usize::MAX))
        .await
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|cause| cause.is::<http_body_util::LengthLimitError>());
            if too_large {
                ApiError::PayloadTooLarge
            } else {
                ApiError::BadRequest(format!("the body could not be read: {e}"))
            }
        })
}

fn component_json(info: &ComponentInfo) -> Value {
    json!({
        "digest": info.digest,
        "bytes": info.bytes,
        "world": info.kind.world(),
        "createdBy": info.created_by,
        "createdAt": iso_date(info.created_at),
    })
}

fn version_json(info: &VersionInfo, with_manifest: bool) -> Value {
    let steps: Vec<Value> = info
        .steps
        .iter()
        .map(|step| {
            json!({
                "name": step.name,
                "component": step.component.to_string(),
                "grants": step.grants.iter().map(|g| g.name()).collect::<Vec<_>>(),
                "timeLimitMs": step.time_limit_ms,
                "memoryLimitBytes": step.memory_limit_bytes,
            })
        })
        .collect();
    let mut body = json!({
        "version": info.version,
        "digest": info.digest,
        "createdBy": info.created_by,
        "createdAt": iso_date(info.created_at),
        "steps": steps,
    });
    if with_manifest {
        body["manifest"] = json!(info.manifest);
    }
    body
}

fn activation_json(info: &ActivationInfo) -> Value {
    json!({
        "version": info.version,
        "activatedBy": info.activated_by,
        "activatedAt": info.activated_at.map(iso_date),
    })
}

/// PUT /v2/pipeline/components/{digest}: stores a component by content.
#[utoipa::path(
    put,
    path = "/v2/pipeline/components/{digest}",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    params(("digest" = String, Path, description = "sha256:<64 lowercase hex digits> of the body")),
    request_body(content = Vec<u8>, content_type = "application/wasm"),
    responses(
        (status = 201, description = "Stored: {digest, bytes, world, createdBy, createdAt}"),
        (status = 200, description = "Already stored by this org (or zone): the same body"),
        (status = 400, description = "Not a digest, another digest, not a component, or no world lakehost hosts", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 413, description = "Over pipeline.max_component_bytes", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn put_component(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
    Path(digest): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let (scope, who) = owner(&caller)?;
    // Read no further than the cap (a declared length past it was refused
    // by the gateway before the body was read). A bad digest is refused
    // after the body is read: a client still sending would see the
    // connection closed instead of the answer.
    let bytes = body_within(body, state.deployments.max_component_bytes()).await?;
    let stored = state
        .deployments
        .put_component(&scope, &digest, bytes, &who)
        .await?;
    Ok(match stored {
        Stored::Created(info) => (StatusCode::CREATED, Json(component_json(&info))),
        Stored::Existing(info) => (StatusCode::OK, Json(component_json(&info))),
    }
    .into_response())
}

/// GET /v2/pipeline/components/{digest}: a stored component's metadata.
#[utoipa::path(
    get,
    path = "/v2/pipeline/components/{digest}",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    params(("digest" = String, Path, description = "sha256:<64 lowercase hex digits>")),
    responses(
        (status = 200, description = "{digest, bytes, world, createdBy, createdAt}"),
        (status = 400, description = "Not a digest", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not stored by this org (or zone)", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_component(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
    Path(digest): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (scope, _) = owner(&caller)?;
    let info = state.deployments.component(&scope, &digest).await?;
    Ok(Json(component_json(&info)))
}

/// POST /v2/pipeline/{kind}/versions: a new manifest version.
#[utoipa::path(
    post,
    path = "/v2/pipeline/{kind}/versions",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    params(("kind" = String, Path, description = "load or daily")),
    request_body(content = String, content_type = "application/toml"),
    responses(
        (status = 201, description = "{version, digest, createdBy, createdAt, steps}"),
        (status = 400, description = "The manifest is refused: {message: \"<key>: <problem>\"}", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not load or daily", body = schemas::ErrorBody),
        (status = 413, description = "Over server.max_body_bytes", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn create_version(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
    Path(kind): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, who) = owner(&caller)?;
    let body = body_within(body, state.config.server.max_body_bytes).await?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::BadRequest("the manifest must be UTF-8 TOML text".into()))?;
    let info = state
        .deployments
        .create_version(&scope, kind, text, &who)
        .await?;
    Ok((StatusCode::CREATED, Json(version_json(&info, false))).into_response())
}

/// GET /v2/pipeline/{kind}/versions: the versions, newest first.
#[utoipa::path(
    get,
    path = "/v2/pipeline/{kind}/versions",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    params(("kind" = String, Path, description = "load or daily")),
    responses(
        (status = 200, description = "{versions: [{version, digest, createdBy, createdAt, steps}]}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not load or daily", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn list_versions(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, _) = owner(&caller)?;
    let versions = state.deployments.versions(&scope, kind).await?;
    let versions: Vec<Value> = versions.iter().map(|v| version_json(v, false)).collect();
    Ok(Json(json!({ "versions": versions })))
}

/// GET /v2/pipeline/{kind}/versions/{version}: one, with its manifest.
#[utoipa::path(
    get,
    path = "/v2/pipeline/{kind}/versions/{version}",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    params(
        ("kind" = String, Path, description = "load or daily"),
        ("version" = String, Path, description = "The version's number"),
    ),
    responses(
        (status = 200, description = "{version, digest, createdBy, createdAt, steps, manifest}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "No such version", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_version(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
    Path((kind, version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, _) = owner(&caller)?;
    let version = version.parse::<i64>().map_err(|_| ApiError::NotFound)?;
    let info = state.deployments.version(&scope, kind, version).await?;
    Ok(Json(version_json(&info, true)))
}

/// `{"version": N}`, the body of an activation and of a shadow: a JSON
/// object (`JsonBody::object`, the house rule) of that one key.
pub(super) fn version_body(body: &[u8]) -> Result<i64, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct VersionBody {
        version: i64,
    }
    let refused =
        || ApiError::BadRequest("Body must be valid JSON: {\"version\": <integer>}.".into());
    let object = JsonBody::parse(body)
        .and_then(JsonBody::object)
        .map_err(|_| refused())?;
    serde_json::from_value::<VersionBody>(Value::Object(object))
        .map(|b| b.version)
        .map_err(|_| refused())
}

/// PUT /v2/pipeline/{kind}/active: makes a version the pipeline.
#[utoipa::path(
    put,
    path = "/v2/pipeline/{kind}/active",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    params(("kind" = String, Path, description = "load or daily")),
    request_body(content = String, content_type = "application/json", description = "{\"version\": N}"),
    responses(
        (status = 200, description = "{version, activatedBy, activatedAt}"),
        (status = 400, description = "The body is not {\"version\": <integer>}", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "No such version, or not load or daily", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn set_active(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
    Path(kind): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, who) = owner(&caller)?;
    let body = body_within(body, state.config.server.max_body_bytes).await?;
    let version = version_body(&body)?;
    let info = state
        .deployments
        .activate(&scope, kind, Some(version), &who)
        .await?;
    Ok(Json(activation_json(&info)))
}

/// GET /v2/pipeline/{kind}/active: the activation in force.
#[utoipa::path(
    get,
    path = "/v2/pipeline/{kind}/active",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    params(("kind" = String, Path, description = "load or daily")),
    responses(
        (status = 200, description = "{version, activatedBy, activatedAt}; all null when the operator's files run"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not load or daily", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_active(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, _) = owner(&caller)?;
    let info = state.deployments.active(&scope, kind).await?;
    Ok(Json(activation_json(&info)))
}

/// DELETE /v2/pipeline/{kind}/active: back to the operator's files.
#[utoipa::path(
    delete,
    path = "/v2/pipeline/{kind}/active",
    tag = "pipeline",
    security(("bearer" = ["pipeline:write"])),
    params(("kind" = String, Path, description = "load or daily")),
    responses(
        (status = 200, description = "{version: null, activatedBy, activatedAt}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not load or daily", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn clear_active(
    State(state): State<AppState>,
    caller: Caller<PipelineWrite>,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, who) = owner(&caller)?;
    let info = state.deployments.activate(&scope, kind, None, &who).await?;
    Ok(Json(activation_json(&info)))
}

/// GET /v2/pipeline/{kind}/history: the activations, newest first.
#[utoipa::path(
    get,
    path = "/v2/pipeline/{kind}/history",
    tag = "pipeline",
    security(("bearer" = ["pipeline:read"])),
    params(("kind" = String, Path, description = "load or daily")),
    responses(
        (status = 200, description = "{activations: [{version, activatedBy, activatedAt}]}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or not the ZoneAdmin", body = schemas::ErrorBody),
        (status = 404, description = "Not load or daily", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn history(
    State(state): State<AppState>,
    caller: Caller<PipelineRead>,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = kind_of(&kind, &caller)?;
    let (scope, _) = owner(&caller)?;
    let activations = state.deployments.history(&scope, kind).await?;
    let activations: Vec<Value> = activations.iter().map(activation_json).collect();
    Ok(Json(json!({ "activations": activations })))
}

/// GET /v2/load/{load_id}/pipeline: what judged a load.
#[utoipa::path(
    get,
    path = "/v2/load/{load_id}/pipeline",
    tag = "load",
    security(("bearer" = ["load:read"])),
    params(("load_id" = String, Path, description = "The loadId of POST /load")),
    responses(
        (status = 200, description = "{loadId, source, version, digest, steps: [{name, outcome, ms, message}], recordedAt, \
shadow: null or {version, agreed, activeOutcome, shadowOutcome, step, message, steps, ranAt}}"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown load, another user's, or its commit has not begun", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn load_pipeline(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<LoadRead>,
    Path(load_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // The load's own visibility: another user's is not found.
    state.loads.get(&caller, &load_id).await?;
    let judged = state
        .deployments
        .load_judgement(&load_id)
        .await?
        .ok_or(ApiError::LoadNotFound)?;
    let shadow = state.deployments.shadow_of_load(&load_id).await?;
    Ok(Json(json!({
        "loadId": load_id,
        "source": judged.source,
        "version": judged.version,
        "digest": judged.digest,
        "steps": judged.steps,
        "recordedAt": iso_date(judged.recorded_at),
        "shadow": shadow.as_ref().map(super::pipeline_shadow::run_json).transpose()?,
    })))
}
