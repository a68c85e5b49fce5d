//! The `[auth]` section: how the resource server checks access tokens (the
//! identity provider's address, the API client and its zones' clients, the
//! PKCE clients, the accepted algorithms, leeway and lifetimes, JWKS refetch),
//! with its defaults, its limits and its checks.
//!
//! It holds settings only; the token validator is `auth/validator.rs`.

use serde::{Deserialize, Serialize};
use url::Url;

use super::{ConfigError, IdpConfig, names::check_client_name};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Base address of the identity provider; issuer = `{auth_url}/realms/<org>`.
    /// When unset, the server's own address (the embedded provider) is used.
    pub auth_url: Option<Url>,
    /// Audience of the Org and DailyRun APIs; zones use `{api_client}_<zone>`.
    pub api_client: String,
    /// The public command-line clients of the PKCE flow: the spec's `svc_cli`
    /// and the Comotion SDK's `comotion_cli` by default.
    pub cli_clients: Vec<String>,
    /// Signature algorithms accepted on access tokens; asymmetric ones only.
    pub allowed_algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, at most 30 seconds.
    pub leeway_s: u64,
    /// An access token whose `exp` is further ahead than this is refused:
    /// a stolen token must not stay good for years.
    pub max_token_lifetime_s: u64,
    /// An unknown `kid` triggers at most one JWKS refetch per realm in this window.
    pub jwks_refetch_cooldown_s: u64,
    /// A realm's keys are refetched when older than this, whatever the kids.
    pub jwks_max_age_s: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            auth_url: None,
            api_client: "svc_api".into(),
            cli_clients: vec!["svc_cli".into(), "comotion_cli".into()],
            allowed_algorithms: vec!["RS256".into()],
            leeway_s: 30,
            max_token_lifetime_s: 86_400,
            jwks_refetch_cooldown_s: 30,
            jwks_max_age_s: 900,
        }
    }
}

/// Longest clock skew the validator may tolerate (issue: "at most 30 s leeway").
pub const MAX_LEEWAY_S: u64 = 30;

/// Algorithms a resource server may accept: asymmetric signatures only, never
/// `none` or HMAC (RFC 8725 section 3.1).
pub const ASYMMETRIC_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
];

impl AuthConfig {
    /// The audience and role-holder client of a zone's API: `{api_client}_<zone>`.
    pub fn zone_client(&self, zone: &str) -> String {
        format!("{}_{zone}", self.api_client)
    }

    /// The client of the Org API (`zone` `None`) or of a Zone API: the
    /// audience its tokens carry, and whose roles count there.
    pub fn api_client_for(&self, zone: Option<&str>) -> String {
        match zone {
            Some(zone) => self.zone_client(zone),
            None => self.api_client.clone(),
        }
    }

    /// Checks the section; `idp` because no token the embedded provider signs
    /// may outlive `max_token_lifetime_s`.
    pub(super) fn validate(&self, idp: &IdpConfig) -> Result<(), ConfigError> {
        if let Some(url) = &self.auth_url
            && (!matches!(url.scheme(), "http" | "https") || url.host().is_none())
        {
            return Err(ConfigError::new(
                "auth.auth_url",
                "must be an http(s) URL with a host",
            ));
        }
        check_client_name("auth.api_client", &self.api_client)?;
        if self.cli_clients.is_empty() {
            return Err(ConfigError::new(
                "auth.cli_clients",
                "must name at least one client (the PKCE login needs one)",
            ));
        }
        for (i, client) in self.cli_clients.iter().enumerate() {
            check_client_name(&format!("auth.cli_clients[{i}]"), client)?;
        }
        if self.allowed_algorithms.is_empty() {
            return Err(ConfigError::new(
                "auth.allowed_algorithms",
                "must name at least one algorithm",
            ));
        }
        for (i, alg) in self.allowed_algorithms.iter().enumerate() {
            if !ASYMMETRIC_ALGORITHMS.contains(&alg.as_str()) {
                return Err(ConfigError::new(
                    format!("auth.allowed_algorithms[{i}]"),
                    format!(
                        "`{alg}` is not allowed; choose from {}",
                        ASYMMETRIC_ALGORITHMS.join(", ")
                    ),
                ));
            }
        }
        if self.leeway_s > MAX_LEEWAY_S {
            return Err(ConfigError::new(
                "auth.leeway_s",
                format!("must be at most {MAX_LEEWAY_S}"),
            ));
        }
        if self.max_token_lifetime_s < idp.access_token_lifetime_s {
            return Err(ConfigError::new(
                "auth.max_token_lifetime_s",
                "must be at least idp.access_token_lifetime_s (the embedded provider's tokens)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_refused_at;

    #[test]
    fn bad_values_name_the_key() {
        assert_refused_at(&[
            (
                "[auth]\nallowed_algorithms = [\"HS256\"]",
                "auth.allowed_algorithms[0]",
            ),
            ("[auth]\nleeway_s = 31", "auth.leeway_s"),
            (
                "[auth]\nmax_token_lifetime_s = 299",
                "auth.max_token_lifetime_s",
            ),
        ]);
    }
}
