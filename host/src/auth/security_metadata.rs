//! `GET /identity/security_metadata` as a domain function: the caller's row
//! filter and the fingerprint of their access (spec "Security metadata").

use serde::Serialize;

use super::claims::{AccessClaims, ClaimError, access_fingerprint};
use super::roles::Access;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SecurityMetadata {
    /// `service_client_id IN (...)`, `1=1` or `1=0`.
    pub athena_service_client_where_clause: String,
    /// 16 characters; changes when the caller's roles or service clients change.
    pub service_client_hash: String,
}

/// Checks the claims in the order of the spec's "Identity endpoint errors" table
/// (service client present; sub, jti, resource access; claim format) and builds
/// the metadata from the roles on `api_client` (the Org API's client).
pub fn security_metadata(
    claims: &AccessClaims,
    api_client: &str,
) -> Result<SecurityMetadata, ClaimError> {
    if !claims.raw().contains_key("service_client_id") {
        return Err(ClaimError::MissingServiceClient);
    }
    claims.sub()?;
    claims.jti()?;
    let roles = claims.roles_for(api_client)?;
    let service_clients = claims.service_clients()?;
    let access = Access::new(
        roles.iter().map(String::as_str),
        service_clients.iter().copied(),
    );
    Ok(SecurityMetadata {
        athena_service_client_where_clause: access.where_clause(&service_clients),
        service_client_hash: access_fingerprint(&roles, &service_clients),
    })
}
