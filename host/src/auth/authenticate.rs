//! The one door of every front end (REST, Flight SQL, the Postgres wire):
//! credentials (a bearer token, or a client id and secret exchanged through
//! the realm's client-credentials flow), the API they are for (an org, and
//! the zone of a Zone API) and the scope the call needs, in; the lake
//! caller, or a typed [`Refusal`], out.
//!
//! In order: credentials present; a secret exchanged within its address's
//! failure budget (`client_credentials::exchange_from`); the token validated
//! for the API (the org realm's issuer, the API's client as audience,
//! `validator.rs`); the scope, `<zone>:` prefixed on a Zone API; the claims
//! a lake call reads (`LakeCaller::from_claims`). Each refusal is counted
//! once by reason (`lakehost_token_rejections_total`).
//!
//! It knows no protocol: each front end maps a `Refusal` to its own status
//! once (`api/principal.rs`, `flight/caller.rs`, `pg/sqlstate.rs`), and
//! none of them builds a caller any other way.

use std::net::IpAddr;

use super::{
    AccessClaims, ClaimError, LakeCaller, TokenError, TokenValidator,
    caller::scope_on,
    client_credentials::{ExchangeError, exchange, exchange_from},
    failure_budget::Throttled,
    validator::Expected,
};
use crate::observability::metrics::token_rejected;

/// What a caller presents.
#[derive(Clone, Copy)]
pub enum Credentials<'a> {
    /// An access token (`Authorization: Bearer <token>`).
    Bearer(&'a str),
    /// A client id and secret of the org's realm, from the client address
    /// `peer` whose failure budget a refused secret spends (`None`: a
    /// session renewing the token of a secret accepted before).
    ClientSecret {
        client_id: &'a str,
        secret: &'a str,
        peer: Option<IpAddr>,
    },
}

impl std::fmt::Debug for Credentials<'_> {
    /// Never the token or the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
            Credentials::ClientSecret {
                client_id, peer, ..
            } => f
                .debug_struct("ClientSecret")
                .field("client_id", client_id)
                .field("peer", peer)
                .finish_non_exhaustive(),
        }
    }
}

/// The API a call is for: the Org API of `org` (`zone` `None`) or one of
/// its Zone APIs. Both are configured: front ends refuse other names first,
/// each in its own way (an unknown host, gRPC metadata, database name).
#[derive(Debug, Clone, Copy)]
pub struct Api<'a> {
    pub org: &'a str,
    pub zone: Option<&'a str>,
}

