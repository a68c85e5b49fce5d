//! The values metric labels may take, each from a closed or capped set, so a
//! caller can never grow the metrics registry: no SQL, ids, tokens, table or
//! org names reach a label. Anything outside a set becomes `other`.
//!
//! It must never pass a string it was given through unchecked.

use std::{collections::BTreeSet, sync::Mutex};

use crate::store::loads::LOAD_ERROR_TYPES;

/// What a label reads when its value is outside the set.
pub const OTHER: &str = "other";

/// The route label of a request no route matched (404s, unknown hosts).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Which API answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiLabel {
    Org,
    Zone,
    DailyRun,
    /// The embedded identity provider (`/realms/...`).
    Idp,
    /// The OpenAPI documents.
    Docs,
    /// `/livez` and `/readyz`.
    Health,
    /// No API router saw the request: an unknown org or zone host, or a
    /// refusal before routing (413, 504).
    None,
}

impl ApiLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiLabel::Org => "org",
            ApiLabel::Zone => "zone",
            ApiLabel::DailyRun => "dailyrun",
            ApiLabel::Idp => "idp",
            ApiLabel::Docs => "docs",
            ApiLabel::Health => "health",
            ApiLabel::None => "none",
        }
    }

    /// The API of a request the router for `self` answered, told apart by
    /// its route template: the bare host's router also serves the DailyRun
    /// API and the identity provider, and every host serves its OpenAPI
    /// document and the health checks.
    pub fn refine(self, route: &str) -> Self {
        if route.starts_with("/realms/") || route.starts_with("/auth/realms/") {
            ApiLabel::Idp
        } else if route.ends_with("/openapi.json") {
            ApiLabel::Docs
        } else if route == "/livez" || route == "/readyz" {
            ApiLabel::Health
        } else if route.contains("/dailyRun") {
            ApiLabel::DailyRun
        } else {
            self
        }
    }
}

/// An HTTP method as a label: the ones the APIs answer, else `other`.
pub fn method(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        _ => OTHER,
    }
}

/// A statement type as stored with a query job (`DML`, `DDL`, `UTILITY`).
pub fn statement_type(stored: &str) -> &'static str {
    match stored {
        "DML" => "DML",
        "DDL" => "DDL",
        "UTILITY" => "UTILITY",
        _ => OTHER,
    }
}

/// A load FAIL's ErrorType: one of the spec's, else `other`.
pub fn load_error_type(error_type: &str) -> &'static str {
    LOAD_ERROR_TYPES
        .iter()
        .find(|known| **known == error_type)
        .copied()
        .unwrap_or(OTHER)
}

/// Step names are an operator's (from manifests), so they are bounded but
/// not closed: at most `limit` distinct names are labels, each at most
/// `MAX_STEP_NAME_BYTES` long and spelt as the manifest rule allows
/// (lowercase letters, digits, `_`, `-`); later or other names read `other`.
#[derive(Debug)]
pub struct BoundedNames {
    limit: usize,
    seen: Mutex<BTreeSet<String>>,
}

pub const MAX_STEP_NAME_BYTES: usize = 64;

/// Distinct step names labelled per process.
pub const MAX_STEP_NAMES: usize = 64;

impl BoundedNames {
    pub const fn new(limit: usize) -> Self {
        Self {
            limit,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn label(&self, name: &str) -> String {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_STEP_NAME_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !well_formed {
            return OTHER.to_string();
        }
        let mut seen = self.seen.lock().expect("step names lock");
        if seen.contains(name) || seen.len() < self.limit {
            seen.insert(name.to_string());
            name.to_string()
        } else {
            OTHER.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_past_the_cap_or_off_the_rule_read_other() {
        let names = BoundedNames::new(2);
        assert_eq!(names.label("validate_parquet"), "validate_parquet");
        assert_eq!(names.label("insert"), "insert");
        assert_eq!(names.label("third"), OTHER, "past the cap");
        assert_eq!(names.label("insert"), "insert", "a name seen stays");
        let fresh = BoundedNames::new(10);
        for bad in [
            "",
            "Upper",
            "drop table x; --",
            "a b",
            "ünicode",
            &"x".repeat(MAX_STEP_NAME_BYTES + 1),
        ] {
            assert_eq!(fresh.label(bad), OTHER, "{bad:?}");
        }
        assert_eq!(
            fresh.label(&"x".repeat(MAX_STEP_NAME_BYTES)),
            "x".repeat(MAX_STEP_NAME_BYTES)
        );
    }

    #[test]
    fn closed_sets_map_anything_else_to_other() {
        assert_eq!(method("GET"), "GET");
        assert_eq!(method("BREW"), OTHER);
        assert_eq!(statement_type("DDL"), "DDL");
        assert_eq!(statement_type("SELECT 1"), OTHER);
        assert_eq!(load_error_type("CheckSumError"), "CheckSumError");
        assert_eq!(load_error_type("SELECT * FROM secrets"), OTHER);
    }

    #[test]
    fn the_api_follows_the_route_template() {
        let cases = [
            (ApiLabel::Org, "/v2/query/{query_id}", ApiLabel::Org),
            (ApiLabel::Zone, "/v2/load", ApiLabel::Zone),
            (ApiLabel::Org, "/dailyRun/flag", ApiLabel::DailyRun),
            (ApiLabel::Org, "/superset/dailyRun/flag", ApiLabel::DailyRun),
            (
                ApiLabel::Org,
                "/realms/{org}/protocol/openid-connect/token",
                ApiLabel::Idp,
            ),
            (
                ApiLabel::Org,
                "/auth/realms/{org}/protocol/openid-connect/certs",
                ApiLabel::Idp,
            ),
            (ApiLabel::Zone, "/v2/openapi.json", ApiLabel::Docs),
            (ApiLabel::DailyRun, "/readyz", ApiLabel::Health),
            (ApiLabel::Zone, UNMATCHED_ROUTE, ApiLabel::Zone),
        ];
        for (router, route, api) in cases {
            assert_eq!(router.refine(route), api, "{route}");
        }
    }
}
