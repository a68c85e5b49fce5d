//! Which API a request is for, decided by its Host (DESIGN.md "Routing by Host
//! header"):
//!
//! | Host | API |
//! |---|---|
//! | `<org>.api.<region_domain>` | Org API |
//! | `<zone>.<org>.api.<region_domain>` | Zone API |
//! | `api.<org>.<region_domain>` | DailyRun API |
//! | anything else | the default org: Org API under `/v2`, DailyRun under `/dailyRun`, and the embedded identity provider |
//!
//! An org or zone that is not configured is 404 before any path is looked at.

use axum::{
    extract::{Request, State},
    http::header,
    response::{IntoResponse, Response},
};
use tower::ServiceExt as _;

use super::error::ApiError;
use crate::config::Config;

/// The API a request was routed to; handlers and the token extractor read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiTarget {
    pub org: String,
    pub kind: ApiKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiKind {
    Org,
    Zone(String),
    DailyRun,
}

impl ApiTarget {
    /// The zone of a Zone API target.
    pub fn zone(&self) -> Option<&str> {
        match &self.kind {
            ApiKind::Zone(zone) => Some(zone),
            ApiKind::Org | ApiKind::DailyRun => None,
        }
    }

    /// The client whose name is the audience and holds the roles: `svc_api` or
    /// `svc_api_<zone>`.
    pub fn api_client(&self, config: &Config) -> String {
        config.auth.api_client_for(self.zone())
    }
}

/// Where a Host points.
#[derive(Debug, PartialEq, Eq)]
pub enum HostRoute {
    Api(ApiTarget),
    /// The bare host: the default org.
    Default,
    /// An org or zone name that is not configured.
    Unknown,
}

/// Resolves a Host value (port and case ignored).
pub fn resolve_host(host: &str, config: &Config) -> HostRoute {
    let host = host.to_ascii_lowercase();
    let name = strip_port(&host);
    let domain = &config.server.region_domain;
    let org_known = |org: &str| config.org(org).is_some();

    if let Some(prefix) = name.strip_suffix(&format!(".api.{domain}")) {
        let labels: Vec<&str> = prefix.split('.').collect();
        return match labels.as_slice() {
            [org] if org_known(org) => HostRoute::Api(ApiTarget {
                org: org.to_string(),
                kind: ApiKind::Org,
            }),
            [zone, org] if config.has_zone(org, zone) => HostRoute::Api(ApiTarget {
                org: org.to_string(),
                kind: ApiKind::Zone(zone.to_string()),
            }),
            _ => HostRoute::Unknown,
        };
    }
    if let Some(org) = name
        .strip_prefix("api.")
        .and_then(|rest| rest.strip_suffix(&format!(".{domain}")))
    {
        if org.contains('.') || !org_known(org) {
            return HostRoute::Unknown;
        }
        return HostRoute::Api(ApiTarget {
            org: org.to_string(),
            kind: ApiKind::DailyRun,
        });
    }
    HostRoute::Default
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // An IPv6 literal, "[::1]:8080".
        return host.split_once(']').map_or(host, |(h, _)| h);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// The routers per API; `dispatch` picks one per request.
#[derive(Clone)]
pub struct HostRouters {
    pub config: std::sync::Arc<Config>,
    pub org: axum::Router,
    pub zone: axum::Router,
    pub dailyrun: axum::Router,
    /// Org API + DailyRun API + identity provider, for the bare host.
    pub default: axum::Router,
}

/// The top-level handler: resolves the Host, records the target and hands the
/// request to that API's router.
pub async fn dispatch(State(routers): State<HostRouters>, mut request: Request) -> Response {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let (router, target) = match resolve_host(&host, &routers.config) {
        HostRoute::Unknown => return ApiError::NotFound.into_response(),
        HostRoute::Api(target) => {
            let router = match target.kind {
                ApiKind::Org => routers.org.clone(),
                ApiKind::Zone(_) => routers.zone.clone(),
                ApiKind::DailyRun => routers.dailyrun.clone(),
            };
            (router, target)
        }
        HostRoute::Default => {
            let path = request.uri().path();
            let prefix = &routers.config.server.dailyrun_prefix;
            let is_dailyrun = path.starts_with("/dailyRun")
                || path
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with("/dailyRun"));
            let kind = if is_dailyrun {
                ApiKind::DailyRun
            } else {
                ApiKind::Org
            };
            let target = ApiTarget {
                org: routers.config.server.default_org.clone(),
                kind,
            };
            (routers.default.clone(), target)
        }
    };
    request.extensions_mut().insert(target);
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_toml(
            r#"
            [server]
            region_domain = "eu.example.com"
            default_org = "acme"
            [[orgs]]
            name = "acme"
            zones = ["lab", "ops"]
            [[orgs]]
            name = "beta"
            "#,
        )
        .unwrap()
    }

    fn api(org: &str, kind: ApiKind) -> HostRoute {
        HostRoute::Api(ApiTarget {
            org: org.into(),
            kind,
        })
    }

    #[test]
    fn hosts_resolve_per_design() {
        let c = config();
        assert_eq!(
            resolve_host("acme.api.eu.example.com", &c),
            api("acme", ApiKind::Org)
        );
        assert_eq!(
            resolve_host("BETA.api.eu.example.com:443", &c),
            api("beta", ApiKind::Org)
        );
        assert_eq!(
            resolve_host("lab.acme.api.eu.example.com", &c),
            api("acme", ApiKind::Zone("lab".into()))
        );
        assert_eq!(
            resolve_host("api.beta.eu.example.com", &c),
            api("beta", ApiKind::DailyRun)
        );
        assert_eq!(resolve_host("localhost:8080", &c), HostRoute::Default);
        assert_eq!(resolve_host("127.0.0.1", &c), HostRoute::Default);
        assert_eq!(resolve_host("[::1]:8080", &c), HostRoute::Default);
        assert_eq!(resolve_host("", &c), HostRoute::Default);
    }

    #[test]
    fn unknown_orgs_and_zones() {
        let c = config();
        for host in [
            "nope.api.eu.example.com",
            "lab.beta.api.eu.example.com",
            "moon.acme.api.eu.example.com",
            "a.lab.acme.api.eu.example.com",
            "api.nope.eu.example.com",
            "api.x.acme.eu.example.com",
        ] {
            assert_eq!(resolve_host(host, &c), HostRoute::Unknown, "{host}");
        }
    }
}
