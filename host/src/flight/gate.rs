//! The door of every Flight call, before tonic routes it: a call carries a
//! bearer token valid for the org (and zone) it names, whose claims make a
//! caller (`auth::authenticate`), or it is refused (`UNAUTHENTICATED`; an
//! identity provider out of reach `UNAVAILABLE`) and its connection is
//! closed. Only `Handshake` passes
//! without one: it is where a client id and secret become a token
//! (`handshake.rs`), and one that fails closes its connection the same way.
//! So a client without credentials cannot hold a connection under the
//! listener's cap by calling what needs no scope (`ListActions`,
//! `ListFlights`, `GetSchema`, any path tonic would answer `UNIMPLEMENTED`).
//!
//! An authenticated call counts its connection against its org's share of
//! the listener (`listener::ConnectionOrg`): past the share the call is
//! refused `RESOURCE_EXHAUSTED` and the connection closed; a call whose
//! token is of another org than the connection's first is refused
//! `PERMISSION_DENIED` and the connection closed too (it must not move
//! between shares; a client of two orgs opens one connection per org).
//!
//! The scope a call needs (`query:read`, `query:write`) stays the service's
//! to check (`caller::caller_of`). Every answer that ends a call at once
//! leaves here with its message bounded (`status::bound_message`).

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use http::{Extensions, HeaderMap};
use tonic::Status;

use super::{FlightState, caller, status};
use crate::listener::{CloseConnection, ConnectionOrg, ShareRefused};

/// The gRPC path of `Handshake`.
pub const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// Layered on the Flight router (`flight::router`), inside `calls.rs`'s
/// layer so that refusals are logged and counted like any call.
pub async fn admit(State(state): State<FlightState>, request: Request, next: Next) -> Response {
    let handshake = request.uri().path() == HANDSHAKE_PATH;
    let refused = if handshake {
        None
    } else {
        authenticated(&state, request.headers(), request.extensions())
            .await
            .err()
    };
    let refused_call = refused.is_some();
    let mut response = match refused {
        Some(status) => status.into_http(),
        None => next.run(request).await,
    };
    status::bound_message(response.headers_mut());
    // A handshake that did not succeed ends at once, its status in the
    // headers (a trailers-only answer); one that succeeded sends its token
    // first.
    let failed_handshake = handshake && ended_with_error(&response);
    if refused_call || failed_handshake {
        response.extensions_mut().insert(CloseConnection);
    }
    response
}

/// Whether `response` ended its call at once with an error status.
fn ended_with_error(response: &Response) -> bool {
    response
        .headers()
        .get(Status::GRPC_STATUS)
        .is_some_and(|code| code.as_bytes() != b"0")
}

/// The call's token (or session token, `sessions.rs`) authenticated for
/// the org it names (any scope), and
/// its connection counted against that org's share (`headers` and
/// `extensions` are the call's: its body is not `Sync`, so the request is
/// not held here).
async fn authenticated(
    state: &FlightState,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<(), Status> {
    let (org, zone) = caller::target_of(state, headers)?;
    caller::call_authenticated(state, headers, (&org, zone.as_deref()), None).await?;
    bind(extensions, &org)
}

/// Counts the connection of a call authenticated for `org` against the
/// org's share (a connection the listener did not give a `ConnectionOrg`,
/// as in unit tests, is not counted).
pub fn bind(extensions: &Extensions, org: &str) -> Result<(), Status> {
    let Some(connection) = extensions.get::<ConnectionOrg>() else {
        return Ok(());
    };
    connection.bind(org).map_err(|refused| match refused {
        ShareRefused::Full { share, .. } => {
            tracing::debug!(
                org,
                share,
                "flight connection refused: the org's share is full"
            );
            Status::resource_exhausted(format!(
                "org {org:?} already holds its {share} connections to this Flight SQL \
                 listener: close one, or reuse it"
            ))
        }
        ShareRefused::OtherOrg => Status::permission_denied(
            "this connection serves another org: open a connection of its own for each org",
        ),
    })
}
