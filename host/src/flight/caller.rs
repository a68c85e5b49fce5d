//! Who calls over Flight SQL: the org and zone a call is for, and its bearer
//! token, validated exactly as the REST APIs validate theirs (the org realm's
//! issuer, the API client as audience, the scope of the operation, `<zone>:`
//! prefixed on a zone), then made a `LakeCaller` the way REST makes one.
//!
//! gRPC has no host per API, so the org and zone come from call metadata:
//! `x-lakehost-org` (default: `server.default_org`) and `x-lakehost-zone`
//! (none: the Org API). Both must be configured.
//!
//! `gate.rs` asks it before any call reaches the service (on the call's
//! HTTP headers); the service asks again for the scope each call needs (a
//! second validation of the same token is a cache hit).

use http::HeaderMap;
use tonic::{Status, metadata::MetadataMap};

use super::{FlightState, status::echo};
use crate::{
    auth::{
        AccessClaims, LakeCaller, TokenError,
        caller::{bearer_token as bearer_token_of, scope_on},
        validator::Expected,
    },
    observability::metrics::token_rejected,
};

/// Call metadata naming the org.
pub const ORG_HEADER: &str = "x-lakehost-org";
/// Call metadata naming the zone (a Zone API call).
pub const ZONE_HEADER: &str = "x-lakehost-zone";

/// The text every refused or missing credential gets (REST's 401 body).
pub const UNAUTHORIZED: &str = "Unauthorized";

/// The org and zone `metadata` (a call's headers) names, both configured.
pub fn target_of(
    state: &FlightState,
    metadata: &HeaderMap,
) -> Result<(String, Option<String>), Status> {
    let text = |name: &str| -> Result<Option<String>, Status> {
        match metadata.get(name) {
            None => Ok(None),
            Some(value) => value
                .to_str()
                .map(|v| Some(v.to_ascii_lowercase()))
                .map_err(|_| Status::invalid_argument(format!("{name} is not ASCII"))),
        }
    };
    let org = text(ORG_HEADER)?.unwrap_or_else(|| state.config.server.default_org.clone());
    if state.config.org(&org).is_none() {
        return Err(Status::not_found(format!(
            "no org {:?} here ({ORG_HEADER})",
            echo(&org)
        )));
    }
    let zone = text(ZONE_HEADER)?;
    if let Some(zone) = &zone
        && !state.config.has_zone(&org, zone)
    {
        return Err(Status::not_found(format!(
            "org {org:?} has no zone {:?} ({ZONE_HEADER})",
            echo(zone)
        )));
    }
    Ok((org, zone))
}

/// The token of `authorization: Bearer <token>` in a call's headers.
pub fn bearer_token(metadata: &HeaderMap) -> Result<&str, Status> {
    metadata
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token_of)
        .ok_or_else(|| {
            token_rejected("missing_bearer");
            Status::unauthenticated(UNAUTHORIZED)
        })
}

/// `token` validated for the API of `org` (and `zone`), as REST validates
/// it: refused is `Unauthenticated`, keys out of reach `Unavailable`.
pub async fn validated_claims(
    state: &FlightState,
    token: &str,
    (org, zone): (&str, Option<&str>),
) -> Result<AccessClaims, Status> {
    let audience = state.config.auth.api_client_for(zone);
    state
        .validator
        .validate(
            token,
            Expected {
                org,
                audience: &audience,
            },
        )
        .await
        .map_err(|e| match e {
            TokenError::KeysUnavailable(why) => {
                tracing::error!(error = %why, "token keys unavailable");
                Status::unavailable("the identity provider's keys are unavailable")
            }
            _ => Status::unauthenticated(UNAUTHORIZED),
        })
}

/// The caller of a call that needs `scope` (`query:write`, `query:read`).
pub async fn caller_of(
    state: &FlightState,
    metadata: &MetadataMap,
    scope: &str,
) -> Result<LakeCaller, Status> {
    let (org, zone) = target_of(state, metadata.as_ref())?;
    let token = bearer_token(metadata.as_ref())?;
    let claims = validated_claims(state, token, (&org, zone.as_deref())).await?;
    let needed = scope_on(scope, zone.as_deref());
    if !claims.scopes().contains(needed.as_str()) {
        token_rejected("insufficient_scope");
        return Err(Status::permission_denied("Forbidden"));
    }
    let api_client = state.config.auth.api_client_for(zone.as_deref());
    LakeCaller::from_claims(&claims, (&org, zone.as_deref()), &api_client).map_err(|e| {
        tracing::error!(error = %e, "token claims");
        Status::internal(crate::api::error::INTERNAL_MESSAGE)
    })
}
