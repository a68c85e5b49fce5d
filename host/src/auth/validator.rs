//! Access-token validation as a careful resource server does it (RFC 8725).
//!
//! In order: a size cap and the compact three-part shape; the header (an
//! allow-listed asymmetric `alg`, a `kid`, and no `jku`/`jwk`/`x5u`/`x5c`/`crit`,
//! whose keys or extensions we would have to trust); the unverified `iss` compared
//! with the expected realm's issuer before any key is looked up; the signature with
//! that realm's key for that `kid`; then `iss`, `aud`, `sub`, and `exp`/`nbf`
//! against the injected clock with a bounded leeway. The `typ` claim, when present,
//! must be `Bearer` so refresh and ID tokens are not accepted as access tokens.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use url::Url;

use super::failure_budget::FailureBudget;

use super::{
    claims::AccessClaims,
    jwks::{JwksCache, KeyError},
};
use crate::{clock::SharedClock, config::AuthConfig};

/// Longest token accepted. Keycloak tokens are a few KiB; anything much larger is
/// refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why a token was refused. Every variant but `KeysUnavailable` is the caller's
/// problem (401); that one is ours (the identity provider could not be reached).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token is not a compact JWS of three parts within {MAX_TOKEN_BYTES} bytes")]
    Malformed,
    #[error("token header cannot be read: {0}")]
    BadHeader(String),
    #[error("algorithm {0:?} is not allowed")]
    DisallowedAlgorithm(Algorithm),
    #[error("token header carries `{0}`, which is refused")]
    ForbiddenHeader(&'static str),
    #[error("token header has no kid")]
    MissingKid,
    #[error("issuer is not the expected realm")]
    WrongIssuer,
    #[error("no key with this kid")]
    UnknownKey,
    #[error("the key's JWK is pinned to another algorithm")]
    AlgorithmMismatch,
    #[error("signature or registered claims invalid: {0}")]
    Invalid(jsonwebtoken::errors::Error),
    #[error("claim `{0}` is missing")]
    MissingClaim(&'static str),
    #[error("claim `{0}` is not a number")]
    NonNumericTime(&'static str),
    #[error("token expired")]
    Expired,
    #[error("token not valid yet")]
    NotYetValid,
    #[error("token expires further ahead than the longest lifetime accepted")]
    LifetimeTooLong,
    #[error("token type {0:?} is not an access token")]
    WrongType(String),
    #[error("signing keys unavailable: {0}")]
    KeysUnavailable(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl TokenError {
    /// Why, as a fixed word for the metrics (never the error's text, which
    /// may quote the token's header).
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::BadHeader(_) => "bad_header",
            TokenError::DisallowedAlgorithm(_) => "disallowed_algorithm",
            TokenError::ForbiddenHeader(_) => "forbidden_header",
            TokenError::MissingKid => "missing_kid",
            TokenError::WrongIssuer => "wrong_issuer",
            TokenError::UnknownKey => "unknown_key",
            TokenError::AlgorithmMismatch => "algorithm_mismatch",
            TokenError::Invalid(_) => "invalid_signature_or_claims",
            TokenError::MissingClaim(_) => "missing_claim",
            TokenError::NonNumericTime(_) => "non_numeric_time",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::LifetimeTooLong => "lifetime_too_long",
            TokenError::WrongType(_) => "wrong_type",
            TokenError::KeysUnavailable(_) => "keys_unavailable",
        }
    }
}

/// What a token must be for: the org whose realm must have issued it and the
/// API client that must be in its audience.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub org: &'a str,
    pub audience: &'a str,
}

pub struct TokenValidator {
    jwks: JwksCache,
    clock: SharedClock,
    allowed: Vec<Algorithm>,
    leeway_s: i64,
    /// `auth.max_token_lifetime_s`.
    max_lifetime_s: i64,
    /// Tokens whose signature and claims were verified, by SHA-256 of the
    /// token text and what they were verified for. A hit skips the RSA
    /// signature check (the text is byte-for-byte the verified one); expiry
    /// and `nbf` are checked again on every use.
    verified: Mutex<HashMap<[u8; 32], VerifiedToken>>,
    /// Failed client-secret exchanges by client address
    /// (`client_credentials::exchange_from`), one budget for every front
    /// end that takes a password.
    exchange_failures: FailureBudget,
    /// The API client of the Org API, whose name the zones' clients extend:
    /// the audience a token of each API must carry.
    api_clients: AuthConfig,
}

struct VerifiedToken {
    org: String,
    audience: String,
    claims: Map<String, Value>,
}

/// Verified tokens kept at most; the cache starts over when full.
const VERIFIED_CACHE_LIMIT: usize = 10_000;

impl TokenValidator {
    /// `auth_url` is the effective identity-provider address (the configured one,
    /// or the server's own for the embedded provider).
    /// `extra_root_pem` is a certificate to trust besides the public roots (the
    /// server's own, when the embedded provider is served over HTTPS).
    pub fn new(
        config: &AuthConfig,
        auth_url: Url,
        clock: SharedClock,
        extra_root_pem: Option<&[u8]>,
    ) -> Result<Self, reqwest::Error> {
        let allowed = config
            .allowed_algorithms
            .iter()
            .map(|name| name.parse().expect("validated by Config::validate"))
            .collect();
        Ok(Self {
            jwks: JwksCache::new(
                auth_url,
                clock.clone(),
                config.jwks_refetch_cooldown_s,
                config.jwks_max_age_s,
                extra_root_pem,
            )?,
            clock: clock.clone(),
            allowed,
            leeway_s: config.leeway_s as i64,
            max_lifetime_s: config.max_token_lifetime_s as i64,
            verified: Mutex::new(HashMap::new()),
            exchange_failures: FailureBudget::new(clock.clone()),
            api_clients: config.clone(),
        })
    }

    /// The audience of the Org API (`zone` `None`) or of a Zone API, and
    /// the client whose roles count there (`AuthConfig::api_client_for`).
    pub fn api_client_for(&self, zone: Option<&str>) -> String {
        self.api_clients.api_client_for(zone)
    }

    /// Failed client-secret exchanges by client address.
    pub fn exchange_failures(&self) -> &FailureBudget {
        &self.exchange_failures
    }

    pub fn issuer(&self, org: &str) -> String {
        self.jwks.issuer(org)
    }

    /// The client that reaches the identity provider (`JwksCache::http`).
    pub fn identity_provider_client(&self) -> reqwest::Client {
        self.jwks.http()
    }

    /// Validates `token` for `expected`; every refusal is counted by reason.
    pub async fn validate(
        &self,
        token: &str,
        expected: Expected<'_>,
    ) -> Result<AccessClaims, TokenError> {
        let validated = self.validate_uncounted(token, expected).await;
        if let Err(e) = &validated {
            crate::observability::metrics::token_rejected(e.reason());
        }
        validated
    }

    async fn validate_uncounted(
        &self,
        token: &str,
        expected: Expected<'_>,
    ) -> Result<AccessClaims, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = self
            .verified
            .lock()
            .expect("verified-token cache lock")
            .get(&digest)
            .filter(|v| v.org == expected.org && v.audience == expected.audience)
            .map(|v| v.claims.clone());
        if let Some(claims) = cached {
            self.check_times(&claims)?;
            return Ok(AccessClaims::new(claims));
        }
        let claims = self.verify(token, expected).await?;
        let mut verified = self.verified.lock().expect("verified-token cache lock");
        if verified.len() >= VERIFIED_CACHE_LIMIT {
            verified.clear();
        }
        verified.insert(
            digest,
            VerifiedToken {
                org: expected.org.to_string(),
                audience: expected.audience.to_string(),
                claims: claims.clone(),
            },
        );
        Ok(AccessClaims::new(claims))
    }

    /// The full check of a token not seen before.
    async fn verify(
        &self,
        token: &str,
        expected: Expected<'_>,
    ) -> Result<Map<String, Value>, TokenError> {
        let unverified_payload = split_compact(token)?;

        let header =
            jsonwebtoken::decode_header(token).map_err(|e| TokenError::BadHeader(e.to_string()))?;
        if !self.allowed.contains(&header.alg) {
            return Err(TokenError::DisallowedAlgorithm(header.alg));
        }
        for (name, present) in [
            ("jku", header.jku.is_some()),
            ("jwk", header.jwk.is_some()),
            ("x5u", header.x5u.is_some()),
            ("x5c", header.x5c.is_some()),
            ("crit", header.crit.is_some()),
        ] {
            if present {
                return Err(TokenError::ForbiddenHeader(name));
            }
        }
        let kid = header.kid.as_deref().ok_or(TokenError::MissingKid)?;

        // The issuer is compared as an opaque string with the configured realm's;
        // no URL is ever built from a token.
        let issuer = self.issuer(expected.org);
        if unverified_iss(unverified_payload).as_deref() != Some(issuer.as_str()) {
            return Err(TokenError::WrongIssuer);
        }

        let key = self
            .jwks
            .key(expected.org, kid)
            .await
            .map_err(|e| match e {
                KeyError::UnknownKid => TokenError::UnknownKey,
                KeyError::Unavailable(why) => TokenError::KeysUnavailable(Box::new(why)),
            })?;
        if key.algorithm.is_some_and(|pinned| pinned != header.alg) {
            return Err(TokenError::AlgorithmMismatch);
        }

        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[&issuer]);
        validation.set_audience(&[expected.audience]);
        validation.required_spec_claims = HashSet::from(["iss", "aud", "sub"].map(String::from));
        // Time claims are checked below against the injected clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.leeway = 0;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(TokenError::Invalid)?;
        let claims = data.claims;

        self.check_times(&claims)?;
        if !claims.get("sub").is_some_and(Value::is_string) {
            return Err(TokenError::MissingClaim("sub"));
        }
        if let Some(typ) = claims.get("typ") {
            let typ = typ.as_str().unwrap_or_default();
            if !typ.eq_ignore_ascii_case("bearer") {
                return Err(TokenError::WrongType(typ.to_string()));
            }
        }
        Ok(claims)
    }

    fn check_times(&self, claims: &Map<String, Value>) -> Result<(), TokenError> {
        let now = self.clock.unix_seconds() as f64;
        let leeway = self.leeway_s as f64;
        let exp = numeric_date(claims, "exp")?.ok_or(TokenError::MissingClaim("exp"))?;
        if now > exp + leeway {
            return Err(TokenError::Expired);
        }
        if exp > now + self.max_lifetime_s as f64 + leeway {
            return Err(TokenError::LifetimeTooLong);
        }
        if let Some(nbf) = numeric_date(claims, "nbf")?
            && now + leeway < nbf
        {
            return Err(TokenError::NotYetValid);
        }
        Ok(())
    }
}

