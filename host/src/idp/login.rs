//! The authorization-code flow with PKCE for the command-line client (spec "Token
//! as a user"): the authorization endpoint shows a login page, a successful login
//! redirects to `http://localhost:<port>` with a one-time code, and the token
//! endpoint exchanges the code for tokens when the `code_verifier` matches.
//!
//! Only S256 challenges, only the configured public CLI clients, only loopback
//! redirect addresses. Codes live 60 seconds in the shared store (by their
//! hash), so a code issued by one replica is exchanged at any; they are
//! single use (the exchange deletes the code's row, and only the exchange
//! whose delete removed it goes on; a failed exchange burns the code too).
//! Expired codes are deleted by the retention sweep (`retention/`).

use std::sync::Arc;

use axum::{
    Form,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::{Html, IntoResponse, Redirect, Response},
};
use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::RngCore as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;
use url::Url;

use super::{Idp, OAuthError, TokenRequest, granted_scopes, tokens::Subject};
use crate::store::idp::IdpCodeRow;

/// How long a code may wait for its exchange, in microseconds.
const CODE_LIFETIME_US: i64 = 60 * 1_000_000;

/// The key a code is stored under: its SHA-256, so the store never holds a
/// code that could be redeemed.
pub(super) fn code_hash(code: &str) -> String {
    hex::encode(Sha256::digest(code.as_bytes()))
}

/// The parameters of an authorization request, carried through the login form.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct AuthorizeParams {
    client_id: Option<String>,
    response_type: Option<String>,
    redirect_uri: Option<String>,
    scope: Option<String>,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    #[serde(flatten)]
    params: AuthorizeParams,
    username: Option<String>,
    password: Option<String>,
}

/// An authorization request that may proceed to login.
struct CheckedRequest {
    redirect_uri: Url,
}

/// Why an authorization request cannot proceed.
enum Refusal {
    /// Shown on a page: never sent to an unchecked redirect address.
    Page(StatusCode, &'static str),
    /// Reported back to the (already checked) client redirect address.
    Redirect(Url),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Page(status, message) => {
                let body = format!(
                    "<!doctype html><title>lakehost login</title><h1>Login error</h1><p>{}</p>",
                    html_escape(message)
                );
                (status, Html(body)).into_response()
            }
            Refusal::Redirect(url) => Redirect::to(url.as_str()).into_response(),
        }
    }
}

fn error_page(status: StatusCode, message: &'static str) -> Refusal {
    Refusal::Page(status, message)
}

fn error_redirect(
    redirect_uri: &Url,
    error: &str,
    description: &str,
    state: Option<&str>,
) -> Refusal {
    let mut url = redirect_uri.clone();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("error", error);
        q.append_pair("error_description", description);
        if let Some(state) = state {
            q.append_pair("state", state);
        }
    }
    Refusal::Redirect(url)
}

/// A redirect address for a native client: http, a loopback host, an explicit
/// port, no fragment (RFC 8252 section 7.3).
fn loopback_redirect(uri: &str) -> Option<Url> {
    let url = Url::parse(uri).ok()?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    (url.scheme() == "http" && loopback && url.port().is_some() && url.fragment().is_none())
        .then_some(url)
}

