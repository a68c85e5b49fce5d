//! The load endpoints of the Org and Zone APIs (spec "POST /load",
//! "POST /load/{load_id}/file", "GET /load/{load_id}", "Load request
//! errors"). Thin: extract, call `LoadService`, shape the body.

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    error::ApiError,
    idempotency::{IdempotencyKey, Operation},
    json_body::JsonBody,
    load_body,
    principal::{LakeCallerOf, LoadRead, LoadWrite},
    schemas,
};
use crate::{
    auth::LakeCaller,
    config::ErrorMessagesShape,
    load::UploadDescriptor,
    store::loads::{LoadRecord, LoadState},
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_load))
        .routes(routes!(get_load))
        .routes(routes!(add_file))
        .routes(routes!(commit_load))
}

/// The Load resource (spec "Resources: Load"): LoadStatus, and on FAIL the
/// ErrorType and ErrorMessages; with the request's own fields for reference.
fn load_resource(record: &LoadRecord, shape: ErrorMessagesShape) -> Result<Value, ApiError> {
    let load = &record.load;
    let mut body = Map::new();
    body.insert("loadId".into(), json!(load.id));
    body.insert("LoadStatus".into(), json!(record.state.as_str()));
    body.insert("load_type".into(), json!(load.load_type));
    body.insert("table_name".into(), json!(load.table_name));
    if let Some(client) = &load.load_as_service_client_id {
        body.insert("load_as_service_client_id".into(), json!(client));
    }
    body.insert("partitions".into(), json!(load.partitions));
    if record.state == LoadState::Fail {
        let error_type = record.error_type.clone().unwrap_or_default();
        let details: Vec<Value> = match &record.error_messages_json {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| ApiError::failed("stored error messages", e))?,
            None => Vec::new(),
        };
        let messages: Vec<Value> = details
            .iter()
            .map(|item| error_message_item(&error_type, item, shape))
            .collect();
        body.insert("ErrorType".into(), json!(error_type));
        body.insert("ErrorMessages".into(), json!(messages));
        body.insert("ErrorDetails".into(), json!(details));
    }
    Ok(Value::Object(body))
}

/// One `ErrorMessages` item from its stored detail (`ErrorType` as the
/// recap's name, `ErrorMessage`, `CheckResult` on checksum items). The spec
/// shows CheckSumError's items as objects with CheckResult FAIL and allows
/// strings for the rest, which is also what the Comotion SDK reads; with
/// `Strings`, a checksum item is one sentence carrying the same facts.
fn error_message_item(error_type: &str, detail: &Value, shape: ErrorMessagesShape) -> Value {
    let message = detail["ErrorMessage"].as_str().unwrap_or_default();
    match (error_type, shape) {
        ("CheckSumError", ErrorMessagesShape::Spec) => detail.clone(),
        ("CheckSumError", ErrorMessagesShape::Strings) => {
            let check_result = detail["CheckResult"].as_str().unwrap_or("FAIL");
            json!(format!("{message} (CheckResult: {check_result})"))
        }
        _ => json!(message),
    }
}

/// POST /load: a new OPEN load; 202 {loadId}.
#[utoipa::path(
    post,
    path = "/v2/load",
    tag = "load",
    security(("bearer" = ["load:write"])),
    params(IdempotencyKey),
    request_body(content = schemas::LoadRequest),
    responses(
        (status = 202, description = "Accepted", body = schemas::LoadAccepted, links(
            ("GetLoad" = (operation_id = "get_load", parameters(("load_id" = "$response.body#/loadId")))),
            ("AddFile" = (operation_id = "add_file", parameters(("load_id" = "$response.body#/loadId")))),
            ("CommitLoad" = (operation_id = "commit_load", parameters(("load_id" = "$response.body#/loadId")))),
        )),
        (status = 400, description = "A parameter missing or invalid", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 409, description = "The Idempotency-Key was used for another request, or its first request is still in progress", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn create_load(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<LoadWrite>,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let request = key.request(&caller, Operation::CreateLoad, &body);
    request
        .run(&state, create_once(state.clone(), caller, body))
        .await
}

/// POST /load's work, done once per Idempotency-Key.
async fn create_once(
    state: AppState,
    caller: LakeCaller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let request = load_body::load_request(&body.object()?)?;
    let record = state.loads.create(&caller, request).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(schemas::LoadAccepted {
            load_id: record.load.id,
        }),
    )
        .into_response())
}