/// RFC 7519 NumericDate: a JSON number. `Ok(None)` when absent.
fn numeric_date(
    claims: &Map<String, Value>,
    name: &'static str,
) -> Result<Option<f64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|v| v.is_finite())
            .map(Some)
            .ok_or(TokenError::NonNumericTime(name)),
        Some(_) => Err(TokenError::NonNumericTime(name)),
    }
}

/// Checks the compact shape (three non-empty base64url parts, size cap) and
/// returns the payload part.
pub(crate) fn split_compact(token: &str) -> Result<&str, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::Malformed);
    }
    let parts: Vec<&str> = token.split('.').collect();
    let base64url = |p: &&str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if parts.len() != 3 || !parts.iter().all(base64url) {
        return Err(TokenError::Malformed);
    }
    Ok(parts[1])
}

/// The `iss` of a payload not yet verified, only to compare with the expected one.
pub(crate) fn unverified_iss(payload: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    value.get("iss")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_shape() {
        assert!(split_compact("a.b.c").is_ok());
        for bad in ["a.b", "a.b.c.d", "a.b.", ".b.c", "a.b+.c", "a.b.c=", ""] {
            assert!(split_compact(bad).is_err(), "{bad:?}");
        }
        let huge = format!("a.{}.c", "b".repeat(MAX_TOKEN_BYTES));
        assert!(split_compact(&huge).is_err());
    }

    #[test]
    fn numeric_dates() {
        let claims: Map<String, Value> =
            serde_json::from_str(r#"{"exp": 10, "nbf": "5", "iat": 1.5}"#).unwrap();
        assert_eq!(numeric_date(&claims, "exp").unwrap(), Some(10.0));
        assert!(matches!(
            numeric_date(&claims, "nbf"),
            Err(TokenError::NonNumericTime("nbf"))
        ));
        assert_eq!(numeric_date(&claims, "iat").unwrap(), Some(1.5));
        assert_eq!(numeric_date(&claims, "missing").unwrap(), None);
    }
}
