//! `Handshake`: a client that has a client id and secret rather than a
//! token (ADBC's `username` and `password`) sends them as
//! `authorization: Basic base64(id:secret)`; they are exchanged through the
//! org realm's client-credentials flow (`auth::client_credentials`), and the
//! token comes back in the response's `authorization: Bearer` metadata (and
//! as the payload), which the client then sends on every call. The token is
//! validated for the org (or zone) API first, so a handshake only succeeds
//! for credentials whose tokens that API accepts. A bearer token in the
//! handshake is checked the same way and handed back.

use std::pin::Pin;

use arrow_flight::HandshakeResponse;
use base64::{
    Engine as _, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
};
use futures::Stream;
use tonic::{Response, Status, metadata::MetadataMap};

use super::{
    FlightState,
    caller::{UNAUTHORIZED, target_of, validated_claims},
};
use crate::auth::{
    caller::bearer_token,
    client_credentials::{ExchangeError, exchange},
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

/// The handshake: the call's token, or the one its credentials are
/// exchanged for, validated and handed back.
pub async fn handshake(
    state: &FlightState,
    metadata: &MetadataMap,
) -> Result<Response<HandshakeStream>, Status> {
    let (org, zone) = target_of(state, metadata)?;
    let unauthorized = || Status::unauthenticated(UNAUTHORIZED);
    let value = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(unauthorized)?;
    let token = match basic_credentials(value) {
        Some((id, secret)) => exchange(&state.validator, &org, &id, &secret)
            .await
            .map_err(|e| match e {
                ExchangeError::Refused => {
                    tracing::debug!("handshake: client credentials refused");
                    unauthorized()
                }
                ExchangeError::Unavailable(why) => {
                    tracing::error!(error = %why, "client-credentials exchange");
                    Status::unavailable("the identity provider is unavailable")
                }
            })?,
        None => bearer_token(value).ok_or_else(unauthorized)?.to_string(),
    };
    validated_claims(state, &token, (&org, zone.as_deref())).await?;
    let bearer = format!("Bearer {token}")
        .parse()
        .map_err(|_| unauthorized())?;
    let answer = HandshakeResponse {
        protocol_version: 0,
        payload: token.into_bytes().into(),
    };
    let mut response: Response<HandshakeStream> =
        Response::new(Box::pin(futures::stream::iter([Ok(answer)])));
    response.metadata_mut().insert("authorization", bearer);
    Ok(response)
}
