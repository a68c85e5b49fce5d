//! The answer of `POST /query` with `Prefer: wait=N` when the query ended
//! in time (the Query resource with its first page, read within what is
//! left of the gateway's request timeout, else the 202), and that answer
//! rendered again for an Idempotency-Key that did not keep it whole
//! (`idempotency::ReplayFromResult`). It never builds a large page in
//! memory: pages come from `result_page::read_page`.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

use super::query_resource;
use crate::{
    api::{
        AppState,
        error::{ApiError, QueryOperation},
        idempotency::{MAX_KEPT_ANSWER_BYTES, ReplayFromResult},
        result_page::{PageBody, PageShape, read_page},
        schemas,
    },
    auth::LakeCaller,
    store::queries::{QueryJob, QueryState},
};

/// The 202 of POST /query: the query's id.
pub(super) fn accepted(id: String) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(schemas::QueryAccepted { query_id: id }),
    )
        .into_response()
}

/// The answer of a POST that arrived at `received` and whose query ended
/// while it waited: `ended_answer`, or the 202 with its id when that fails
/// or reading the page (a wide one is measured first) would run into the
/// gateway's timeout (a 504 would lose the queryId).
pub(super) async fn ended_answer_in_time(
    state: &AppState,
    caller: &LakeCaller,
    job: &QueryJob,
    shape: PageShape,
    received: Instant,
) -> Response {
    let id = &job.query.id;
    match tokio::time::timeout(
        answer_budget(state, received),
        ended_answer(state, caller, job, shape),
    )
    .await
    {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::warn!(query = %id, error = %e, "waited for a query, answering 202");
            accepted(id.clone())
        }
        Err(_) => {
            tracing::warn!(query = %id, "reading the first page took too long, answering 202");
            accepted(id.clone())
        }
    }
}

/// How long a POST that arrived at `received` may spend reading the first
/// page of the query it waited for: up to the gateway's request timeout,
/// less `SEND_MARGIN` to answer the 202 instead.
fn answer_budget(state: &AppState, received: Instant) -> Duration {
    Duration::from_secs(state.config.server.request_timeout_s)
        .saturating_sub(SEND_MARGIN)
        .saturating_sub(received.elapsed())
}

/// Time kept, from reading a wait's page, for answering the 202 instead.
const SEND_MARGIN: Duration = Duration::from_millis(250);

/// The 200 of a query that ended while its POST waited: the Query resource
/// and, when it SUCCEEDED, its first result page (`resultSet`, `nextToken`)
/// beside it, as `GET /query/{id}/result` would answer (streamed when
/// large; an error when above `query.max_page_bytes`, which the POST turns
/// into its 202). An answer longer than an Idempotency-Key keeps
/// (`MAX_KEPT_ANSWER_BYTES`) is marked `ReplayFromResult`: the key keeps
/// the mark, and a replay renders the answer again (`ended_answer_again`).
async fn ended_answer(
    state: &AppState,
    caller: &LakeCaller,
    job: &QueryJob,
    shape: PageShape,
) -> Result<Response, ApiError> {
    let mut resource = query_resource(job);
    let body = if job.state == QueryState::Succeeded {
        let source = state
            .queries
            .page_source_of(caller, job, None)
            .await
            .map_err(|e| ApiError::query(e, QueryOperation::Results))?;
        let page = read_page(
            &state.queries,
            source,
            shape,
            state.config.query.max_page_bytes,
        )
        .await?;
        if let Value::Object(fields) = &mut resource {
            fields.extend(page.fields());
        }
        page.into_body(&resource)?
    } else {
        let bytes =
            serde_json::to_vec(&resource).map_err(|e| ApiError::failed("query resource", e))?;
        PageBody::whole(bytes)
    };
    let kept_whole = !body.is_streamed() && body.length() <= MAX_KEPT_ANSWER_BYTES as u64;
    let mut response = body.into_response(shape.content_type());
    if !kept_whole {
        response.extensions_mut().insert(ReplayFromResult {
            query_id: job.query.id.clone(),
            shape,
        });
    }
    Ok(response)
}

/// A replay of a wait answer its Idempotency-Key did not keep whole
/// (`ReplayFromResult`): the answer rendered again from the query, the same
/// bytes while its result is kept; the 202 with its id when the result can
/// no longer be read (the query ran once either way, and its id is what the
/// caller needs).
pub(in crate::api) async fn ended_answer_again(
    state: &AppState,
    caller: &LakeCaller,
    query_id: &str,
    shape: PageShape,
) -> Response {
    let again = async {
        let job = state
            .queries
            .get(caller, query_id)
            .await
            .map_err(|e| ApiError::query(e, QueryOperation::Get))?;
        ended_answer(state, caller, &job, shape).await
    };
    match again.await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(query = %query_id, error = %e, "replaying a wait answer as its 202");
            accepted(query_id.to_string())
        }
    }
}
