//! Who calls over Flight SQL: the org and zone a call is for, and its bearer
//! token, authenticated as every front end's are (`auth::authenticate`: the
//! org realm's issuer, the API client as audience, the scope of the
//! operation, `<zone>:` prefixed on a zone, the claims a lake call reads);
//! `refused` maps its refusals to gRPC statuses, once.
//!
//! gRPC has no host per API, so the org and zone come from call metadata:
//! `x-lakehost-org` (default: `server.default_org`) and `x-lakehost-zone`
//! (none: the Org API). Both must be configured.
//!
//! `gate.rs` asks it before any call reaches the service (on the call's
//! HTTP headers); the service asks again for the scope each call needs (a
//! second validation of the same token is a cache hit).
//!
//! A bearer that is a session token (`sessions.rs`: a handshake with a
//! client id and secret opened it) stands for its session's realm token,
//! renewed with the session's secret once it expired.

use http::HeaderMap;
use tonic::{Status, metadata::MetadataMap};

use super::{
    FlightState,
    sessions::{FlightSessions, is_session_token},
    status::echo,
};
use crate::auth::{
    Api, Authenticated, Credentials, LakeCaller, Refusal, authenticate, caller::bearer_token,
};

/// Where a Flight listener keeps its sessions (`sessions.rs`).
pub trait SessionsOf {
    /// The listener's sessions; `None` where none are kept, and a handshake
    /// with a client id and secret answers the realm's token as it is.
    fn flight_sessions(&self) -> Option<&FlightSessions>;
}

impl SessionsOf for FlightState {
    fn flight_sessions(&self) -> Option<&FlightSessions> {
        Some(&self.sessions)
    }
}

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

/// The token of `authorization: Bearer <token>` in a call's headers
/// (`None`: no such header).
fn bearer_of(metadata: &HeaderMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
}

/// A call's bearer (`headers` are its) authenticated for the API of `org`
/// (and `zone`) and, when given, `scope`: a realm token as it is, a session
/// token as its session's realm token, renewed once it expired.
pub async fn call_authenticated(
    state: &FlightState,
    headers: &HeaderMap,
    (org, zone): (&str, Option<&str>),
    scope: Option<&str>,
) -> Result<Authenticated, Status> {
    match bearer_of(headers) {
        Some(token) if is_session_token(token) => {
            session_authenticated(state, token, (org, zone), scope).await
        }
        token => authenticated(state, token.map(Credentials::Bearer), (org, zone), scope).await,
    }
}

/// The session `session_token` names, authenticated for the API of `org`
/// (and `zone`, those it opened for) with its realm token, renewed through
/// the client-credentials flow when that expired; a refused secret ends it.
async fn session_authenticated(
    state: &FlightState,
    session_token: &str,
    (org, zone): (&str, Option<&str>),
    scope: Option<&str>,
) -> Result<Authenticated, Status> {
    let unauthorized = || Status::unauthenticated(UNAUTHORIZED);
    let sessions = state.flight_sessions().ok_or_else(unauthorized)?;
    let session = sessions
        .credentials(session_token)
        .ok_or_else(unauthorized)?;
    if session.org != org || session.zone.as_deref() != zone {
        return Err(unauthorized());
    }
    let api = Api { org, zone };
    let bearer = Some(Credentials::Bearer(&session.token));
    match authenticate(&state.validator, bearer, api, scope).await {
        Err(Refusal::Expired) => {}
        answer => return answer.map_err(refused),
    }
    let secret = Some(Credentials::ClientSecret {
        client_id: &session.client_id,
        secret: &session.secret,
        peer: None,
    });
    match authenticate(&state.validator, secret, api, scope).await {
        Ok(renewed) => {
            sessions.renewed(session_token, renewed.token.clone());
            Ok(renewed)
        }
        Err(refusal) => {
            if matches!(refusal, Refusal::SecretRefused | Refusal::Claims(_)) {
                sessions.end(session_token);
            }
            Err(refused(refusal))
        }
    }
}

