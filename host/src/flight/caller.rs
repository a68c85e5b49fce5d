//! Who calls over Flight SQL: the org and zone a call is for, and its bearer
//! token, validated exactly as the REST APIs validate theirs (the org realm's
//! issuer, the API client as audience, the scope of the operation, `<zone>:`
//! prefixed on a zone), then made a `LakeCaller` the way REST makes one.
//!
//! gRPC has no host per API, so the org and zone come from call metadata:
//! `x-lakehost-org` (default: `server.default_org`) and `x-lakehost-zone`
//! (none: the Org API). Both must be configured.

use tonic::{Status, metadata::MetadataMap};

use super::FlightState;
use crate::{
    auth::{LakeCaller, TokenError, caller::scope_on, validator::Expected},
    observability::metrics::token_rejected,
};

/// Call metadata naming the org.
pub const ORG_HEADER: &str = "x-lakehost-org";
/// Call metadata naming the zone (a Zone API call).
pub const ZONE_HEADER: &str = "x-lakehost-zone";

/// The text every refused or missing credential gets (REST's 401 body).
pub const UNAUTHORIZED: &str = "Unauthorized";

/// The org and zone `metadata` names, both configured.
pub fn target_of(
    state: &FlightState,
    metadata: &MetadataMap,
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
    let Some(org_config) = state.config.org(&org) else {
        return Err(Status::not_found(format!(
            "no org {org:?} here ({ORG_HEADER})"
        )));
    };
    let zone = text(ZONE_HEADER)?;
    if let Some(zone) = &zone
        && !org_config.zones.iter().any(|z| z == zone)
    {
        return Err(Status::not_found(format!(
            "org {org:?} has no zone {zone:?} ({ZONE_HEADER})"
        )));
    }
    Ok((org, zone))
}

/// The token of `authorization: Bearer <token>`.
fn bearer_token(metadata: &MetadataMap) -> Result<&str, Status> {
    let refuse = |reason: &'static str| {
        token_rejected(reason);
        Status::unauthenticated(UNAUTHORIZED)
    };
    let value = metadata
        .get("authorization")
        .ok_or_else(|| refuse("missing_bearer"))?
        .to_str()
        .map_err(|_| refuse("missing_bearer"))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer")
                && !token.is_empty()
                && !token.contains(' ') =>
        {
            Ok(token)
        }
        _ => Err(refuse("missing_bearer")),
    }
}

/// The caller of a call that needs `scope` (`query:write`, `query:read`).
pub async fn caller_of(
    state: &FlightState,
    metadata: &MetadataMap,
    scope: &str,
) -> Result<LakeCaller, Status> {
    let (org, zone) = target_of(state, metadata)?;
    let token = bearer_token(metadata)?;
    let api_client = state.config.auth.api_client_for(zone.as_deref());
    let claims = state
        .validator
        .validate(
            token,
            Expected {
                org: &org,
                audience: &api_client,
            },
        )
        .await
        .map_err(|e| match e {
            TokenError::KeysUnavailable(why) => {
                tracing::error!(error = %why, "token keys unavailable");
                Status::unavailable("the identity provider's keys are unavailable")
            }
            _ => Status::unauthenticated(UNAUTHORIZED),
        })?;
    let needed = scope_on(scope, zone.as_deref());
    if !claims.scopes().contains(needed.as_str()) {
        token_rejected("insufficient_scope");
        return Err(Status::permission_denied("Forbidden"));
    }
    LakeCaller::from_claims(&claims, (&org, zone.as_deref()), &api_client).map_err(|e| {
        tracing::error!(error = %e, "token claims");
        Status::internal(crate::api::error::INTERNAL_MESSAGE)
    })
}