fn check_request(idp: &Idp, org: &str, p: &AuthorizeParams) -> Result<CheckedRequest, Refusal> {
    if idp.realm(org).is_err() {
        return Err(error_page(StatusCode::NOT_FOUND, "Realm does not exist"));
    }
    let known_client = p
        .client_id
        .as_ref()
        .is_some_and(|id| idp.config.auth.cli_clients.contains(id));
    if !known_client {
        return Err(error_page(StatusCode::BAD_REQUEST, "Client not found."));
    }
    let redirect_uri = p
        .redirect_uri
        .as_deref()
        .and_then(loopback_redirect)
        .ok_or_else(|| {
            error_page(
                StatusCode::BAD_REQUEST,
                "Invalid parameter: redirect_uri (must be http://localhost:<port>)",
            )
        })?;
    let state = p.state.as_deref();
    if p.response_type.as_deref() != Some("code") {
        return Err(error_redirect(
            &redirect_uri,
            "unsupported_response_type",
            "Only response_type=code is supported",
            state,
        ));
    }
    if p.code_challenge_method.as_deref() != Some("S256") {
        return Err(error_redirect(
            &redirect_uri,
            "invalid_request",
            "Missing parameter: code_challenge_method (must be S256)",
            state,
        ));
    }
    let challenge_ok = p
        .code_challenge
        .as_deref()
        .is_some_and(|c| c.len() == 43 && URL_SAFE_NO_PAD.decode(c).is_ok());
    if !challenge_ok {
        return Err(error_redirect(
            &redirect_uri,
            "invalid_request",
            "Invalid parameter: code_challenge",
            state,
        ));
    }
    Ok(CheckedRequest { redirect_uri })
}

pub(crate) async fn authorize_page(
    State(idp): State<Arc<Idp>>,
    Path(org): Path<String>,
    Query(params): Query<AuthorizeParams>,
) -> Response {
    match check_request(&idp, &org, &params) {
        Ok(_) => login_page(&org, &params, None, StatusCode::OK),
        Err(refusal) => refusal.into_response(),
    }
}

pub(crate) async fn login(
    State(idp): State<Arc<Idp>>,
    Path(org): Path<String>,
    Form(form): Form<LoginForm>,
) -> Response {
    let checked = match check_request(&idp, &org, &form.params) {
        Ok(checked) => checked,
        Err(refusal) => return refusal.into_response(),
    };
    let username = form.username.clone().unwrap_or_default();
    let password = form.password.clone().unwrap_or_default();
    let user_ok = idp.user(&org, &username).is_some_and(|user| {
        let expected = user.password.as_deref().unwrap_or_default();
        bool::from(expected.as_bytes().ct_eq(password.as_bytes()))
    });
    if !user_ok {
        return login_page(
            &org,
            &form.params,
            Some("Invalid username or password."),
            StatusCode::UNAUTHORIZED,
        );
    }
    let p = &form.params;
    let code = {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        URL_SAFE_NO_PAD.encode(bytes)
    };
    let now = idp.clock.now().timestamp_micros();
    let pending = IdpCodeRow {
        org: org.clone(),
        client_id: p.client_id.clone().unwrap_or_default(),
        redirect_uri: p.redirect_uri.clone().unwrap_or_default(),
        code_challenge: p.code_challenge.clone().unwrap_or_default(),
        username,
        scope: p.scope.clone().unwrap_or_else(|| "openid".into()),
        nonce: p.nonce.clone(),
        expires_at: now + CODE_LIFETIME_US,
    };
    let stored = idp.store.insert_idp_code(&code_hash(&code), &pending).await;
    if let Err(error) = stored {
        tracing::error!(%error, "the identity provider cannot store a login code");
        return error_page(StatusCode::INTERNAL_SERVER_ERROR, "Internal error.").into_response();
    }
    let mut url = checked.redirect_uri;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("code", &code);
        if let Some(state) = &p.state {
            q.append_pair("state", state);
        }
        q.append_pair("iss", &idp.issuer(&org));
    }
    Redirect::to(url.as_str()).into_response()
}

