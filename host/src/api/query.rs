//! The query endpoints (spec "POST /query", "GET /query/{query_id}",
//! "DELETE /query/{query_id}", "GET /query/{query_id}/result",
//! "GET /query/{query_id}/csv") on the Org and Zone APIs, and the signed CSV
//! link they hand out. Thin: extract, call `QueryService`, shape the body.

use axum::{
    Json,
    extract::{Path, Query, RawQuery, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    error::{ApiError, QueryOperation},
    idempotency::{IdempotencyKey, Operation},
    json_body::JsonBody,
    prefer::{PREFERENCE_APPLIED, Preferences},
    principal::{Caller, LakeCallerOf, QueryRead, QueryWrite},
    result_download::{self, ResultAnswer},
    result_page::{PageShape, read_page},
    schemas,
};
use crate::{
    auth::LakeCaller,
    lake::ResultFormat,
    query::service::WaitLimit,
    store::queries::{Delivery, QueryJob, QueryState},
};

mod wait_answer;

pub(super) use wait_answer::ended_answer_again;
use wait_answer::{accepted, ended_answer_in_time};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(submit_query))
        .routes(routes!(get_query, cancel_query))
        .routes(routes!(get_result))
        .routes(routes!(get_csv))
}

/// The spec's date format: `MM-DD-YYYY HH:MM:SS`, UTC.
fn spec_time(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .format("%m-%d-%Y %H:%M:%S")
        .to_string()
}

/// The Query resource (spec "Resources: Query").
fn query_resource(job: &QueryJob) -> Value {
    let mut status = Map::new();
    status.insert("state".into(), json!(job.state.as_str()));
    status.insert(
        "submissionDateTime".into(),
        json!(spec_time(job.submitted_at)),
    );
    if let Some(completed) = job.completed_at.filter(|_| job.state.is_final()) {
        status.insert("completionDateTime".into(), json!(spec_time(completed)));
    }
    if job.state == QueryState::Failed
        && let Some(reason) = &job.state_change_reason
    {
        status.insert("stateChangeReason".into(), json!(reason));
    }
    let mut resource = json!({
        "query": job.query.sql,
        "queryId": job.query.id,
        "statementType": job.query.statement_type,
        "status": status,
    });
    // Only on queries answered by result reuse, which the caller opted into.
    if let Some(reused) = &job.reused_query_id {
        resource["reusedQueryId"] = json!(reused);
    }
    // Only on reads that ran on workers (`[distributed]`, off by default).
    if let Some(workers) = job.workers {
        resource["workers"] = json!(workers);
    }
    // Only on queries whose rows went to a wire client as they ran.
    if job.delivery != Delivery::Stored {
        resource["via"] = json!(job.delivery.as_str());
    }
    resource
}

