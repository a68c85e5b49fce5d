//! A client id and secret exchanged for an access token through the org
//! realm's client-credentials flow, for front ends whose clients send a
//! password rather than a token (Flight SQL's basic-auth handshake). The
//! token endpoint is the spec's fixed address under the realm's issuer, for
//! a configured org: no address is built from caller input. The token that
//! comes back is validated like any other before it is used.
//!
//! `exchange_from` is the door for a client on the network: a refused
//! secret counts against the client address's failure budget
//! (`failure_budget.rs`), and an address past it is refused without asking
//! the identity provider.

use std::net::IpAddr;

use serde::Deserialize;

use super::{TokenValidator, failure_budget::Throttled};

/// Why an exchange gave no token.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The identity provider refused the id and secret.
    #[error("the identity provider refused the client credentials")]
    Refused,
    /// The identity provider could not be asked, or answered nonsense.
    #[error("the identity provider could not be reached: {0}")]
    Unavailable(#[source] EndpointError),
    /// The client's address failed too often: not asked, try again later.
    #[error(transparent)]
    Throttled(#[from] Throttled),
}

/// What went wrong asking the identity provider's token endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The request got no answer.
    #[error("{0}")]
    Request(#[source] reqwest::Error),
    /// An answer with a status neither a token nor a refusal.
    #[error("token endpoint answered {0}")]
    Status(reqwest::StatusCode),
    /// An answer that is not a token.
    #[error("token endpoint answer: {0}")]
    Answer(#[source] reqwest::Error),
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
}

/// [`exchange`] for a client at `peer`, within that address's failure
/// budget: past it, `Throttled` without asking the provider; a refusal
/// counts against it.
pub async fn exchange_from(
    validator: &TokenValidator,
    peer: IpAddr,
    org: &str,
    client_id: &str,
    client_secret: &str,
) -> Result<String, ExchangeError> {
    let budget = validator.exchange_failures();
    if let Err(throttled) = budget.check(peer) {
        crate::observability::metrics::token_rejected("client_secret_throttled");
        return Err(throttled.into());
    }
    let exchanged = exchange(validator, org, client_id, client_secret).await;
    if matches!(exchanged, Err(ExchangeError::Refused)) {
        crate::observability::metrics::token_rejected("client_secret_refused");
        budget.failed(peer);
    }
    exchanged
}

/// `client_id` and `client_secret` of `org`'s realm, exchanged for an access
/// token (the raw JWT).
pub async fn exchange(
    validator: &TokenValidator,
    org: &str,
    client_id: &str,
    client_secret: &str,
) -> Result<String, ExchangeError> {
    let endpoint = format!("{}/protocol/openid-connect/token", validator.issuer(org));
    let response = validator
        .identity_provider_client()
        .post(endpoint)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_secret", client_secret),
        ])
        .send()
        .await
        .map_err(|e| ExchangeError::Unavailable(EndpointError::Request(e)))?;
    let status = response.status();
    if status.is_client_error() {
        return Err(ExchangeError::Refused);
    }
    if !status.is_success() {
        return Err(ExchangeError::Unavailable(EndpointError::Status(status)));
    }
    let body: TokenResponse = response
        .json()
        .await
        .map_err(|e| ExchangeError::Unavailable(EndpointError::Answer(e)))?;
    Ok(body.access_token)
}
