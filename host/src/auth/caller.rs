//! The caller of the lake APIs (queries and loads) as the domain sees it:
//! who, on which org and zone, with which roles and service clients. Built
//! from a validated token by `authenticate.rs` only; stored with a job so
//! any replica runs it with the same grant.

use serde::{Deserialize, Serialize};

use super::{Access, AccessClaims, ClaimError};

/// Who calls the lake APIs (queries and loads), and on which API.
#[derive(Debug, Clone)]
pub struct LakeCaller {
    pub sub: String,
    pub org: String,
    /// The zone of a Zone API request.
    pub zone: Option<String>,
    pub grant: AccessGrant,
}

impl LakeCaller {
    /// The caller a validated token names on the Org API of `org` (`zone`
    /// `None`) or on a Zone API, whose roles are those on `api_client` (the
    /// token's audience): `authenticate::Verified::caller` builds every
    /// front end's callers here. No roles on that client is no recognised
    /// role; the claims a lake call cannot do without, missing or
    /// malformed, are an error.
    pub fn from_claims(
        claims: &AccessClaims,
        (org, zone): (&str, Option<&str>),
        api_client: &str,
    ) -> Result<Self, ClaimError> {
        let roles = match claims.roles_for(api_client) {
            Ok(roles) => roles,
            Err(ClaimError::MissingClientRoles { .. }) => Vec::new(),
            Err(other) => return Err(other),
        };
        Ok(Self {
            sub: claims.sub()?.to_string(),
            org: org.to_string(),
            zone: zone.map(str::to_string),
            grant: AccessGrant {
                roles,
                service_clients: claims.service_clients()?,
            },
        })
    }
}

/// The token of an `Authorization` value `Bearer <token>` (the scheme in any
/// case, one space, a token without spaces), for every front end.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// The scope string a token must carry for `base` (`query:write`) on the
/// Org API (`zone` `None`) or a Zone API (`<zone>:query:write`).
pub fn scope_on(base: &str, zone: Option<&str>) -> String {
    match zone {
        Some(zone) => format!("{zone}:{base}"),
        None => base.to_string(),
    }
}

/// The roles (on this API's client) and service clients a token carries: what
/// a query runs with, stored with the job so any replica can run it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessGrant {
    pub roles: Vec<String>,
    pub service_clients: Vec<u32>,
}

impl AccessGrant {
    pub fn access(&self) -> Access {
        Access::new(
            self.roles.iter().map(String::as_str),
            self.service_clients.iter().copied(),
        )
    }

    /// Changes whenever the roles or the service clients change.
    pub fn fingerprint(&self) -> String {
        super::claims::access_fingerprint(&self.roles, &self.service_clients)
    }
}
