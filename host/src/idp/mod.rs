//! The embedded development identity provider, answering Keycloak's paths under
//! `/realms/<org>/`: discovery, JWKS, the token endpoint (client_credentials,
//! refresh_token, authorization_code with PKCE S256) and the authorization
//! endpoint with a login page for the users of the config.
//!
//! It exists so that nothing outside is needed on a laptop. The API's validator
//! does not know it is there: it uses discovery and JWKS over HTTP as it would
//! with an external Keycloak. This module never touches the validator.
//!
//! Behind a balancer every replica is the same provider: the realms' signing
//! keys (`realm.rs`) and the login flow's pending codes (`login.rs`) live in
//! the shared store, and the issuer is `auth.auth_url`'s (the balancer's
//! address when set, so every replica names the same `iss`; unset, each
//! replica names its own address, which suits one replica only).

mod keys;
mod login;
mod realm;
mod tokens;

#[cfg(test)]
mod replica_tests;

pub use keys::{StoredKey, generate_key, key_file_path, read_key_file, write_key_file};

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{
    Form, Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine as _, engine::general_purpose::STANDARD};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq as _;
use url::Url;

use crate::{
    auth::jwks::realm_issuer,
    clock::SharedClock,
    config::{Config, IdpPrincipal},
    store::Store,
};
pub use keys::KeyStoreError;
use realm::{KeyPolicy, RealmKeys};
use tokens::{Minter, Subject};

/// The embedded provider: per-realm keys and pending authorization codes,
/// both in the shared store.
pub struct Idp {
    config: Arc<Config>,
    auth_url: Url,
    clock: SharedClock,
    store: Store,
    realms: HashMap<String, RealmKeys>,
    jwks_requests: HashMap<String, AtomicU64>,
}

impl Idp {
    /// Opens every configured org's signing keys in the store: a realm
    /// without any gets its key file's (`data_dir/idp/<org>/signing-keys.json`,
    /// an older version's) or a new one.
    pub async fn new(
        config: Arc<Config>,
        auth_url: Url,
        clock: SharedClock,
        store: Store,
    ) -> Result<Self, KeyStoreError> {
        let policy = KeyPolicy::of(&config.idp);
        let mut realms = HashMap::new();
        let mut jwks_requests = HashMap::new();
        for org in &config.orgs {
            let file = key_file_path(&config.storage.data_dir, &org.name);
            let keys = RealmKeys::open(&org.name, store.clone(), file, policy, clock.now()).await?;
            realms.insert(org.name.clone(), keys);
            jwks_requests.insert(org.name.clone(), AtomicU64::new(0));
        }
        Ok(Self {
            config,
            auth_url,
            clock,
            store,
            realms,
            jwks_requests,
        })
    }

