//! Minting and reading the embedded provider's tokens, shaped like Keycloak's:
//! access tokens (`typ` Bearer) for the APIs, refresh tokens (`typ` Refresh,
//! audience = the issuer, so no API accepts them) and ID tokens.

use std::{collections::BTreeMap, sync::Arc};

use jsonwebtoken::{Algorithm, Header, Validation};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::keys::{KeyStoreError, SigningKey};
use crate::config::IdpPrincipal;

/// Who a token is for, resolved from config.
pub struct Subject<'a> {
    pub principal: &'a IdpPrincipal,
    /// `client_id` that asked (the `azp` claim).
    pub authorized_party: &'a str,
    pub scopes: Vec<String>,
}

/// A stable, opaque subject id per org and login, in Keycloak's UUID shape.
pub fn subject_id(org: &str, kind: &str, login: &str) -> String {
    let digest = Sha256::digest(format!("{org}\0{kind}\0{login}").as_bytes());
    let h = hex::encode(&digest[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn principal_sub(org: &str, p: &IdpPrincipal) -> String {
    match &p.client_id {
        Some(id) => subject_id(org, "service-account", id),
        None => subject_id(org, "user", p.login()),
    }
}

/// `"[12 13]"`, the claim form the spec reads.
pub fn service_client_claim(ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("[{}]", ids.join(" "))
}

/// Signs with the key given: which key signs is the realm's (`realm.rs`).
pub struct Minter<'a> {
    pub issuer: &'a str,
    pub now: i64,
}

impl Minter<'_> {
    fn sign(&self, key: &SigningKey, claims: &Value) -> Result<String, KeyStoreError> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(key.kid.clone());
        header.typ = Some("JWT".into());
        jsonwebtoken::encode(&header, claims, &key.encoding).map_err(KeyStoreError::Sign)
    }

    pub fn access_token(
        &self,
        key: &SigningKey,
        org: &str,
        subject: &Subject<'_>,
        lifetime_s: u64,
    ) -> Result<String, KeyStoreError> {
        let p = subject.principal;
        let resource_access: BTreeMap<&String, Value> = p
            .roles
            .iter()
            .map(|(client, roles)| (client, json!({ "roles": roles })))
            .collect();
        let audiences: Vec<&String> = p.roles.keys().collect();
        let aud = match audiences.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        let claims = json!({
            "iss": self.issuer,
            "sub": principal_sub(org, p),
            "aud": aud,
            "exp": self.now + lifetime_s as i64,
            "iat": self.now,
            "jti": uuid::Uuid::new_v4().to_string(),
            "typ": "Bearer",
            "azp": subject.authorized_party,
            "scope": subject.scopes.join(" "),
            "resource_access": resource_access,
            "service_client_id": service_client_claim(&p.service_clients),
            "preferred_username": p.login(),
        });
        self.sign(key, &claims)
    }

    pub fn refresh_token(
        &self,
        key: &SigningKey,
        org: &str,
        subject: &Subject<'_>,
        lifetime_s: u64,
    ) -> Result<String, KeyStoreError> {
        let claims = json!({
            "iss": self.issuer,
            "sub": principal_sub(org, subject.principal),
            "aud": self.issuer,
            "exp": self.now + lifetime_s as i64,
            "iat": self.now,
            "jti": uuid::Uuid::new_v4().to_string(),
            "typ": "Refresh",
            "azp": subject.authorized_party,
            "scope": subject.scopes.join(" "),
            "preferred_username": subject.principal.login(),
        });
        self.sign(key, &claims)
    }

    pub fn id_token(
        &self,
        key: &SigningKey,
        org: &str,
        subject: &Subject<'_>,
        nonce: Option<&str>,
        lifetime_s: u64,
    ) -> Result<String, KeyStoreError> {
        let mut claims = json!({
            "iss": self.issuer,
            "sub": principal_sub(org, subject.principal),
            "aud": subject.authorized_party,
            "exp": self.now + lifetime_s as i64,
            "iat": self.now,
            "jti": uuid::Uuid::new_v4().to_string(),
            "typ": "ID",
            "azp": subject.authorized_party,
            "preferred_username": subject.principal.login(),
        });
        if let Some(nonce) = nonce {
            claims["nonce"] = json!(nonce);
        }
        self.sign(key, &claims)
    }
}

/// Verifies one of this realm's refresh tokens and returns its claims.
pub fn read_refresh_token(
    keys: &[Arc<SigningKey>],
    issuer: &str,
    token: &str,
    now: i64,
) -> Option<Map<String, Value>> {
    let header = jsonwebtoken::decode_header(token).ok()?;
    if header.alg != Algorithm::RS256 {
        return None;
    }
    let kid = header.kid?;
    let key = keys.iter().find(|k| k.kid == kid)?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_issuer(&[issuer]);
    validation.set_audience(&[issuer]);
    validation.validate_exp = false;
    validation.required_spec_claims = ["iss", "aud", "sub", "exp"].map(String::from).into();
    let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
        .ok()?
        .claims;
    let exp = claims.get("exp")?.as_i64()?;
    (exp >= now && claims.get("typ")?.as_str()? == "Refresh").then_some(claims)
}