/// Why credentials give no caller. Front ends map each variant to their
/// own status, and never show the cause.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// No credentials, or not in a form the front end takes.
    #[error("no credentials")]
    MissingCredentials,
    /// Not an access token this server accepts: malformed, a refused
    /// header, a bad signature, a missing or odd claim, not valid yet, a
    /// lifetime past the cap, not an access token.
    #[error("the token is refused")]
    InvalidToken(#[source] TokenError),
    /// A token of another realm, or for another API.
    #[error("the token is of another realm or for another API")]
    WrongIssuerOrAudience(#[source] TokenError),
    /// A token past its `exp`.
    #[error("the token has expired")]
    Expired,
    /// The identity provider refused the client id and secret.
    #[error("the client credentials were refused")]
    SecretRefused,
    /// A valid token without the scope the call needs.
    #[error("the token lacks the scope {needed}")]
    MissingScope { needed: String },
    /// A valid token whose claims a lake call reads (`sub`,
    /// `resource_access`, `service_client_id`) are missing or malformed.
    #[error("the token's claims cannot make a caller")]
    Claims(#[source] ClaimError),
    /// The identity provider could not be asked (its keys, or its token
    /// endpoint): ours to fix, not the caller's.
    #[error("the identity provider is unavailable")]
    ProviderUnavailable(#[source] Unreachable),
    /// The client address failed too often: not checked, retry later.
    #[error(transparent)]
    Throttled(#[from] Throttled),
}

/// What of the identity provider could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// Its signing keys (JWKS).
    #[error(transparent)]
    Keys(TokenError),
    /// Its token endpoint.
    #[error(transparent)]
    TokenEndpoint(ExchangeError),
}

impl From<TokenError> for Refusal {
    fn from(e: TokenError) -> Self {
        let wrong_api = |e: &jsonwebtoken::errors::Error| {
            use jsonwebtoken::errors::ErrorKind;
            matches!(
                e.kind(),
                ErrorKind::InvalidAudience | ErrorKind::InvalidIssuer
            )
        };
        match e {
            TokenError::KeysUnavailable(_) => Refusal::ProviderUnavailable(Unreachable::Keys(e)),
            TokenError::Expired => Refusal::Expired,
            TokenError::WrongIssuer => Refusal::WrongIssuerOrAudience(e),
            TokenError::Invalid(ref inner) if wrong_api(inner) => Refusal::WrongIssuerOrAudience(e),
            other => Refusal::InvalidToken(other),
        }
    }
}

impl From<ExchangeError> for Refusal {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Refused => Refusal::SecretRefused,
            ExchangeError::Throttled(throttled) => Refusal::Throttled(throttled),
            unavailable @ ExchangeError::Unavailable(_) => {
                Refusal::ProviderUnavailable(Unreachable::TokenEndpoint(unavailable))
            }
        }
    }
}

impl Refusal {
    /// Whether the token itself was refused (a session holding a secret
    /// exchanges it again), rather than the caller's rights or our side.
    pub fn is_token_refused(&self) -> bool {
        matches!(
            self,
            Refusal::InvalidToken(_) | Refusal::WrongIssuerOrAudience(_) | Refusal::Expired
        )
    }
}

/// Credentials checked for an API and a scope, before the claims a lake
/// call reads: what an endpoint that reads the claims itself needs (the
/// identity endpoint answers their absence with its own 403s).
#[derive(Debug, Clone)]
pub struct Verified {
    pub claims: AccessClaims,
    pub org: String,
    pub zone: Option<String>,
    /// `svc_api` or `svc_api_<zone>`: the audience, and whose roles count.
    pub api_client: String,
    /// The access token: the one presented, or the one a secret was
    /// exchanged for.
    pub token: String,
}

impl Verified {
    /// The lake caller these claims name; a claim it cannot do without,
    /// missing or malformed, is `Refusal::Claims`.
    pub fn caller(&self) -> Result<LakeCaller, Refusal> {
        LakeCaller::from_claims(
            &self.claims,
            (&self.org, self.zone.as_deref()),
            &self.api_client,
        )
        .map_err(|e| {
            token_rejected("invalid_claims");
            Refusal::Claims(e)
        })
    }
}

/// A caller let in, and the access token it came with.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub caller: LakeCaller,
    pub token: String,
}

/// `credentials` (`None`: the call carried none) checked for `api` and, when
/// given, the scope `scope` (`query:write`; `<zone>:` is added on a Zone
/// API), then made the lake caller: the one way any front end lets a caller
/// in.
pub async fn authenticate(
    validator: &TokenValidator,
    credentials: Option<Credentials<'_>>,
    api: Api<'_>,
    scope: Option<&str>,
) -> Result<Authenticated, Refusal> {
    let verified = verify(validator, credentials, api, scope).await?;
    Ok(Authenticated {
        caller: verified.caller()?,
        token: verified.token,
    })
}