    /// How many times a realm's JWKS was served (observability and tests).
    pub fn jwks_requests(&self, org: &str) -> u64 {
        self.jwks_requests
            .get(org)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn issuer(&self, org: &str) -> String {
        realm_issuer(&self.auth_url, org)
    }

    fn realm(&self, org: &str) -> Result<&RealmKeys, OAuthError> {
        self.realms.get(org).ok_or(OAuthError::UnknownRealm)
    }

    fn client(&self, org: &str, client_id: &str) -> Option<&IdpPrincipal> {
        self.config
            .idp
            .clients
            .iter()
            .find(|c| c.org == org && c.client_id.as_deref() == Some(client_id))
    }

    fn user(&self, org: &str, username: &str) -> Option<&IdpPrincipal> {
        self.config
            .idp
            .users
            .iter()
            .find(|u| u.org == org && u.username.as_deref() == Some(username))
    }

    /// Issues the token response for a subject; with `refresh` also a refresh
    /// token and (when `openid` was asked) an ID token.
    async fn token_response(
        &self,
        org: &str,
        subject: &Subject<'_>,
        refresh: bool,
        nonce: Option<&str>,
    ) -> Result<Response, OAuthError> {
        let lifetimes = &self.config.idp;
        let issuer = self.issuer(org);
        let minter = Minter {
            issuer: &issuer,
            now: self.clock.unix_seconds(),
        };
        let keys = self.realm(org)?.view(self.clock.now()).await?;
        let key = keys.signer();
        let access = minter.access_token(key, org, subject, lifetimes.access_token_lifetime_s)?;
        let mut body = json!({
            "access_token": access,
            "expires_in": lifetimes.access_token_lifetime_s,
            "token_type": "Bearer",
            "not-before-policy": 0,
            "scope": subject.scopes.join(" "),
            "refresh_expires_in": 0,
        });
        if refresh {
            body["refresh_token"] = json!(minter.refresh_token(
                key,
                org,
                subject,
                lifetimes.refresh_token_lifetime_s
            )?);
            body["refresh_expires_in"] = json!(lifetimes.refresh_token_lifetime_s);
            if subject.scopes.iter().any(|s| s == "openid") {
                body["id_token"] = json!(minter.id_token(
                    key,
                    org,
                    subject,
                    nonce,
                    lifetimes.access_token_lifetime_s
                )?);
            }
        }
        Ok(no_store(Json(body)))
    }
}

/// The provider's routes; served on the bare host (see `api::routing`), each
/// also under `/auth` (Keycloak's legacy prefix, which the Comotion SDK builds
/// its URLs with: `/auth/realms/<org>/...`).
pub fn router(idp: Arc<Idp>) -> Router {
    let realms = realm_routes(idp);
    Router::new().merge(realms.clone()).nest("/auth", realms)
}

fn realm_routes(idp: Arc<Idp>) -> Router {
    Router::new()
        .route(
            "/realms/{org}/.well-known/openid-configuration",
            get(discovery),
        )
        .route("/realms/{org}/protocol/openid-connect/certs", get(certs))
        .route("/realms/{org}/protocol/openid-connect/token", post(token))
        .route(
            "/realms/{org}/protocol/openid-connect/auth",
            get(login::authorize_page).post(login::login),
        )
        .with_state(idp)
}

/// OAuth errors in Keycloak's shape: `{"error", "error_description"}`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OAuthError {
    #[error("Realm does not exist")]
    UnknownRealm,
    #[error("{0}")]
    InvalidRequest(String),
    #[error("Invalid client or Invalid client credentials")]
    InvalidClient,
    #[error("{0}")]
    InvalidGrant(String),
    #[error("Unsupported grant_type")]
    UnsupportedGrantType,
    /// Boxed, as `Store`: key errors carry a path and a parse error.
    #[error(transparent)]
    Keys(Box<KeyStoreError>),
    /// The login flow's codes could not be read or written (boxed: the
    /// store's errors are large, and this one is rare).
    #[error(transparent)]
    Store(Box<crate::store::Error>),
}

impl From<KeyStoreError> for OAuthError {
    fn from(error: KeyStoreError) -> Self {
        OAuthError::Keys(Box::new(error))
    }
}