/// `grant_type=authorization_code`: checks client, redirect address, expiry and
/// the PKCE verifier, then issues access, refresh and ID tokens.
pub(crate) async fn exchange_code(
    idp: &Idp,
    org: &str,
    request: &TokenRequest,
) -> Result<Response, OAuthError> {
    let missing = |name: &str| OAuthError::InvalidRequest(format!("Missing parameter: {name}"));
    let code = request.code.as_deref().ok_or_else(|| missing("code"))?;
    let verifier = request
        .code_verifier
        .as_deref()
        .ok_or_else(|| missing("code_verifier"))?;
    let client_id = request
        .client_id
        .as_deref()
        .ok_or_else(|| missing("client_id"))?;
    let pending = idp
        .store
        .take_idp_code(&code_hash(code))
        .await?
        .ok_or_else(|| OAuthError::InvalidGrant("Code not valid".into()))?;
    if pending.org != org || pending.expires_at < idp.clock.now().timestamp_micros() {
        return Err(OAuthError::InvalidGrant("Code not valid".into()));
    }
    if pending.client_id != client_id {
        return Err(OAuthError::InvalidGrant(
            "Code was issued to another client".into(),
        ));
    }
    if request.redirect_uri.as_deref() != Some(pending.redirect_uri.as_str()) {
        return Err(OAuthError::InvalidGrant("Incorrect redirect_uri".into()));
    }
    if !verifier_matches(verifier, &pending.code_challenge) {
        return Err(OAuthError::InvalidGrant("PKCE verification failed".into()));
    }
    let user = idp
        .user(org, &pending.username)
        .ok_or_else(|| OAuthError::InvalidGrant("User no longer exists".into()))?;
    let subject = Subject {
        principal: user,
        authorized_party: client_id,
        scopes: granted_scopes(user, Some(&pending.scope), true),
    };
    idp.token_response(org, &subject, true, pending.nonce.as_deref())
        .await
}

/// RFC 7636: a 43..128 character verifier whose S256 hash is the challenge.
fn verifier_matches(verifier: &str, challenge: &str) -> bool {
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    well_formed && bool::from(computed.as_bytes().ct_eq(challenge.as_bytes()))
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn login_page(org: &str, p: &AuthorizeParams, error: Option<&str>, status: StatusCode) -> Response {
    let hidden = [
        ("client_id", &p.client_id),
        ("response_type", &p.response_type),
        ("redirect_uri", &p.redirect_uri),
        ("scope", &p.scope),
        ("state", &p.state),
        ("nonce", &p.nonce),
        ("code_challenge", &p.code_challenge),
        ("code_challenge_method", &p.code_challenge_method),
    ]
    .iter()
    .filter_map(|(name, value)| {
        value.as_ref().map(|v| {
            format!(
                r#"<input type="hidden" name="{name}" value="{}">"#,
                html_escape(v)
            )
        })
    })
    .collect::<String>();
    let error = error
        .map(|e| format!(r#"<p role="alert">{}</p>"#, html_escape(e)))
        .unwrap_or_default();
    let body = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to {org}</title></head>
<body><h1>Sign in to {org}</h1>{error}
<form method="post">{hidden}
<label>Username <input name="username" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form></body></html>"#,
        org = html_escape(org),
    );
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        [(header::X_FRAME_OPTIONS, "DENY")],
        Html(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256() {
        // Challenge computed independently (Python hashlib + base64).
        let verifier = "dBjftJeZ4CVP-mB92K9uhyUzaO8ohjh8mYx3QhXr0nk";
        let challenge = "s0nSaXlfYHBH6JR7Qo6aFVz8bG5w1gUUTFOXPJCUUNw";
        assert!(verifier_matches(verifier, challenge));
        assert!(!verifier_matches(
            "dBjftJeZ4CVP-mB92K9uhyUzaO8ohjh8mYx3QhXr0nK",
            challenge
        ));
        assert!(!verifier_matches("short", challenge));
    }

    #[test]
    fn redirects_are_loopback_only() {
        assert!(loopback_redirect("http://localhost:8400/cb").is_some());
        assert!(loopback_redirect("http://127.0.0.1:8400").is_some());
        for bad in [
            "https://localhost:8400",
            "http://localhost",
            "http://evil.example:8400",
            "http://localhost:8400/#x",
            "http://localhost.evil.example:1",
        ] {
            assert!(loopback_redirect(bad).is_none(), "{bad}");
        }
    }
}
