//! What the spec's gateway does before a request reaches a handler: request ids
//! (in logs, in the `x-request-id` response header and in generic 500 messages
//! as the "request code"), the one log line and the metrics of each request,
//! the body-size limit (413), the gateway timeout (504), JSON bodies for
//! unknown paths and methods, and the generic 500 for a handler that panics
//! (the connection stays up).

use std::{
    any::Any,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::{MatchedPath, Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;
use tracing::Instrument as _;

use super::error::{ApiError, GenericInternalError};
use crate::edge::{
    INTERNAL_MESSAGE,
    request_id::{REQUEST_ID_HEADER, request_id},
};
use crate::observability::{
    labels::{ApiLabel, UNMATCHED_ROUTE},
    metrics,
};

/// The id of one request, as logged and returned.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Which API and route template answered a request: set on the response by
/// `tag_route` inside the API routers, read by `request_context` outside
/// them (the template is only known after routing).
#[derive(Debug, Clone)]
struct RouteLabels {
    api: ApiLabel,
    route: String,
}

/// Layered on each API router (`api::app`): records the route template
/// (`MatchedPath`, `unmatched` for the fallback) and the API that answered.
pub async fn tag_route(State(api): State<ApiLabel>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED_ROUTE.to_string(), |p| p.as_str().to_string());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(RouteLabels {
        api: api.refine(&route),
        route,
    });
    response
}

/// Gives each request its id, runs it in a span, logs its outcome once
/// (method, route template, status, latency), counts it, and adds the
/// request code to generic 500 messages (whose causes `ApiError` logged,
/// inside this span).
pub async fn request_context(mut request: Request, next: Next) -> Response {
    let id = request_id(&request);
    request.extensions_mut().insert(RequestId(id.clone()));
    let method = request.method().clone();
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %method,
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let _entered = span.enter();
    if response
        .extensions_mut()
        .remove::<GenericInternalError>()
        .is_some()
    {
        let body = json!({ "message": format!("{INTERNAL_MESSAGE} Request code: {id}") });
        *response.body_mut() = Body::from(body.to_string());
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    let RouteLabels { api, route } = response
        .extensions_mut()
        .remove::<RouteLabels>()
        .unwrap_or_else(|| RouteLabels {
            api: ApiLabel::None,
            route: UNMATCHED_ROUTE.to_string(),
        });
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    tracing::info!(
        api = api.as_str(),
        route = %route,
        status,
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        "request finished"
    );
    metrics::http_request(api, method.as_str(), &route, status, elapsed);
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// 413 for a declared body above the limit, before anything reads it. Bodies
/// without a length are capped by `DefaultBodyLimit` where they are read.
pub async fn limit_body(State(caps): State<BodyCaps>, request: Request, next: Next) -> Response {
    let max = if request.method() == axum::http::Method::PUT
        && request.uri().path().starts_with(COMPONENT_PATH)
    {
        caps.component
    } else {
        caps.body
    };
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

/// The largest bodies: `server.max_body_bytes` for every request but a
/// component's upload (`PUT /v2/pipeline/components/...`), which has
/// `pipeline.max_component_bytes` (and reads its body within it itself).
#[derive(Debug, Clone, Copy)]
pub struct BodyCaps {
    pub body: u64,
    pub component: u64,
}

/// Where components are uploaded.
const COMPONENT_PATH: &str = "/v2/pipeline/components/";

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

/// A handler that panicked: what it said, when it said it in words.
#[derive(Debug, thiserror::Error)]
#[error("the request's handler panicked: {0}")]
pub struct Panicked(String);

impl Panicked {
    fn of(payload: &(dyn Any + Send)) -> Self {
        let said = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Panicked(said)
    }
}

/// The generic 500 (logged once, as any other) for a request whose
/// handler panicked.
fn panicked(payload: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::unexpected(Panicked::of(payload.as_ref())).into_response()
}

/// Answers a request whose handler panics with the generic 500 instead of
/// dropping its connection. Layered inside [`request_context`], so the
/// answer has its request code and the log line its request id.
pub fn catch_panics() -> CatchPanicLayer<fn(Box<dyn Any + Send + 'static>) -> Response> {
    CatchPanicLayer::custom(panicked as fn(Box<dyn Any + Send + 'static>) -> Response)
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

    /// The body of `app`'s answer to GET /boom, layered as `api::app`
    /// layers the gateway, checked to be the generic 500 with its request
    /// code.
    async fn generic_500(app: Router) -> serde_json::Value {
        let app = app.layer(catch_panics()).layer(from_fn(request_context));
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
        body
    }

    #[tokio::test]
    async fn internal_errors_carry_the_request_code() {
        let told = Router::new().route(
            "/boom",
            get(|| async { ApiError::failed("disk", std::io::Error::other("disk on fire")) }),
        );
        let body = generic_500(told).await;
        assert!(
            !body.to_string().contains("disk on fire"),
            "the cause stays in the log"
        );
        let caused = Router::new().route(
            "/boom",
            get(|| async { ApiError::unexpected(std::io::Error::other("disk on fire")) }),
        );
        let body = generic_500(caused).await;
        assert!(!body.to_string().contains("disk on fire"));
    }

    #[tokio::test]
    async fn a_handler_that_panics_answers_the_generic_500() {
        async fn boom() -> &'static str {
            panic!("disk on fire")
        }
        let body = generic_500(Router::new().route("/boom", get(boom))).await;
        assert!(!body.to_string().contains("disk on fire"));
    }
}
