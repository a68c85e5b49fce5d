//! What every Flight SQL call gets before the service sees it, as REST
//! requests get it from the gateway: a request id (the caller's
//! `x-request-id` when it is a short token, else a fresh one; echoed in the
//! answer's metadata), a span carrying it, one log line and one count per
//! call (`lakehost_flight_calls_total`). The outcome is the gRPC status of a
//! call that ended at once; a call that answered, or began streaming, is `ok`.

use std::time::Instant;

use axum::{
    extract::Request,
    http::{HeaderMap, HeaderValue},
    middleware::Next,
    response::Response,
};
use tracing::Instrument as _;

use crate::{
    edge::request_id::{REQUEST_ID_HEADER, request_id},
    observability::metrics,
};

/// The Flight RPCs, as their gRPC paths end.
const CALLS: &[&str] = &[
    "Handshake",
    "ListFlights",
    "GetFlightInfo",
    "PollFlightInfo",
    "GetSchema",
    "DoGet",
    "DoPut",
    "DoExchange",
    "DoAction",
    "ListActions",
];

/// The RPC a gRPC path names, from the closed list (`unknown` otherwise).
fn call_of(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or_default();
    CALLS
        .iter()
        .find(|call| **call == name)
        .copied()
        .unwrap_or("unknown")
}

/// The gRPC status of an answer that ended the call at once, by name.
fn outcome_of(headers: &HeaderMap) -> &'static str {
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0);
    match code {
        0 => "ok",
        1 => "cancelled",
        3 => "invalid_argument",
        4 => "deadline_exceeded",
        5 => "not_found",
        6 => "already_exists",
        7 => "permission_denied",
        8 => "resource_exhausted",
        9 => "failed_precondition",
        10 => "aborted",
        12 => "unimplemented",
        13 => "internal",
        14 => "unavailable",
        16 => "unauthenticated",
        _ => "other",
    }
}

/// Layered on the Flight router (`flight::router`).
pub async fn call_context(request: Request, next: Next) -> Response {
    let id = request_id(&request);
    let call = call_of(request.uri().path());
    let span = tracing::info_span!("flight_call", request_id = %id, call);
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let _entered = span.enter();
    let outcome = outcome_of(response.headers());
    tracing::info!(
        outcome,
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        "flight call answered"
    );
    metrics::flight_call(call, outcome);
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_outcomes_come_from_closed_sets() {
        assert_eq!(
            call_of("/arrow.flight.protocol.FlightService/DoGet"),
            "DoGet"
        );
        assert_eq!(
            call_of("/arrow.flight.protocol.FlightService/Evil{}"),
            "unknown"
        );
        assert_eq!(call_of(""), "unknown");
        let mut headers = HeaderMap::new();
        assert_eq!(outcome_of(&headers), "ok");
        headers.insert("grpc-status", HeaderValue::from_static("7"));
        assert_eq!(outcome_of(&headers), "permission_denied");
        headers.insert("grpc-status", HeaderValue::from_static("99"));
        assert_eq!(outcome_of(&headers), "other");
    }
}
