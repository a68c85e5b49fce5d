//! Per-realm signing keys, found by OIDC discovery and cached.
//!
//! Every realm URL is built from configuration (`auth_url` and a configured org
//! name), never from a token. The discovery document must name the expected
//! issuer and a `jwks_uri` on the identity provider's own origin. Keys are kept
//! per realm; an unknown `kid` refetches the JWKS at most once per cooldown, so a
//! stream of forged kids cannot turn the server into a request amplifier. While
//! the provider is unreachable, keys already fetched keep working.

use std::{collections::HashMap, sync::Arc, time::Duration as StdDuration};

use chrono::{DateTime, Duration, Utc};
use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{Jwk, JwkSet, PublicKeyUse},
};
use serde::Deserialize;
use tokio::sync::Mutex;
use url::Url;

use crate::{
    clock::SharedClock,
    observability::metrics::{self, JwksFetch},
};

/// Largest discovery or JWKS document accepted.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Time limit of one request to the identity provider.
const FETCH_TIMEOUT: StdDuration = StdDuration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("no key with this kid in the realm's JWKS")]
    UnknownKid,
    #[error("the realm's keys cannot be fetched: {0}")]
    Unavailable(#[source] NoKeysYet),
}

/// A realm none of whose keys were ever fetched, with why the last fetch
/// failed (none when no fetch was tried: the cooldown holds it back).
#[derive(Debug, thiserror::Error)]
#[error("no keys fetched yet for realm {org}")]
pub struct NoKeysYet {
    org: String,
    #[source]
    last_failure: Option<Arc<JwksError>>,
}