/// [`authenticate`] but the claims check: for an endpoint that reads the
/// claims itself.
pub async fn verify(
    validator: &TokenValidator,
    credentials: Option<Credentials<'_>>,
    api: Api<'_>,
    scope: Option<&str>,
) -> Result<Verified, Refusal> {
    let token = match credentials {
        None => {
            token_rejected("missing_bearer");
            return Err(Refusal::MissingCredentials);
        }
        Some(Credentials::Bearer(token)) => token.to_string(),
        Some(Credentials::ClientSecret {
            client_id,
            secret,
            peer,
        }) => match peer {
            Some(peer) => exchange_from(validator, peer, api.org, client_id, secret).await?,
            None => exchange(validator, api.org, client_id, secret).await?,
        },
    };
    let api_client = validator.api_client_for(api.zone);
    let claims = validator
        .validate(
            &token,
            Expected {
                org: api.org,
                audience: &api_client,
            },
        )
        .await?;
    if let Some(base) = scope {
        let needed = scope_on(base, api.zone);
        if !claims.scopes().contains(needed.as_str()) {
            token_rejected("insufficient_scope");
            return Err(Refusal::MissingScope { needed });
        }
    }
    Ok(Verified {
        claims,
        org: api.org.to_string(),
        zone: api.zone.map(str::to_string),
        api_client,
        token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_errors_become_the_refusal_a_front_end_maps() {
        let audience =
            jsonwebtoken::errors::Error::from(jsonwebtoken::errors::ErrorKind::InvalidAudience);
        let signature =
            jsonwebtoken::errors::Error::from(jsonwebtoken::errors::ErrorKind::InvalidSignature);
        let cases = [
            (TokenError::Expired, "Expired"),
            (TokenError::WrongIssuer, "WrongIssuerOrAudience"),
            (TokenError::Invalid(audience), "WrongIssuerOrAudience"),
            (TokenError::Invalid(signature), "InvalidToken"),
            (TokenError::Malformed, "InvalidToken"),
            (TokenError::NotYetValid, "InvalidToken"),
            (
                TokenError::KeysUnavailable("down".into()),
                "ProviderUnavailable",
            ),
        ];
        for (error, expected) in cases {
            let refusal = Refusal::from(error);
            let name = format!("{refusal:?}");
            assert!(name.starts_with(expected), "{name} is not {expected}");
            assert_eq!(
                refusal.is_token_refused(),
                expected != "ProviderUnavailable",
                "{name}"
            );
        }
    }

    #[test]
    fn exchange_errors_keep_the_budget_and_the_provider_apart() {
        assert!(matches!(
            Refusal::from(ExchangeError::Refused),
            Refusal::SecretRefused
        ));
        let throttled = Throttled {
            retry_after: std::time::Duration::from_secs(5),
        };
        assert!(matches!(
            Refusal::from(ExchangeError::Throttled(throttled)),
            Refusal::Throttled(t) if t == throttled
        ));
        let unavailable = Refusal::from(ExchangeError::Unavailable(
            crate::auth::client_credentials::EndpointError::Status(
                reqwest::StatusCode::BAD_GATEWAY,
            ),
        ));
        assert!(matches!(
            unavailable,
            Refusal::ProviderUnavailable(Unreachable::TokenEndpoint(_))
        ));
        assert!(!unavailable.is_token_refused());
        let source = std::error::Error::source(&unavailable).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some(
                "the identity provider could not be reached: token endpoint answered 502 Bad Gateway"
            )
        );
    }

    #[test]
    fn claims_a_lake_call_cannot_do_without_are_a_refusal() {
        let verified = |service_client_id: serde_json::Value| Verified {
            claims: AccessClaims::new(
                serde_json::json!({
                    "sub": "someone",
                    "resource_access": {"svc_api_lab": {"roles": ["ZoneAdmin"]}},
                    "service_client_id": service_client_id,
                })
                .as_object()
                .unwrap()
                .clone(),
            ),
            org: "demo".into(),
            zone: Some("lab".into()),
            api_client: "svc_api_lab".into(),
            token: "t".into(),
        };
        let caller = verified("[12 13]".into()).caller().unwrap();
        assert_eq!(
            (caller.org.as_str(), caller.zone.as_deref()),
            ("demo", Some("lab"))
        );
        assert_eq!(caller.grant.roles, ["ZoneAdmin"]);
        assert_eq!(caller.grant.service_clients, [12, 13]);
        for bad in ["1,2".into(), "[]".into(), serde_json::json!([12])] {
            let refused = verified(bad.clone()).caller().unwrap_err();
            assert!(matches!(refused, Refusal::Claims(_)), "{bad}: {refused:?}");
            assert!(!refused.is_token_refused());
        }
    }

    #[test]
    fn credentials_never_print_their_secret() {
        let shown = format!(
            "{:?} {:?}",
            Credentials::Bearer("eyJ.secret.token"),
            Credentials::ClientSecret {
                client_id: "demo-admin",
                secret: "hunter2",
                peer: None,
            }
        );
        assert!(!shown.contains("secret.token") && !shown.contains("hunter2"));
        assert!(shown.contains("demo-admin"), "{shown}");
    }
}
