//! Answers too long for a key to keep (issue 45): a `Prefer: wait` answer
//! with a large first page, streamed from the result. The key keeps a mark
//! instead (`ReplayFromResult`: the query's id and the page's shape, beside
//! the first answer's status and headers), and a replay renders the answer
//! again from the query. It must never keep such a body in the store.

use axum::{
    body::Body,
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::Response,
};
use serde_json::Value;

use super::IDEMPOTENT_REPLAYED;
use crate::{
    api::{AppState, error::ApiError, result_page::PageShape},
    auth::LakeCaller,
    store::idempotency::StoredAnswer,
};

/// The longest answer a key keeps as it was sent; a longer one must be
/// marked `ReplayFromResult`.
pub const MAX_KEPT_ANSWER_BYTES: usize = 64 * 1024;
/// The stored header that says a kept answer is a `ReplayFromResult` mark.
/// Only `idempotency` writes kept answers, and a replay never sends it.
pub(super) const REPLAY_FROM_RESULT: &str = "lakehost-replay-from-result";

/// On a first answer too long to keep (a `Prefer: wait` answer with a large
/// page): the key keeps this instead of the body, and a replay renders the
/// answer again from the query (`query::ended_answer_again`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFromResult {
    pub query_id: String,
    pub shape: PageShape,
}

impl ReplayFromResult {
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        serde_json::json!({ "queryId": self.query_id, "shape": self.shape.name() })
            .to_string()
            .into_bytes()
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mark: Value = serde_json::from_slice(bytes).ok()?;
        Some(Self {
            query_id: mark.get("queryId")?.as_str()?.to_string(),
            shape: PageShape::named(mark.get("shape")?.as_str()?)?,
        })
    }
}

/// The first answer again, marked as a replay: as it was kept, or, for a
/// `ReplayFromResult` mark, rendered again from the query with the kept
/// headers (its own `Content-Type` and `Content-Length`).
pub(super) async fn replay(
    state: &AppState,
    caller: &LakeCaller,
    answer: StoredAnswer,
) -> Result<Response, ApiError> {
    let marked = answer
        .headers
        .iter()
        .any(|(name, _)| name == REPLAY_FROM_RESULT);
    let mut response = if marked {
        let mark = ReplayFromResult::from_bytes(&answer.body)
            .ok_or_else(|| ApiError::broken("stored idempotent answer: a bad mark"))?;
        crate::api::query::ended_answer_again(state, caller, &mark.query_id, mark.shape).await
    } else {
        let mut response = Response::new(Body::from(answer.body));
        *response.status_mut() = StatusCode::from_u16(answer.status)
            .map_err(|e| ApiError::failed("stored idempotent answer: status", e))?;
        response
    };
    for (name, value) in &answer.headers {
        if marked && (name == REPLAY_FROM_RESULT || name == header::CONTENT_TYPE.as_str()) {
            continue;
        }
        let name = HeaderName::try_from(name.as_str())
            .map_err(|e| ApiError::failed("stored idempotent answer: header name", e))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|e| ApiError::failed("stored idempotent answer: header value", e))?;
        response.headers_mut().append(name, value);
    }
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_nothing_else_reads_as_one() {
        for shape in [PageShape::Spec, PageShape::Native] {
            let mark = ReplayFromResult {
                query_id: "q-1".into(),
                shape,
            };
            assert_eq!(ReplayFromResult::from_bytes(&mark.to_bytes()), Some(mark));
        }
        for other in [
            br#"{"queryId":"q-1"}"#.as_slice(),
            br#"{"queryId":"q-1","shape":"csv"}"#,
            br#"{"resultSet":{}}"#,
            b"not json",
        ] {
            assert_eq!(ReplayFromResult::from_bytes(other), None);
        }
    }
}