/// POST /query: body `{"query": "...", "database": "..."}` (database optional).
#[utoipa::path(
    post,
    path = "/v2/query",
    tag = "query",
    security(("bearer" = ["query:write"])),
    params(("Prefer" = Option<String>, Header, description = "Opt-in (RFC 7240): `wait=N` (0-25) holds the request up to N seconds for the query to end; `reuse=N` (0-86400) answers with the result of the same query over unchanged data, run by a caller with the same access at most N seconds ago; `result-format=arrow` (or `parquet`) writes the result as an Arrow IPC stream (or Parquet file) while the query runs (that format's fastest download) and its CSV, pages and CSV link when first asked for (`csv`, the default, the other way round). Honoured ones are named in `Preference-Applied`."), IdempotencyKey),
    request_body(content = schemas::QueryRequest, description = "The statement, and optionally the database its unqualified names resolve in"),
    responses(
        (status = 200, description = "With `Prefer: wait=N` only: the query ended within the wait. The Query resource in its final state and, when it SUCCEEDED, its first result page", body = schemas::QueryEnded),
        (status = 202, description = "Accepted", body = schemas::QueryAccepted, links(
            ("GetQuery" = (operation_id = "get_query", parameters(("query_id" = "$response.body#/queryId")))),
            ("GetQueryResult" = (operation_id = "get_result", parameters(("query_id" = "$response.body#/queryId")))),
            ("GetQueryCsv" = (operation_id = "get_csv", parameters(("query_id" = "$response.body#/queryId")))),
            ("CancelQuery" = (operation_id = "cancel_query", parameters(("query_id" = "$response.body#/queryId")))),
        )),
        (status = 400, description = "JSON not well formed, parameter missing, or SQL rejected", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope or a permissions problem", body = schemas::ErrorBody),
        (status = 409, description = "CREATE TABLE AS target already holds data; or the Idempotency-Key was used for another request, or its first request is still in progress", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn submit_query(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<QueryWrite>,
    headers: HeaderMap,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let received = tokio::time::Instant::now();
    let request = key.request(&caller, Operation::SubmitQuery, &body);
    request
        .run(
            &state,
            submit_once(state.clone(), caller, headers, body, received),
        )
        .await
}

/// POST /query's work, done once per Idempotency-Key: the request read,
/// the query submitted (and waited for, `Prefer: wait`) by
/// `QueryService::submit_and_wait`, and the answer: the 202 with its id, or
/// the 200 of a query that ended in time.
async fn submit_once(
    state: AppState,
    caller: LakeCaller,
    headers: HeaderMap,
    body: JsonBody,
    received: tokio::time::Instant,
) -> Result<Response, ApiError> {
    let preferences = Preferences::from_headers(&headers)?;
    // The page a wait may answer with comes in the shape `Accept` asks for
    // (checked before anything runs); without a wait, `Accept` is not read.
    let shape = match preferences.wait {
        Some(_) => PageShape::from_headers(&headers)?,
        None => PageShape::Spec,
    };
    let body = body.object()?;
    let (sql, database) = (statement_of(&body)?, database_of(&body)?);
    let wait = preferences.wait.map(|wanted| WaitLimit {
        wanted,
        answer_by: received + wait_limit(&state),
    });
    let submitted = state
        .queries
        .submit_and_wait(&caller, sql, database, preferences.submit(), wait)
        .await
        .map_err(|e| ApiError::query(e, QueryOperation::Start))?;
    let mut response = match submitted.ended {
        Some(job) => ended_answer_in_time(&state, &caller, &job, shape, received).await,
        None => accepted(submitted.id),
    };
    if let Some(applied) = preferences.applied(submitted.result_first) {
        response.headers_mut().insert(PREFERENCE_APPLIED, applied);
    }
    Ok(response)
}

/// The body's `query`: a string that is not blank.
fn statement_of(body: &Map<String, Value>) -> Result<&str, ApiError> {
    match body.get("query") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.trim().is_empty() => None,
        Some(Value::String(text)) => Some(text.as_str()),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "InvalidParameterError: \"query\" must be a string.".into(),
            ));
        }
    }
    .ok_or_else(|| {
        ApiError::BadRequest(
            "MissingParameterError: \"query\" parameter missing from request.".into(),
        )
    })
}

/// The body's `database`, when it names one.
fn database_of(body: &Map<String, Value>) -> Result<Option<&str>, ApiError> {
    match body.get("database") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some(name.as_str())),
        Some(_) => Err(ApiError::BadRequest(
            "InvalidParameterError: \"database\" must be a string.".into(),
        )),
    }
}

/// How long after it arrived a POST may still wait for its query: the
/// gateway's request timeout less `WAIT_ANSWER_MARGIN`, so the answer (the
/// 202 with the id, at worst) leaves before it. A client never loses its
/// queryId to a 504.
fn wait_limit(state: &AppState) -> Duration {
    Duration::from_secs(state.config.server.request_timeout_s).saturating_sub(WAIT_ANSWER_MARGIN)
}

