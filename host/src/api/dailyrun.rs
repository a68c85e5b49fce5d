//! The DailyRun API's flag endpoints (spec "GET /dailyRun/dailyRun_enabled",
//! "POST /dailyRun/dailyRun_enabled", "DailyRun errors"), served under
//! `/dailyRun` and under `server.dailyrun_prefix`. Thin: extract, call the
//! store, shape the body. The flag is the org's whose host was called.

use axum::{Json, body::Bytes, extract::State};
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    error::ApiError,
    principal::{Caller, DailyRunEnabledRead, DailyRunEnabledWrite},
};
use crate::dailyrun::requested_flag;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_flag, set_flag))
}

/// GET /dailyRun/dailyRun_enabled: {dailyRun: bool}; 404 before it was set.
#[utoipa::path(
    get,
    path = "/dailyRun/dailyRun_enabled",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:enabled:read"])),
    responses(
        (status = 200, description = "{dailyRun: boolean}"),
        (status = 401, description = "Missing or invalid token"),
        (status = 403, description = "Missing scope"),
        (status = 404, description = "DailyRun not found: the flag was never set"),
        (status = 500, description = "Error reading ClientMetaData"),
    )
)]
async fn get_flag(
    State(state): State<AppState>,
    caller: Caller<DailyRunEnabledRead>,
) -> Result<Json<Value>, ApiError> {
    let flag = state
        .store
        .daily_run_flag(&caller.target.org)
        .await
        .map_err(|e| ApiError::DailyRunStore {
            message: "Error reading ClientMetaData",
            cause: e.to_string(),
        })?
        .ok_or(ApiError::DailyRunNotFound)?;
    Ok(Json(json!({ "dailyRun": flag })))
}

/// POST /dailyRun/dailyRun_enabled: {dailyRun: true|false|"yes"|"no"|1|0}.
#[utoipa::path(
    post,
    path = "/dailyRun/dailyRun_enabled",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:enabled:write"])),
    request_body(content = Value, description = "dailyRun: true or false (also \"true\", \"false\", \"yes\", \"no\", 1, 0)"),
    responses(
        (status = 200, description = "{dailyRun: the value written}"),
        (status = 400, description = "Body missing, not JSON, or no recognised dailyRun value"),
        (status = 401, description = "Missing or invalid token"),
        (status = 403, description = "Missing scope"),
        (status = 500, description = "Error updating ClientMetaData"),
    )
)]
async fn set_flag(
    State(state): State<AppState>,
    caller: Caller<DailyRunEnabledWrite>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let flag = requested_flag(&body).ok_or_else(|| {
        ApiError::BadRequest("Body must be valid JSON with 'dailyRun' set to true or false.".into())
    })?;
    let now = state.clock.now().timestamp_micros();
    state
        .store
        .set_daily_run_flag(&caller.target.org, flag, now)
        .await
        .map_err(|e| ApiError::DailyRunStore {
            message: "Error updating ClientMetaData",
            cause: e.to_string(),
        })?;
    Ok(Json(json!({ "dailyRun": flag })))
}
