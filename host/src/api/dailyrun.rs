//! The DailyRun API (spec "GET/POST /dailyRun/dailyRun_enabled", "GET
//! /dailyRun/execution_status", "POST /dailyRun/start_execution", "DailyRun
//! errors"), served under `/dailyRun` and under `server.dailyrun_prefix`.
//! Thin: extract, call the daily-run service, shape the body
//! (`dailyrun_body.rs`).
//! Everything is the org's whose host was called.

use std::collections::HashMap;

use axum::{
    Json,
    body::Bytes,
    extract::{RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::dailyrun_body::{
    INVALID_MODE, StatusMode, execution_arn, execution_json, iso_date, requested_flag,
    state_machine_arn, status_limit, status_mode,
};
use super::{
    AppState,
    error::ApiError,
    principal::{
        Caller, DailyRunEnabledRead, DailyRunEnabledWrite, DailyRunExecutionRead,
        DailyRunExecutionWrite,
    },
    schemas,
};
use crate::dailyrun::StartResult;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_flag, set_flag))
        .routes(routes!(execution_status))
        .routes(routes!(start_execution))
}

/// GET /dailyRun/dailyRun_enabled: {dailyRun: bool}; 404 before it was set.
#[utoipa::path(
    get,
    path = "/dailyRun/dailyRun_enabled",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:enabled:read"])),
    responses(
        (status = 200, description = "The flag", body = schemas::DailyRunFlag),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "DailyRun not found: the flag was never set", body = schemas::ErrorBody),
        (status = 500, description = "Error reading ClientMetaData", body = schemas::ErrorBody),
    )
)]
async fn get_flag(
    State(state): State<AppState>,
    caller: Caller<DailyRunEnabledRead>,
) -> Result<Json<schemas::DailyRunFlag>, ApiError> {
    let flag = state
        .daily_runs
        .flag(&caller.target.org)
        .await
        .map_err(|e| ApiError::DailyRunStore {
            message: "Error reading ClientMetaData",
            cause: Box::new(e),
        })?
        .ok_or(ApiError::DailyRunNotFound)?;
    Ok(Json(schemas::DailyRunFlag { daily_run: flag }))
}

/// POST /dailyRun/dailyRun_enabled: {dailyRun: true|false|"yes"|"no"|1|0}.
#[utoipa::path(
    post,
    path = "/dailyRun/dailyRun_enabled",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:enabled:write"])),
    request_body(content = schemas::DailyRunFlagRequest),
    responses(
        (status = 200, description = "The value written", body = schemas::DailyRunFlag),
        (status = 400, description = "Body missing, not JSON, or no recognised dailyRun value", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 500, description = "Error updating ClientMetaData", body = schemas::ErrorBody),
    )
)]
async fn set_flag(
    State(state): State<AppState>,
    caller: Caller<DailyRunEnabledWrite>,
    body: Bytes,
) -> Result<Json<schemas::DailyRunFlag>, ApiError> {
    let flag = requested_flag(&body).ok_or_else(|| {
        ApiError::BadRequest("Body must be valid JSON with 'dailyRun' set to true or false.".into())
    })?;
    state
        .daily_runs
        .set_flag(&caller.target.org, flag)
        .await
        .map_err(|e| ApiError::DailyRunStore {
            message: "Error updating ClientMetaData",
            cause: Box::new(e),
        })?;
    Ok(Json(schemas::DailyRunFlag { daily_run: flag }))
}