/// GET /load/{load_id}: the load's status.
#[utoipa::path(
    get,
    path = "/v2/load/{load_id}",
    tag = "load",
    security(("bearer" = ["load:read"])),
    params(("load_id" = String, Path, description = "The loadId of POST /load")),
    responses(
        (status = 200, description = "LoadStatus; on FAIL also ErrorType, ErrorMessages and ErrorDetails. \
ErrorMessages items: with `pipeline.error_messages = \"spec\"` (the default) CheckSumError's items are objects \
{ErrorType, ErrorMessage, CheckResult: \"FAIL\"} and every other ErrorType's are strings; with \"strings\" (for the \
Comotion SDK, settable per org) every item is a string, a checksum item ending \"(CheckResult: FAIL)\". \
ErrorDetails (not in the spec; clients may ignore it) always holds each item as an object with the recap's \
ErrorType (CHECKSUM_MISMATCH, MISSING_COLUMN, ...), ErrorMessage and, on checksum items, CheckResult.", body = schemas::LoadResource),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown load, or another user's", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_load(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<LoadRead>,
    Path(load_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = state.loads.get(&caller, &load_id).await?;
    let shape = state.config.error_messages_of(&caller.org);
    Ok(Json(load_resource(&record, shape)?))
}

/// The upload descriptor (spec "Upload descriptor").
fn descriptor_body(descriptor: &UploadDescriptor) -> Value {
    let credentials = &descriptor.credentials;
    let expiration = chrono::DateTime::<chrono::Utc>::from_timestamp(credentials.expires_at, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({
        "presigned_url": {
            "url": descriptor.post_url,
            "fields": {
                "key": descriptor.object_key,
                "AWSAccessKeyId": credentials.access_key_id,
                "x-amz-security-token": credentials.session_token,
                "Policy": descriptor.policy,
                "Signature": descriptor.signature,
            },
        },
        "sts_credentials": {
            "AccessKeyId": credentials.access_key_id,
            "SecretAccessKey": credentials.secret_access_key,
            "SessionToken": credentials.session_token,
            "Expiration": expiration,
        },
        "path": descriptor.object_key,
        "bucket": descriptor.bucket,
    })
}

/// POST /load/{load_id}/file: an upload descriptor for one file. The body is
/// optional: {"file_key": "..."} names the file (the same name again
/// overwrites it).
#[utoipa::path(
    post,
    path = "/v2/load/{load_id}/file",
    tag = "load",
    security(("bearer" = ["load:write"])),
    params(("load_id" = String, Path, description = "The loadId of POST /load")),
    request_body(content = Option<schemas::FileRequest>, description = "Optional; without a body the file gets a fresh name"),
    responses(
        (status = 200, description = "The upload descriptor", body = schemas::UploadDescriptor),
        (status = 400, description = "A bad file_key, or the load no longer takes files", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown load, or another user's", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn add_file(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<LoadWrite>,
    Path(load_id): Path<String>,
    body: JsonBody,
) -> Result<Json<Value>, ApiError> {
    let body = match body.0 {
        None | Some(Value::Null) => None,
        Some(_) => Some(body.object()?),
    };
    let file_key = load_body::file_key(body)?;
    let descriptor = state
        .loads
        .add_file(&caller, &load_id, file_key.as_deref())
        .await?;
    Ok(Json(descriptor_body(&descriptor)))
}

/// POST /load/{load_id}/commit: `{"check_sum": {"<aggregate>": <expected>}}`;
/// 202, and the load turns PROCESSING while its pipeline runs.
#[utoipa::path(
    post,
    path = "/v2/load/{load_id}/commit",
    tag = "load",
    security(("bearer" = ["load:write"])),
    params(("load_id" = String, Path, description = "The loadId of POST /load"), IdempotencyKey),
    request_body(content = schemas::CommitRequest),
    responses(
        (status = 202, description = "Commit initiated", body = schemas::MessageBody),
        (status = 400, description = "check_sum missing, empty or malformed; load already committed", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown load, or another user's", body = schemas::ErrorBody),
        (status = 409, description = "The Idempotency-Key was used for another request, or its first request is still in progress", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn commit_load(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<LoadWrite>,
    Path(load_id): Path<String>,
    key: IdempotencyKey,
    body: Bytes,
) -> Result<Response, ApiError> {
    let operation = Operation::CommitLoad {
        load_id: load_id.clone(),
    };
    let request = key.request(&caller, operation, &body[..]);
    request
        .run(&state, commit_once(state.clone(), caller, load_id, body))
        .await
}

/// POST /load/{load_id}/commit's work, done once per Idempotency-Key.
async fn commit_once(
    state: AppState,
    caller: LakeCaller,
    load_id: String,
    body: Bytes,
) -> Result<Response, ApiError> {
    // An unknown load is 404 whatever the body.
    state.loads.get(&caller, &load_id).await?;
    let body = JsonBody::parse(&body)?;
    let check_sum = load_body::check_sums(body.0.as_ref())?;
    state.loads.commit(&caller, &load_id, &check_sum).await?;
    state.commits.wake();
    Ok((
        StatusCode::ACCEPTED,
        Json(schemas::MessageBody {
            message: "Load commit initiated.".into(),
        }),
    )
        .into_response())
}
