//! The claims handlers read from a verified access token (spec "What each API
//! checks"): `sub`, `jti`, `scope`, `service_client_id`, `resource_access`.
//!
//! Parsing is strict and lazy: a token is accepted by the validator on its
//! signature and registered claims; whether `service_client_id` is well formed is
//! asked by the endpoint that needs it, because the spec answers differently per
//! endpoint (403 on the identity endpoint, 500 on query endpoints).

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::roles::Access;

/// Why a claim a handler needs is unusable. Messages are `api/error.rs`'s job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("no service_client_id claim")]
    MissingServiceClient,
    #[error("no sub claim")]
    MissingSub,
    #[error("no jti claim")]
    MissingJti,
    #[error("no resource_access claim")]
    MissingResourceAccess,
    #[error("no roles for {client} in resource_access")]
    MissingClientRoles { client: String },
    #[error("service_client_id claim in incorrect format: {claim}")]
    MalformedServiceClient { claim: String },
    #[error("service_client_id claim lists no service client")]
    NoServiceClient,
}

/// A verified token's claims.
#[derive(Debug, Clone)]
pub struct AccessClaims {
    claims: Map<String, Value>,
}

impl AccessClaims {
    pub fn new(claims: Map<String, Value>) -> Self {
        Self { claims }
    }

    pub fn raw(&self) -> &Map<String, Value> {
        &self.claims
    }

    fn non_empty_str(&self, name: &str) -> Option<&str> {
        self.claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// The subject. The validator already refuses a token without `sub`; an empty
    /// one reaches handlers and is refused here.
    pub fn sub(&self) -> Result<&str, ClaimError> {
        self.non_empty_str("sub").ok_or(ClaimError::MissingSub)
    }

    pub fn jti(&self) -> Result<&str, ClaimError> {
        self.non_empty_str("jti").ok_or(ClaimError::MissingJti)
    }

    /// The space-separated `scope` claim as a set.
    pub fn scopes(&self) -> BTreeSet<&str> {
        self.claims
            .get("scope")
            .and_then(Value::as_str)
            .map(|s| s.split_ascii_whitespace().collect())
            .unwrap_or_default()
    }

    /// The service clients of the `"[12 13]"` claim, in claim order. An empty
    /// list is an error: a caller must have at least one service client.
    pub fn service_clients(&self) -> Result<Vec<u32>, ClaimError> {
        let value = self
            .claims
            .get("service_client_id")
            .ok_or(ClaimError::MissingServiceClient)?;
        let ids = match value {
            Value::String(text) => parse_service_client_claim(text)?,
            other => {
                return Err(ClaimError::MalformedServiceClient {
                    claim: other.to_string(),
                });
            }
        };
        if ids.is_empty() {
            return Err(ClaimError::NoServiceClient);
        }
        Ok(ids)
    }

    /// The role names in `resource_access.<client>.roles`. A missing entry, a
    /// missing or empty role list, or a list that is not strings are all "no
    /// resource access for this client".
    pub fn roles_for(&self, client: &str) -> Result<Vec<String>, ClaimError> {
        let resource_access = self
            .claims
            .get("resource_access")
            .and_then(Value::as_object)
            .ok_or(ClaimError::MissingResourceAccess)?;
        let missing = || ClaimError::MissingClientRoles {
            client: client.to_string(),
        };
        let roles = resource_access
            .get(client)
            .and_then(|entry| entry.get("roles"))
            .and_then(Value::as_array)
            .ok_or_else(missing)?;
        let names: Option<Vec<String>> = roles
            .iter()
            .map(|r| r.as_str().map(str::to_string))
            .collect();
        names.filter(|n| !n.is_empty()).ok_or_else(missing)
    }

    /// Roles on `client` and the service clients, as the capability table needs.
    pub fn access(&self, client: &str) -> Result<Access, ClaimError> {
        let roles = self.roles_for(client)?;
        let clients = self.service_clients()?;
        Ok(Access::new(roles.iter().map(String::as_str), clients))
    }
}

/// Parses `"[12 13]"`: square brackets around decimal ids separated by single
/// spaces. Anything else (commas, signs, leading zeros, extra spaces, a JSON
/// array) is a format error, never a guess.
pub fn parse_service_client_claim(text: &str) -> Result<Vec<u32>, ClaimError> {
    let malformed = || ClaimError::MalformedServiceClient {
        claim: text.to_string(),
    };
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(malformed)?;
    if inner.is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(' ')
        .map(|part| {
            let canonical = !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part == "0" || !part.starts_with('0'));
            if canonical {
                part.parse::<u32>().map_err(|_| malformed())
            } else {
                Err(malformed())
            }
        })
        .collect()
}

