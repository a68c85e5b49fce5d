//! `GET /identity/security_metadata` (spec "GET /identity/security_metadata",
//! "Identity endpoint errors"): Org API only, any valid token.

use axum::Json;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    error::ApiError,
    principal::{AnyScope, Caller},
    schemas,
};
use crate::auth::security_metadata::{SecurityMetadata, security_metadata};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_security_metadata))
}

/// The caller's row-level security filter and the fingerprint of their access.
#[utoipa::path(
    get,
    path = "/v2/identity/security_metadata",
    tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The caller's filter and access hash", body = SecurityMetadata),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
        (status = 403, description = "A required claim is missing or malformed", body = schemas::ErrorBody),
        (status = 500, description = "There was a problem returning the security metadata", body = schemas::ErrorBody),
    )
)]
async fn get_security_metadata(
    caller: Result<Caller<AnyScope>, ApiError>,
) -> Result<Json<SecurityMetadata>, ApiError> {
    let caller = caller.map_err(|e| match e {
        // Unexpected failures of this endpoint answer with its own 500 body.
        ApiError::Unexpected(cause) => ApiError::IdentityInternal(cause),
        other => other,
    })?;
    security_metadata(&caller.claims, &caller.api_client)
        .map(Json)
        .map_err(ApiError::IdentityClaim)
}