/// A refusal of `auth::authenticate` as a gRPC status, the one place Flight
/// maps one: anything wrong with the credentials, their claims included, is
/// `UNAUTHENTICATED` with REST's 401 text; a missing scope
/// `PERMISSION_DENIED` with REST's 403 text; an identity provider out of
/// reach `UNAVAILABLE` (logged); an address past its failure budget
/// `RESOURCE_EXHAUSTED`, with when to retry (gRPC's code for a spent quota:
/// clients retry `UNAVAILABLE` on their own, which would only spend the
/// wait).
pub fn refused(refusal: Refusal) -> Status {
    match refusal {
        Refusal::MissingScope { .. } => Status::permission_denied("Forbidden"),
        Refusal::ProviderUnavailable(e) => {
            tracing::error!(error = %e, "identity provider unavailable");
            Status::unavailable("the identity provider is unavailable")
        }
        Refusal::Throttled(throttled) => {
            tracing::debug!(retry_after = ?throttled.retry_after, "flight credentials throttled");
            Status::resource_exhausted(throttled.to_string())
        }
        unauthenticated @ (Refusal::MissingCredentials
        | Refusal::InvalidToken(_)
        | Refusal::WrongIssuerOrAudience(_)
        | Refusal::Expired
        | Refusal::SecretRefused
        | Refusal::Claims(_)) => {
            tracing::debug!(refusal = ?unauthenticated, "flight credentials refused");
            Status::unauthenticated(UNAUTHORIZED)
        }
    }
}

/// `credentials` authenticated for the API of `org` (and `zone`) and, when
/// given, the scope `scope` (`query:write`, `query:read`), as every front
/// end authenticates: the caller and its token, or the refusal's status.
pub async fn authenticated(
    state: &FlightState,
    credentials: Option<Credentials<'_>>,
    (org, zone): (&str, Option<&str>),
    scope: Option<&str>,
) -> Result<Authenticated, Status> {
    authenticate(&state.validator, credentials, Api { org, zone }, scope)
        .await
        .map_err(refused)
}

/// The caller of a call that needs `scope` (`query:write`, `query:read`).
pub async fn caller_of(
    state: &FlightState,
    metadata: &MetadataMap,
    scope: &str,
) -> Result<LakeCaller, Status> {
    let (org, zone) = target_of(state, metadata.as_ref())?;
    let authenticated = call_authenticated(
        state,
        metadata.as_ref(),
        (&org, zone.as_deref()),
        Some(scope),
    )
    .await?;
    Ok(authenticated.caller)
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;
    use crate::auth::{
        ClaimError, TokenError, authenticate::Unreachable, failure_budget::Throttled,
    };

    #[test]
    fn each_refusal_has_its_grpc_code_and_never_its_causes_text() {
        let claim = ClaimError::MalformedServiceClient {
            claim: "1,2".into(),
        };
        let cases = [
            (
                Refusal::MissingCredentials,
                Code::Unauthenticated,
                UNAUTHORIZED,
            ),
            (
                Refusal::InvalidToken(TokenError::Malformed),
                Code::Unauthenticated,
                UNAUTHORIZED,
            ),
            (
                Refusal::WrongIssuerOrAudience(TokenError::WrongIssuer),
                Code::Unauthenticated,
                UNAUTHORIZED,
            ),
            (Refusal::Expired, Code::Unauthenticated, UNAUTHORIZED),
            (Refusal::SecretRefused, Code::Unauthenticated, UNAUTHORIZED),
            (Refusal::Claims(claim), Code::Unauthenticated, UNAUTHORIZED),
            (
                Refusal::MissingScope {
                    needed: "query:write".into(),
                },
                Code::PermissionDenied,
                "Forbidden",
            ),
            (
                Refusal::ProviderUnavailable(Unreachable::Keys(TokenError::KeysUnavailable(
                    "connection refused".into(),
                ))),
                Code::Unavailable,
                "the identity provider is unavailable",
            ),
            (
                Refusal::Throttled(Throttled {
                    retry_after: std::time::Duration::from_secs(7),
                }),
                Code::ResourceExhausted,
                "too many failed attempts from this address; retry in 7 s",
            ),
        ];
        for (refusal, code, message) in cases {
            let what = format!("{refusal:?}");
            let status = refused(refusal);
            assert_eq!((status.code(), status.message()), (code, message), "{what}");
        }
    }
}