/// Time kept, from a wait, for reading the first page and answering.
const WAIT_ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// GET /query/{query_id}: the Query resource.
#[utoipa::path(
    get,
    path = "/v2/query/{query_id}",
    tag = "query",
    security(("bearer" = ["query:read"])),
    params(("query_id" = String, Path, description = "The queryId of POST /query")),
    responses(
        (status = 200, description = "The Query resource", body = schemas::QueryResource),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown query", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_query(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<QueryRead>,
    Path(query_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = state
        .queries
        .get(&caller, &query_id)
        .await
        .map_err(|e| ApiError::query(e, QueryOperation::Get))?;
    Ok(Json(query_resource(&job)))
}

/// DELETE /query/{query_id}: cancels a query that has not finished; a
/// finished one is left as it is (still 200).
#[utoipa::path(
    delete,
    path = "/v2/query/{query_id}",
    tag = "query",
    security(("bearer" = ["query:write"])),
    params(("query_id" = String, Path, description = "The queryId of POST /query")),
    responses(
        (status = 200, description = "Cancelled (empty body). The query is not deleted: GET still answers it, CANCELLED (or as it ended, when it had ended before)"),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope", body = schemas::ErrorBody),
        (status = 404, description = "Unknown query", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn cancel_query(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<QueryWrite>,
    Path(query_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    // Cancelling a query that has already ended is a success too (the spec).
    state
        .queries
        .cancel(&caller, &query_id)
        .await
        .map_err(|e| ApiError::query(e, QueryOperation::Stop))?;
    Ok(StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct PageParams {
    #[serde(alias = "nextToken")]
    next_token: Option<String>,
}

/// GET /query/{query_id}/result: the first 1,000 rows; `next_token` (the
/// previous page's `nextToken`) selects a later page. `Accept` chooses the
/// page's shape (`application/json; types=native`: typed values) or the whole
/// result instead (text/csv, Arrow IPC stream, Parquet: `result_download.rs`).
/// A page is streamed when large and refused (409) above
/// `query.max_page_bytes` (`result_page.rs`).
#[utoipa::path(
    get,
    path = "/v2/query/{query_id}/result",
    tag = "query",
    security(("bearer" = ["query:read"])),
    params(
        ("query_id" = String, Path, description = "The queryId of POST /query"),
        ("next_token" = Option<String>, Query, description = "nextToken of the previous page (JSON pages only)"),
    ),
    responses(
        (status = 200, description = "A result page (the default: no Accept header, `*/*` or `application/json`). With `Accept: application/json; types=native` the same page with each cell a bare value typed by its column (integers and floats as JSON numbers, booleans, NULL as null; decimals and other types as strings; NaN and infinities as the strings NaN, Infinity, -Infinity). With `Accept: text/csv`, `application/vnd.apache.arrow.stream` or `application/vnd.apache.parquet`, the whole result in that format (Arrow and Parquet with the engine's column types), with Content-Length and Accept-Ranges", content(
            (schemas::ResultPage = "application/json"),
            (schemas::NativeResultPage = "application/json; types=native"),
            (schemas::BinaryBody = "text/csv; charset=utf-8"),
            (schemas::BinaryBody = "application/vnd.apache.arrow.stream"),
            (schemas::BinaryBody = "application/vnd.apache.parquet"),
        )),
        (status = 206, description = "One byte range of a whole-result download (`Range: bytes=...`)", content(
            (schemas::BinaryBody = "text/csv; charset=utf-8"),
            (schemas::BinaryBody = "application/vnd.apache.arrow.stream"),
            (schemas::BinaryBody = "application/vnd.apache.parquet"),
        )),
        (status = 400, description = "Query not SUCCEEDED, a next_token not issued for it, or a next_token with a whole-result download", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope, or the caller's access changed since submission", body = schemas::ErrorBody),
        (status = 404, description = "Unknown query", body = schemas::ErrorBody),
        (status = 406, description = "The Accept header names nothing this endpoint answers", body = schemas::ErrorBody),
        (status = 409, description = "Arrow or Parquet asked of a result kept without its typed copy (it ran before typed results were kept, or with `query.typed_results` off); or a JSON page longer than `query.max_page_bytes` (64 MiB by default): get that result as CSV or Arrow instead", body = schemas::ErrorBody),
        (status = 416, description = "A Range outside the whole result", body = schemas::ErrorBody),
        (status = 500, description = "Unexpected error", body = schemas::ErrorBody),
    )
)]
async fn get_result(
    State(state): State<AppState>,
    LakeCallerOf(caller, _): LakeCallerOf<QueryRead>,
    Path(query_id): Path<String>,
    Query(params): Query<PageParams>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let failed = |e| ApiError::query(e, QueryOperation::Results);
    let shape = match result_download::negotiate(&headers)? {
        ResultAnswer::Page(shape) => shape,
        ResultAnswer::Whole(format) => {
            if params.next_token.is_some() {
                return Err(ApiError::BadRequest(
                    "InvalidParameterError: \"next_token\" selects a JSON page; the whole \
                     result has no pages."
                        .into(),
                ));
            }
            let file = state
                .queries
                .result_file(&caller, &query_id, format)
                .await
                .map_err(failed)?;
            return result_download::whole_result(&file, &method, &headers).await;
        }
    };
    let source = state
        .queries
        .page_source(&caller, &query_id, params.next_token.as_deref())
        .await
        .map_err(failed)?;
    let page = read_page(
        &state.queries,
        source,
        shape,
        state.config.query.max_page_bytes,
    )
    .await?;
    let envelope = Value::Object(page.fields());
    let mut response = page
        .into_body(&envelope)?
        .into_response(shape.content_type());
    let response_headers = response.headers_mut();
    response_headers.insert(header::VARY, HeaderValue::from_static("accept"));
    Ok(response)
}

/// GET /query/{query_id}/csv: 302 to a signed link to the whole result.
/// Without `format`, the spec's endpoint: a CSV link, and every failure is
/// 500 {"message": "Internal Server Error"}. With `format=csv|arrow|parquet`
/// (opt-in), a link to that format, and failures are the clear errors of
/// `GET /query/{query_id}/result`.
#[utoipa::path(
    get,
    path = "/v2/query/{query_id}/csv",
    tag = "query",
    security(("bearer" = ["query:read"])),
    params(
        ("query_id" = String, Path, description = "The queryId of POST /query"),
        ("format" = Option<schemas::LinkFormat>, Query, description = "Not in the spec (opt-in): the link's format. `arrow`: an Arrow IPC stream, `parquet`: a Parquet file (made on the first request, then kept), both with the engine's column types; `csv`: the spec's CSV. With it, errors are clear (400, 403, 404, 409) instead of the spec's 500"),
    ),
    responses(
        (status = 302, body = schemas::CsvLocation, headers(("Location" = String, description = "The link")), description = "Location (and body.location): an S3-style presigned GET of the result file on the storage endpoint (or on S3 when the lake is there), valid `query.csv_link_lifetime_s` (at most 15 minutes); it answers Range (206) and HEAD, with Content-Length"),
        (status = 400, description = "With `format`: an unknown format, or the query not SUCCEEDED", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "Missing scope; with `format`, also the caller's access changed since submission", body = schemas::ErrorBody),
        (status = 404, description = "With `format`: unknown query", body = schemas::ErrorBody),
        (status = 409, description = "With `format=arrow|parquet`: the result was kept without its typed copy", body = schemas::ErrorBody),
        (status = 500, description = "Any other problem (without `format`: every problem)", body = schemas::ErrorBody),
    )
)]
async fn get_csv(
    State(state): State<AppState>,
    caller: Result<Caller<QueryRead>, ApiError>,
    Path(query_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let format = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(name, _)| name == "format")
        .map(|(_, value)| value.into_owned());
    let Some(format) = format else {
        return spec_csv_link(&state, caller, &query_id).await;
    };
    let format = result_download::link_format(&format)?;
    let caller = caller?.lake_caller()?;
    let location = state
        .queries
        .result_link(&caller, &query_id, format)
        .await
        .map_err(|e| ApiError::query(e, QueryOperation::Results))?
        .to_string();
    found(location).map_err(ApiError::unexpected)
}

/// The spec's GET /query/{query_id}/csv: every failure is 500 {"message":
/// "Internal Server Error"}.
async fn spec_csv_link(
    state: &AppState,
    caller: Result<Caller<QueryRead>, ApiError>,
    query_id: &str,
) -> Result<Response, ApiError> {
    let caller = caller.map_err(|e| match e {
        ApiError::Unexpected(cause) => ApiError::CsvFailure(cause),
        other => other,
    })?;
    let caller = caller
        .lake_caller()
        .map_err(|e| ApiError::CsvFailure(Box::new(e)))?;
    let location = state
        .queries
        .result_link(&caller, query_id, ResultFormat::Csv)
        .await
        .map_err(|e| ApiError::CsvFailure(Box::new(e)))?
        .to_string();
    found(location).map_err(|e| ApiError::CsvFailure(Box::new(e)))
}

/// 302 to `location`, which the body repeats.
fn found(location: String) -> Result<Response, axum::http::header::InvalidHeaderValue> {
    let header_value = HeaderValue::from_str(&location)?;
    let mut response = (StatusCode::FOUND, Json(schemas::CsvLocation { location })).into_response();
    response
        .headers_mut()
        .insert(header::LOCATION, header_value);
    Ok(response)
}
