//! The caller of the lake APIs (queries and loads) as the domain sees it:
//! who, on which org and zone, with which roles and service clients. Built
//! from a validated token by `api/`; stored with a job so any replica runs
//! it with the same grant.

use serde::{Deserialize, Serialize};

use super::Access;

/// Who calls the lake APIs (queries and loads), and on which API.
#[derive(Debug, Clone)]
pub struct LakeCaller {
    pub sub: String,
    pub org: String,
    /// The zone of a Zone API request.
    pub zone: Option<String>,
    pub grant: AccessGrant,
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