/// A 16-character fingerprint of roles and service clients: equal for equal
/// access, different when either changes. Order and duplicates do not matter.
pub fn access_fingerprint(roles: &[String], service_clients: &[u32]) -> String {
    let roles: BTreeSet<&str> = roles.iter().map(String::as_str).collect();
    let clients: BTreeSet<u32> = service_clients.iter().copied().collect();
    let mut hasher = Sha256::new();
    // Length-prefixed fields: no two different inputs share an encoding.
    hasher.update(b"lakehost-access-v1");
    hasher.update((roles.len() as u64).to_be_bytes());
    for role in roles {
        hasher.update((role.len() as u64).to_be_bytes());
        hasher.update(role.as_bytes());
    }
    hasher.update((clients.len() as u64).to_be_bytes());
    for id in clients {
        hasher.update(id.to_be_bytes());
    }
    hex::encode(hasher.finalize())[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_client_claim_strict_form() {
        assert_eq!(parse_service_client_claim("[12 13]").unwrap(), vec![12, 13]);
        assert_eq!(parse_service_client_claim("[0]").unwrap(), vec![0]);
        assert_eq!(parse_service_client_claim("[]").unwrap(), Vec::<u32>::new());
        for bad in [
            "12 13",
            "[12,13]",
            "[12, 13]",
            "[12  13]",
            "[ 12]",
            "[12 ]",
            "[-1]",
            "[+1]",
            "[012]",
            "[a]",
            "[99999999999]",
            "{12}",
            "[12 13",
            "",
        ] {
            assert!(
                matches!(
                    parse_service_client_claim(bad),
                    Err(ClaimError::MalformedServiceClient { .. })
                ),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn non_string_claim_is_malformed() {
        let claims = AccessClaims::new(
            json!({"service_client_id": [12, 13]})
                .as_object()
                .unwrap()
                .clone(),
        );
        assert_eq!(
            claims.service_clients(),
            Err(ClaimError::MalformedServiceClient {
                claim: "[12,13]".into()
            })
        );
    }

    #[test]
    fn roles_need_a_non_empty_list_for_the_client() {
        let claims = |v: Value| AccessClaims::new(v.as_object().unwrap().clone());
        let missing = ClaimError::MissingClientRoles {
            client: "svc_api".into(),
        };
        assert_eq!(
            claims(json!({})).roles_for("svc_api"),
            Err(ClaimError::MissingResourceAccess)
        );
        assert_eq!(
            claims(json!({"resource_access": {}})).roles_for("svc_api"),
            Err(missing.clone())
        );
        assert_eq!(
            claims(json!({"resource_access": {"svc_api": {"roles": []}}})).roles_for("svc_api"),
            Err(missing.clone())
        );
        assert_eq!(
            claims(json!({"resource_access": {"svc_api": {"roles": [1]}}})).roles_for("svc_api"),
            Err(missing)
        );
        assert_eq!(
            claims(json!({"resource_access": {"svc_api": {"roles": ["ZoneAdmin"]}}}))
                .roles_for("svc_api")
                .unwrap(),
            vec!["ZoneAdmin"]
        );
    }

    #[test]
    fn fingerprint_tracks_roles_and_clients() {
        let base = access_fingerprint(&["ZoneAdmin".into()], &[1, 2]);
        assert_eq!(base.len(), 16);
        assert_eq!(base, access_fingerprint(&["ZoneAdmin".into()], &[2, 1, 1]));
        assert_ne!(
            base,
            access_fingerprint(&["AllServiceClientAnalyst".into()], &[1, 2])
        );
        assert_ne!(base, access_fingerprint(&["ZoneAdmin".into()], &[1, 3]));
        assert_ne!(
            access_fingerprint(&["a".into(), "b".into()], &[]),
            access_fingerprint(&["a\0b".into()], &[])
        );
    }
}
