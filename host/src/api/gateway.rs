//! What the spec's gateway does before a request reaches a handler: request ids
//! (in logs, in the `x-request-id` response header and in generic 500 messages
//! as the "request code"), the body-size limit (413), the gateway timeout (504),
//! and JSON bodies for unknown paths and methods.

use std::time::{Duration, Instant};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;
use tracing::Instrument as _;

use super::error::{ApiError, INTERNAL_MESSAGE, InternalErrorSource};

/// The id of one request, as logged and returned.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Gives each request a fresh id (a caller-sent one is not trusted into logs),
/// runs it in a span, logs its outcome once, and adds the request code to
/// generic 500 messages.
pub async fn request_context(mut request: Request, next: Next) -> Response {
    let id = uuid::Uuid::new_v4().simple().to_string();
    request.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let _entered = span.enter();
    if let Some(source) = response.extensions_mut().remove::<InternalErrorSource>() {
        tracing::error!(error = %source.0, "internal error");
        let body = json!({ "message": format!("{INTERNAL_MESSAGE} Request code: {id}") });
        *response.body_mut() = Body::from(body.to_string());
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    tracing::info!(
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request finished"
    );
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// 413 for a declared body above the limit, before anything reads it. Bodies
/// without a length are capped by `DefaultBodyLimit` where they are read.
pub async fn limit_body(State(max): State<u64>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max) {
        return ApiError::PayloadTooLarge.into_response();
    }
    next.run(request).await
}

/// 504 when the request runs longer than the gateway timeout; the work is dropped.
pub async fn timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}

/// Turns the framework's plain-text 413 (a chunked body over the limit) into the
/// JSON shape.
pub async fn json_rejections(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE && !is_json {
        return ApiError::PayloadTooLarge.into_response();
    }
    response
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::to_bytes, middleware::from_fn, routing::get};
    use tower::ServiceExt as _;

    use super::*;

    #[tokio::test]
    async fn internal_errors_carry_the_request_code() {
        let app = Router::new()
            .route(
                "/boom",
                get(|| async { ApiError::Internal("disk on fire".into()) }),
            )
            .layer(from_fn(request_context));
        let response = app
            .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 500);
        let id = response.headers()[REQUEST_ID_HEADER]
            .to_str()
            .unwrap()
            .to_string();
        let body = to_bytes(response.into_body(), 1024).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({ "message": format!("{INTERNAL_MESSAGE} Request code: {id}") })
        );
        assert!(
            !body.to_string().contains("disk on fire"),
            "the cause stays in the log"
        );
    }
}
