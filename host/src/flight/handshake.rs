//! `Handshake`: a client that has a client id and secret rather than a
//! token (ADBC's `username` and `password`) sends them as
//! `authorization: Basic base64(id:secret)`; they are exchanged through the
//! org realm's client-credentials flow, and the token comes back in the
//! response's `authorization: Bearer` metadata (and as the payload), which
//! the client then sends on every call; where the listener keeps sessions
//! (`sessions.rs`) that is a lakehost session token instead, which the
//! server maps to the realm token and renews with the secret once it
//! expired, so the session outlives it. The credentials are authenticated
//! for the org (or zone) API first (`auth::authenticate`, its refusals
//! mapped by `caller::refused`), so a handshake only succeeds for
//! credentials whose tokens that API accepts and whose claims make a
//! caller. A bearer token in the handshake is checked the same way and
//! handed back.
//!
//! Guessing secrets is bounded by the client address's failure budget
//! (`auth::failure_budget`): an address that failed too often is answered
//! `RESOURCE_EXHAUSTED` with when to retry, without asking the identity
//! provider, even for the right secret. That code, not `UNAVAILABLE`: the
//! server is up, this client's budget is spent (gRPC's code for a quota), and
//! clients retry `UNAVAILABLE` on their own, which would only spend the wait.
//! A handshake that fails closes its connection (`gate.rs`); one that
//! succeeds counts its connection against its org's share.

use std::{
    net::{IpAddr, Ipv6Addr},
    pin::Pin,
};

use arrow_flight::HandshakeResponse;
use base64::{
    Engine as _, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
};
use futures::Stream;
use http::Extensions;
use tonic::{Response, Status, metadata::MetadataMap};

use super::{
    FlightState,
    caller::{SessionsOf as _, UNAUTHORIZED, authenticated, target_of},
    gate,
};
use crate::{
    auth::{Credentials, caller::bearer_token},
    listener::Peer,
};

type HandshakeStream = Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>;

/// Standard base64 with or without its padding: gRPC clients differ (Go's
/// ADBC driver leaves it out).
const BASIC_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// `id:secret` of `Basic <base64>`.
fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = BASIC_BASE64.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((id.to_string(), secret.to_string()))
}

/// The address whose failure budget a handshake spends: its connection's
/// peer. Without one (a service not behind `listener::serve`) every such
/// handshake shares one budget, so that none goes unbounded.
fn client_address(extensions: &Extensions) -> IpAddr {
    extensions
        .get::<Peer>()
        .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |peer| peer.0.ip())
}

/// The handshake: the call's token, or the one its credentials are
/// exchanged for, validated and handed back (`metadata` and `extensions`
/// are the call's).
pub async fn handshake(
    state: &FlightState,
    metadata: &MetadataMap,
    extensions: &Extensions,
) -> Result<Response<HandshakeStream>, Status> {
    let (org, zone) = target_of(state, metadata.as_ref())?;
    let value = metadata.get("authorization").and_then(|v| v.to_str().ok());
    let basic = value.and_then(basic_credentials);
    let credentials = match &basic {
        Some((client_id, secret)) => Some(Credentials::ClientSecret {
            client_id,
            secret,
            peer: Some(client_address(extensions)),
        }),
        None => value.and_then(bearer_token).map(Credentials::Bearer),
    };
    let token = authenticated(state, credentials, (&org, zone.as_deref()), None)
        .await?
        .token;
    gate::bind(extensions, &org)?;
    // Credentials open a session that outlives the token (`sessions.rs`);
    // a bearer token brought along is handed back as it is.
    let token = match (&basic, state.flight_sessions()) {
        (Some((client_id, secret)), Some(sessions)) => sessions
            .open((&org, zone.as_deref()), client_id, secret, token)
            .map_err(|full| Status::resource_exhausted(full.to_string()))?,
        _ => token,
    };
    let bearer = format!("Bearer {token}")
        .parse()
        .map_err(|_| Status::unauthenticated(UNAUTHORIZED))?;
    let answer = HandshakeResponse {
        protocol_version: 0,
        payload: token.into_bytes().into(),
    };
    let mut response: Response<HandshakeStream> =
        Response::new(Box::pin(futures::stream::iter([Ok(answer)])));
    response.metadata_mut().insert("authorization", bearer);
    Ok(response)
}