impl From<crate::store::Error> for OAuthError {
    fn from(error: crate::store::Error) -> Self {
        OAuthError::Store(Box::new(error))
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let (status, error) = match &self {
            OAuthError::UnknownRealm => (StatusCode::NOT_FOUND, "Realm does not exist"),
            OAuthError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            OAuthError::InvalidClient => (StatusCode::UNAUTHORIZED, "invalid_client"),
            OAuthError::InvalidGrant(_) => (StatusCode::BAD_REQUEST, "invalid_grant"),
            OAuthError::UnsupportedGrantType => (StatusCode::BAD_REQUEST, "unsupported_grant_type"),
            OAuthError::Keys(e) => {
                tracing::error!(error = %e, "identity provider key store failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
            OAuthError::Store(e) => {
                tracing::error!(error = %e, "identity provider store failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
        };
        let description = match &self {
            OAuthError::Keys(_) | OAuthError::Store(_) => "internal error".to_string(),
            other => other.to_string(),
        };
        (
            status,
            no_store(Json(
                json!({ "error": error, "error_description": description }),
            )),
        )
            .into_response()
    }
}

fn no_store(body: impl IntoResponse) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], body).into_response()
}

async fn discovery(
    State(idp): State<Arc<Idp>>,
    Path(org): Path<String>,
) -> Result<Response, OAuthError> {
    idp.realm(&org)?;
    let issuer = idp.issuer(&org);
    let endpoint = |p: &str| format!("{issuer}/protocol/openid-connect/{p}");
    Ok(Json(json!({
        "issuer": issuer,
        "authorization_endpoint": endpoint("auth"),
        "token_endpoint": endpoint("token"),
        "jwks_uri": endpoint("certs"),
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid"],
    }))
    .into_response())
}

async fn certs(
    State(idp): State<Arc<Idp>>,
    Path(org): Path<String>,
) -> Result<Response, OAuthError> {
    let realm = idp.realm(&org)?;
    if let Some(counter) = idp.jwks_requests.get(&org) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    let jwks = realm.view(idp.clock.now()).await?.jwks();
    Ok(Json(jwks).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct TokenRequest {
    grant_type: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    scope: Option<String>,
    refresh_token: Option<String>,
    code: Option<String>,
    code_verifier: Option<String>,
    redirect_uri: Option<String>,
}

async fn token(
    State(idp): State<Arc<Idp>>,
    Path(org): Path<String>,
    headers: HeaderMap,
    Form(request): Form<TokenRequest>,
) -> Result<Response, OAuthError> {
    idp.realm(&org)?;
    match request.grant_type.as_deref() {
        Some("client_credentials") => client_credentials(&idp, &org, &headers, &request).await,
        Some("refresh_token") => refresh(&idp, &org, &request).await,
        Some("authorization_code") => login::exchange_code(&idp, &org, &request).await,
        Some(_) => Err(OAuthError::UnsupportedGrantType),
        None => Err(OAuthError::InvalidRequest(
            "Missing form parameter: grant_type".into(),
        )),
    }
}

/// Client id and secret from HTTP Basic or the form.
fn client_credentials_of(headers: &HeaderMap, request: &TokenRequest) -> Option<(String, String)> {
    if let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let decoded = STANDARD.decode(basic.trim()).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (id, secret) = text.split_once(':')?;
        return Some((id.to_string(), secret.to_string()));
    }
    Some((request.client_id.clone()?, request.client_secret.clone()?))
}

async fn client_credentials(
    idp: &Idp,
    org: &str,
    headers: &HeaderMap,
    request: &TokenRequest,
) -> Result<Response, OAuthError> {
    let (client_id, secret) =
        client_credentials_of(headers, request).ok_or(OAuthError::InvalidClient)?;
    let client = idp
        .client(org, &client_id)
        .ok_or(OAuthError::InvalidClient)?;
    let expected = client.client_secret.as_deref().unwrap_or_default();
    if !bool::from(expected.as_bytes().ct_eq(secret.as_bytes())) {
        return Err(OAuthError::InvalidClient);
    }
    let subject = Subject {
        principal: client,
        authorized_party: &client_id,
        scopes: granted_scopes(client, request.scope.as_deref(), false),
    };
    idp.token_response(org, &subject, false, None).await
}

async fn refresh(idp: &Idp, org: &str, request: &TokenRequest) -> Result<Response, OAuthError> {
    let client_id = request
        .client_id
        .as_deref()
        .ok_or_else(|| OAuthError::InvalidRequest("Missing parameter: client_id".into()))?;
    let token = request
        .refresh_token
        .as_deref()
        .ok_or_else(|| OAuthError::InvalidRequest("Missing parameter: refresh_token".into()))?;
    let invalid = || OAuthError::InvalidGrant("Invalid refresh token".into());
    let keys = idp.realm(org)?.view(idp.clock.now()).await?;
    let claims = tokens::read_refresh_token(
        keys.all(),
        &idp.issuer(org),
        token,
        idp.clock.unix_seconds(),
    )
    .ok_or_else(invalid)?;
    if claims.get("azp").and_then(|v| v.as_str()) != Some(client_id) {
        return Err(OAuthError::InvalidGrant(
            "Token client and authorized client don't match".into(),
        ));
    }
    let login = claims
        .get("preferred_username")
        .and_then(|v| v.as_str())
        .ok_or_else(invalid)?;
    // Roles and service clients come from the current config, so changes apply
    // at the next refresh.
    let principal = idp
        .user(org, login)
        .or_else(|| idp.client(org, login))
        .ok_or_else(invalid)?;
    let previous_scope = claims.get("scope").and_then(|v| v.as_str()).unwrap_or("");
    let asked = request.scope.as_deref().unwrap_or(previous_scope);
    let subject = Subject {
        principal,
        authorized_party: client_id,
        scopes: granted_scopes(principal, Some(asked), previous_scope.contains("openid")),
    };
    idp.token_response(org, &subject, true, None).await
}

/// The scopes a token gets: those asked for (all when none are asked) that the
/// principal has, plus `openid` when asked in a login flow.
fn granted_scopes(
    principal: &IdpPrincipal,
    asked: Option<&str>,
    allow_openid: bool,
) -> Vec<String> {
    let asked: Option<Vec<&str>> = asked.map(|s| s.split_ascii_whitespace().collect());
    let mut scopes: Vec<String> = Vec::new();
    if allow_openid && asked.as_ref().is_some_and(|a| a.contains(&"openid")) {
        scopes.push("openid".into());
    }
    for scope in &principal.scopes {
        let wanted = match &asked {
            None => true,
            Some(a) => a.contains(&scope.as_str()) || a.iter().all(|s| *s == "openid"),
        };
        if wanted {
            scopes.push(scope.clone());
        }
    }
    scopes
}
