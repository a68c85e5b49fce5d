//! The token extractor: `Caller<S>` is a request whose bearer token was
//! validated for this API (issuer = the org's realm, audience = this API's
//! client) and carries the scope `S` names (prefixed `<zone>:` on a Zone API).
//!
//! Rejections: 401 `Unauthorized` for anything wrong with the token or the
//! Authorization header, 403 `Forbidden` for a missing scope.

use std::marker::PhantomData;

use axum::{extract::FromRequestParts, http::request::Parts};

use super::{AppState, error::ApiError, routing::ApiTarget};
use crate::{
    auth::{
        AccessClaims, LakeCaller,
        caller::{bearer_token as bearer_token_of, scope_on},
        validator::Expected,
    },
    observability::metrics::token_rejected,
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
    _scope: PhantomData<S>,
}

/// `Bearer <token>`: scheme case-insensitive, one space, a token without spaces.
fn bearer_token(parts: &Parts) -> Result<&str, ApiError> {
    let unauthorized = |why: &str| ApiError::Unauthorized(why.to_string());
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("no Authorization header"))?
        .to_str()
        .map_err(|_| unauthorized("Authorization header is not ASCII"))?;
    bearer_token_of(value)
        .ok_or_else(|| unauthorized("Authorization header is not `Bearer <token>`"))
}

impl<S: RequiredScope> FromRequestParts<AppState> for Caller<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let target = parts
            .extensions
            .get::<ApiTarget>()
            .cloned()
            .ok_or_else(|| ApiError::Internal("request reached an API without a target".into()))?;
        let token = bearer_token(parts).inspect_err(|_| token_rejected("missing_bearer"))?;
        let api_client = target.api_client(&state.config);
        let claims = state
            .validator
            .validate(
                token,
                Expected {
                    org: &target.org,
                    audience: &api_client,
                },
            )
            .await?;
        if let Some(base) = S::SCOPE {
            let needed = scope_for(base, &target);
            if !claims.scopes().contains(needed.as_str()) {
                token_rejected("insufficient_scope");
                return Err(ApiError::Forbidden(needed));
            }
        }
        Ok(Self {
            claims,
            target,
            api_client,
            _scope: PhantomData,
        })
    }
}

impl<S: RequiredScope> Caller<S> {
    /// The caller as the query and load services need it. Claims a query
    /// endpoint cannot do without (service clients, resource access) missing
    /// or malformed → 500, as the spec says; no roles on this API's client →
    /// no recognised role.
    pub fn lake_caller(&self) -> Result<LakeCaller, ApiError> {
        LakeCaller::from_claims(
            &self.claims,
            (&self.target.org, self.target.zone()),
            &self.api_client,
        )
        .map_err(|e| ApiError::Internal(format!("token claims: {e}")))
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