/// GET /dailyRun/execution_status?mode=list|latest|last_successful&limit=n.
#[utoipa::path(
    get,
    path = "/dailyRun/execution_status",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:execution:read"])),
    params(
        ("mode" = Option<String>, Query, pattern = "^([Ll][Ii][Ss][Tt]|[Ll][Aa][Tt][Ee][Ss][Tt]|[Ll][Aa][Ss][Tt]_[Ss][Uu][Cc][Cc][Ee][Ss][Ss][Ff][Uu][Ll])$", description = "list (default), latest or last_successful; any case"),
        ("limit" = Option<i64>, Query, description = "mode=list: at most this many, default 50, clamped to 1..200"),
    ),
    responses(
        (status = 200, description = "list: {executions: [...]}, most recent first; latest: one execution or null; \
            last_successful: one SUCCEEDED execution or {message}. An execution is {name, status, startDate, \
            stopDate, error, cause}", body = Option<schemas::ExecutionStatusBody>),
        (status = 400, description = "mode is not valid, mode should be one of: list, latest, last_successful; or limit is not an integer", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 500, description = "Error reading DailyRun executions", body = schemas::ErrorBody),
    )
)]
async fn execution_status(
    State(state): State<AppState>,
    caller: Caller<DailyRunExecutionRead>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    // Parsed leniently by hand: a malformed query string must still get the
    // spec's JSON errors, not the extractor's plain-text 400.
    let params: HashMap<String, String> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let mode = status_mode(params.get("mode").map(String::as_str))
        .ok_or_else(|| ApiError::BadRequest(INVALID_MODE.into()))?;
    let limit = status_limit(params.get("limit").map(String::as_str))
        .ok_or_else(|| ApiError::BadRequest("limit must be an integer".into()))?;
    let org = &caller.target.org;
    let read_error = |e: crate::store::Error| ApiError::DailyRunStore {
        message: "Error reading DailyRun executions",
        cause: Box::new(e),
    };
    let body = match mode {
        StatusMode::List => {
            let runs = state
                .daily_runs
                .executions(org, limit, false)
                .await
                .map_err(read_error)?;
            json!({ "executions": runs.iter().map(execution_json).collect::<Vec<_>>() })
        }
        StatusMode::Latest => {
            let runs = state
                .daily_runs
                .executions(org, 1, false)
                .await
                .map_err(read_error)?;
            runs.first().map(execution_json).unwrap_or(Value::Null)
        }
        StatusMode::LastSuccessful => {
            let runs = state
                .daily_runs
                .executions(org, 1, true)
                .await
                .map_err(read_error)?;
            runs.first().map(execution_json).unwrap_or_else(
                || json!({ "message": "No successful execution of the Daily ETL pipeline was found." }),
            )
        }
    };
    Ok(Json(body))
}

/// POST /dailyRun/start_execution: starts a run now, whatever the flag.
#[utoipa::path(
    post,
    path = "/dailyRun/start_execution",
    tag = "dailyRun",
    security(("bearer" = ["dailyrun:execution:write"])),
    responses(
        (status = 200, description = "Started", body = schemas::ExecutionStarted),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 409, description = "{message, started: false, executionName: null, runningExecution: {name, status, startDate}, stateMachineArn}", body = schemas::ExecutionNotStarted),
        (status = 500, description = "Error starting Daily ETL pipeline execution", body = schemas::ErrorBody),
    )
)]
async fn start_execution(
    State(state): State<AppState>,
    caller: Caller<DailyRunExecutionWrite>,
) -> Result<Response, ApiError> {
    let org = &caller.target.org;
    let started =
        state
            .daily_runs
            .start_manual(org)
            .await
            .map_err(|e| ApiError::DailyRunStore {
                message: "Error starting Daily ETL pipeline execution",
                cause: Box::new(e),
            })?;
    Ok(match started {
        StartResult::Started(run) => Json(json!({
            "message": "Daily ETL pipeline execution started.",
            "started": true,
            "executionArn": execution_arn(org, &run.name),
            "startDate": iso_date(run.started_at),
            "executionName": run.name,
            "stateMachineArn": state_machine_arn(org),
        }))
        .into_response(),
        StartResult::AlreadyRunning(running) => (
            StatusCode::CONFLICT,
            Json(json!({
                "message": "Daily ETL pipeline is already running for this client; no execution started.",
                "started": false,
                "executionName": null,
                "runningExecution": {
                    "name": running.name,
                    "status": running.status.as_str(),
                    "startDate": iso_date(running.started_at),
                },
                "stateMachineArn": state_machine_arn(org),
            })),
        )
            .into_response(),
    })
}
