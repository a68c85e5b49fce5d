//! The answer of `POST /query` with `Prefer: wait=N` when the query ended
//! in time (the Query resource with its first page), and that answer
//! rendered again for an Idempotency-Key that did not keep it whole
//! (`idempotency::ReplayFromResult`). It never builds a large page in
//! memory: pages come from `result_page::read_page`.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::Value;

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

/// The 200 of a query that ended while its POST waited: the Query resource
/// and, when it SUCCEEDED, its first result page (`resultSet`, `nextToken`)
/// beside it, as `GET /query/{id}/result` would answer (streamed when
/// large; an error when above `query.max_page_bytes`, which the POST turns
/// into its 202). An answer longer than an Idempotency-Key keeps
/// (`MAX_KEPT_ANSWER_BYTES`) is marked `ReplayFromResult`: the key keeps
/// the mark, and a replay renders the answer again (`ended_answer_again`).
pub(super) async fn ended_answer(
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
        let bytes = serde_json::to_vec(&resource)
            .map_err(|e| ApiError::Internal(format!("query resource: {e}")))?;
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
