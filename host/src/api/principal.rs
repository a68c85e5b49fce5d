//! The token extractor: `Caller<S>` is a request whose bearer token was
//! validated for this API (issuer = the org's realm, audience = this API's
//! client) and carries the scope `S` names (prefixed `<zone>:` on a Zone API).
//!
//! The checks are `auth::authenticate`'s, as for every front end; this
//! module maps its refusals to the spec's statuses once (`refused`): 401
//! `Unauthorized` for anything wrong with the token or the Authorization
//! header, 403 `Forbidden` for a missing scope, 500 for the claims a query
//! or load endpoint reads.

use std::marker::PhantomData;

use axum::{extract::FromRequestParts, http::request::Parts};

use super::{AppState, error::ApiError, routing::ApiTarget};
use crate::auth::{
    AccessClaims, Api, Credentials, LakeCaller, Refusal, Verified,
    authenticate::verify,
    caller::{bearer_token, scope_on},
};

/// The scope an endpoint needs (spec "Scopes per endpoint").
pub trait RequiredScope: Send + Sync + 'static {
    /// The Org-API / DailyRun-API scope; `None` for "any valid token".
    const SCOPE: Option<&'static str>;
}

macro_rules! scopes {
    ($($(#[$doc:meta])* $name:ident => $scope:expr),* $(,)?) => {
        $(
            $(#[$doc])*
            #[derive(Debug)]
            pub struct $name;
            impl RequiredScope for $name {
                const SCOPE: Option<&'static str> = $scope;
            }
        )*
    };
}

scopes! {
    /// Any valid token of the API (GET /identity/security_metadata).
    AnyScope => None,
    QueryRead => Some("query:read"),
    QueryWrite => Some("query:write"),
    LoadRead => Some("load:read"),
    LoadWrite => Some("load:write"),
    DailyRunEnabledRead => Some("dailyrun:enabled:read"),
    DailyRunEnabledWrite => Some("dailyrun:enabled:write"),
    DailyRunExecutionRead => Some("dailyrun:execution:read"),
    DailyRunExecutionWrite => Some("dailyrun:execution:write"),
    /// The pipelines deployed over the API (docs/pipeline-deploy.md).
    PipelineRead => Some("pipeline:read"),
    PipelineWrite => Some("pipeline:write"),
}

/// The scope string a token must carry for `base` on `target`'s API.
pub fn scope_for(base: &str, target: &ApiTarget) -> String {
    scope_on(base, target.zone())
}

/// An authenticated caller of the API the request was routed to.
#[derive(Debug)]
pub struct Caller<S: RequiredScope> {
    pub claims: AccessClaims,
    pub target: ApiTarget,
    /// `svc_api` or `svc_api_<zone>`: whose roles count here.
    pub api_client: String,
    verified: Verified,
    _scope: PhantomData<S>,
}

/// A refusal of `auth::authenticate` as the REST APIs answer it (spec
/// "Status codes"), the one place they do: anything wrong with the token or
/// the `Authorization` header is 401 `{"message": "Unauthorized"}`, a
/// missing scope 403 `{"message": "Forbidden"}`; a token whose claims a
/// query or load endpoint reads are missing or malformed is the spec's 500
/// ("tokens with missing or malformed claims on query endpoints"), as is an
/// identity provider out of reach. Client secrets and their failure budget
/// are not REST's (it takes bearer tokens only): a refusal of theirs is 401.
fn refused(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::MissingScope { needed } => ApiError::Forbidden(needed),
        Refusal::Claims(e) => ApiError::failed("token claims", e),
        Refusal::ProviderUnavailable(e) => ApiError::failed("token keys", e),
        unauthorized @ (Refusal::MissingCredentials
        | Refusal::InvalidToken(_)
        | Refusal::WrongIssuerOrAudience(_)
        | Refusal::Expired
        | Refusal::SecretRefused
        | Refusal::Throttled(_)) => ApiError::Unauthorized(cause_chain(&unauthorized)),
    }
}

/// `error` and its causes, for the debug log of a 401.
fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl<S: RequiredScope> FromRequestParts<AppState> for Caller<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let target = parts
            .extensions
            .get::<ApiTarget>()
            .cloned()
            .ok_or_else(|| ApiError::broken("request reached an API without a target"))?;
        // `Bearer <token>`: scheme case-insensitive, one space, a token
        // without spaces; anything else is no credentials.
        let credentials = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer_token)
            .map(Credentials::Bearer);
        let api = Api {
            org: &target.org,
            zone: target.zone(),
        };
        let verified = verify(&state.validator, credentials, api, S::SCOPE)
            .await
            .map_err(refused)?;
        Ok(Self {
            claims: verified.claims.clone(),
            api_client: verified.api_client.clone(),
            target,
            verified,
            _scope: PhantomData,
        })
    }
}

impl<S: RequiredScope> Caller<S> {
    /// The caller as the query and load services need it: the claims those
    /// endpoints cannot do without (service clients, resource access)
    /// missing or malformed are the spec's 500; no roles on this API's
    /// client is no recognised role.
    pub fn lake_caller(&self) -> Result<LakeCaller, ApiError> {
        self.verified.caller().map_err(refused)
    }
}

/// The caller of a query or load endpoint as the domain sees it: `Caller<S>`
/// then `Caller::lake_caller`, in one extractor, so handlers never convert it
/// and a token's missing claims answer before the body is read.
pub struct LakeCallerOf<S: RequiredScope>(pub LakeCaller, pub PhantomData<S>);

impl<S: RequiredScope> FromRequestParts<AppState> for LakeCallerOf<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::<S>::from_request_parts(parts, state).await?;
        Ok(Self(caller.lake_caller()?, PhantomData))
    }
}