/// Why discovery or the JWKS of a realm could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("discovery names issuer {found:?}, expected {expected:?}")]
    IssuerMismatch { found: String, expected: String },
    #[error("bad jwks_uri: {0}")]
    BadJwksUri(#[source] url::ParseError),
    #[error("jwks_uri {0} is not on the identity provider's origin")]
    WrongOrigin(Url),
    /// reqwest's own text ("error sending request") hides why (a
    /// certificate nobody trusts, a refused connection): the text names
    /// its causes too, which is what an operator needs.
    #[error("GET {url}: {}", with_causes(source))]
    RequestFailed {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("GET {url}: status {status}")]
    BadStatus {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("GET {url}: document larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge { url: String },
    #[error("GET {url}: not the expected JSON: {source}")]
    NotJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A key that may verify tokens, with the algorithm its JWK pins (if any).
#[derive(Clone)]
pub struct VerifyingKey {
    pub key: DecodingKey,
    pub algorithm: Option<Algorithm>,
}

#[derive(Default)]
struct RealmKeys {
    keys: HashMap<String, VerifyingKey>,
    jwks_uri: Option<Url>,
    /// When keys were last fetched successfully.
    fetched_at: Option<DateTime<Utc>>,
    /// When a fetch was last tried, successful or not (for the cooldown).
    attempted_at: Option<DateTime<Utc>>,
    /// A failed fetch was logged as a warning since the last success: the
    /// next ones go to the debug log (one warning per outage, with why).
    warned: bool,
    /// Why the last fetch failed, since the last success.
    last_failure: Option<Arc<JwksError>>,
}

/// The cache of all realms' keys.
pub struct JwksCache {
    http: reqwest::Client,
    clock: SharedClock,
    auth_url: Url,
    cooldown: Duration,
    max_age: Duration,
    realms: std::sync::Mutex<HashMap<String, Arc<Mutex<RealmKeys>>>>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl JwksCache {
    pub fn new(
        auth_url: Url,
        clock: SharedClock,
        cooldown_s: u64,
        max_age_s: u64,
        extra_root_pem: Option<&[u8]>,
    ) -> Result<Self, reqwest::Error> {
        let mut http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = extra_root_pem {
            http = http.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
        }
        let http = http.build()?;
        Ok(Self {
            http,
            clock,
            auth_url,
            cooldown: Duration::seconds(cooldown_s as i64),
            max_age: Duration::seconds(max_age_s as i64),
            realms: Default::default(),
        })
    }

    /// The issuer of a configured org's realm: `{auth_url}/realms/<org>`.
    pub fn issuer(&self, org: &str) -> String {
        realm_issuer(&self.auth_url, org)
    }

    /// The client that reaches the identity provider (its timeout, no
    /// redirects, the server's own certificate trusted when it serves it).
    pub fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// The key `kid` of `org`'s realm. `org` must be a configured org.
    pub async fn key(&self, org: &str, kid: &str) -> Result<VerifyingKey, KeyError> {
        let realm = {
            let mut realms = self.realms.lock().expect("realm map lock poisoned");
            realms.entry(org.to_string()).or_default().clone()
        };
        // One fetch at a time per realm: concurrent requests wait for it.
        let mut realm = realm.lock().await;
        let now = self.clock.now();
        let stale = realm.fetched_at.is_none_or(|at| now - at >= self.max_age);
        let may_retry = realm
            .attempted_at
            .is_none_or(|at| now - at >= self.cooldown);
        if stale && may_retry {
            self.refresh(org, &mut realm, JwksFetch::Stale).await;
        }
        if let Some(key) = realm.keys.get(kid) {
            return Ok(key.clone());
        }
        let now = self.clock.now();
        if realm
            .attempted_at
            .is_none_or(|at| now - at >= self.cooldown)
        {
            self.refresh(org, &mut realm, JwksFetch::UnknownKid).await;
            if let Some(key) = realm.keys.get(kid) {
                return Ok(key.clone());
            }
        }
        if realm.fetched_at.is_none() {
            return Err(KeyError::Unavailable(NoKeysYet {
                org: org.to_string(),
                last_failure: realm.last_failure.clone(),
            }));
        }
        Err(KeyError::UnknownKid)
    }

    /// Fetches discovery (first time) and the JWKS; on failure keeps old keys.
    async fn refresh(&self, org: &str, realm: &mut RealmKeys, why: JwksFetch) {
        realm.attempted_at = Some(self.clock.now());
        let fetched = self.fetch(org, realm.jwks_uri.clone()).await;
        metrics::jwks_fetched(why, fetched.is_ok());
        match fetched {
            Ok((jwks_uri, keys)) => {
                realm.jwks_uri = Some(jwks_uri);
                realm.keys = keys;
                realm.fetched_at = Some(self.clock.now());
                realm.warned = false;
                realm.last_failure = None;
            }
            Err(e) => {
                if realm.warned {
                    tracing::debug!(realm = org, error = %e, "fetching signing keys failed again")
                } else {
                    realm.warned = true;
                    tracing::warn!(
                        realm = org,
                        error = %e,
                        "fetching signing keys failed: tokens of this realm are refused until \
                         it succeeds (later failures are logged at debug level)"
                    );
                }
                realm.last_failure = Some(Arc::new(e));
            }
        }
    }

    async fn fetch(
        &self,
        org: &str,
        known_jwks_uri: Option<Url>,
    ) -> Result<(Url, HashMap<String, VerifyingKey>), JwksError> {
        let issuer = self.issuer(org);
        let jwks_uri = match known_jwks_uri {
            Some(uri) => uri,
            None => {
                let discovery_url = format!("{issuer}/.well-known/openid-configuration");
                let doc: Discovery = self.get_json(&discovery_url).await?;
                if doc.issuer != issuer {
                    return Err(JwksError::IssuerMismatch {
                        found: doc.issuer,
                        expected: issuer,
                    });
                }
                let uri = Url::parse(&doc.jwks_uri).map_err(JwksError::BadJwksUri)?;
                if uri.origin() != self.auth_url.origin() {
                    return Err(JwksError::WrongOrigin(uri));
                }
                uri
            }
        };
        let set: JwkSet = self.get_json(jwks_uri.as_str()).await?;
        let keys = set
            .keys
            .iter()
            .filter_map(|jwk| Some((jwk.common.key_id.clone()?, usable_key(jwk)?)))
            .collect();
        Ok((jwks_uri, keys))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, JwksError> {
        let failed = |source| JwksError::RequestFailed {
            url: url.to_string(),
            source,
        };
        let mut response = self.http.get(url).send().await.map_err(failed)?;
        if !response.status().is_success() {
            return Err(JwksError::BadStatus {
                url: url.to_string(),
                status: response.status(),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DOCUMENT_BYTES {
                return Err(JwksError::TooLarge {
                    url: url.to_string(),
                });
            }
        }
        serde_json::from_slice(&body).map_err(|source| JwksError::NotJson {
            url: url.to_string(),
            source,
        })
    }
}

/// `{auth_url}/realms/<org>` without a doubled slash.
pub fn realm_issuer(auth_url: &Url, org: &str) -> String {
    format!("{}/realms/{org}", auth_url.as_str().trim_end_matches('/'))
}

/// A JWK usable for signatures: `use` absent or `sig`, a key type we can read.
fn usable_key(jwk: &Jwk) -> Option<VerifyingKey> {
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    // A symmetric key published in a JWKS is a misconfiguration; never verify with it.
    if key.family() == jsonwebtoken::AlgorithmFamily::Hmac {
        return None;
    }
    let algorithm = match jwk.common.key_algorithm {
        Some(alg) => Some(alg.to_string().parse::<Algorithm>().ok()?),
        None => None,
    };
    Some(VerifyingKey { key, algorithm })
}

/// `error` and each of its causes, as one line.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = e.source();
    }
    text
}
