//! The OpenAPI 3.1 document, assembled from the same `OpenApiRouter`s that route
//! requests, so every endpoint that exists is in it. Served without auth at
//! `GET /v2/openapi.json`.

use serde_json::Value;

use super::{
    idempotency::{IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER},
    routing::{ApiKind, ApiTarget},
};
use crate::store::catalog::standard_databases;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lakehost",
        description = "Data lake query, load and daily run APIs. Org API: `<org>.api.<region_domain>/v2`; \
            Zone API: `<zone>.<org>.api.<region_domain>/v2` (same query and load paths, scopes prefixed `<zone>:`); \
            DailyRun API: `api.<org>.<region_domain>/dailyRun`. Any other host serves the default org.",
    ),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The document a host serves: `doc` with the `database` of POST /query
/// naming the databases of the org or zone the host is for.
pub fn for_target(doc: &Value, target: &ApiTarget) -> Value {
    let zone = match &target.kind {
        ApiKind::Zone(zone) => Some(zone.as_str()),
        ApiKind::Org | ApiKind::DailyRun => None,
    };
    let databases = standard_databases(&target.org, zone);
    let mut names: Vec<Value> = databases
        .all()
        .iter()
        .map(|(name, _)| Value::from(*name))
        .collect();
    names.push(Value::Null);
    let mut doc = doc.clone();
    if let Some(database) = doc.pointer_mut("/components/schemas/QueryRequest/properties/database")
    {
        database["enum"] = Value::Array(names);
    }
    doc
}

/// Declares `Idempotent-Replayed` on every success answer of an operation
/// that takes an `Idempotency-Key` (the rule is `idempotency.rs`'s: one
/// parameter says where keys are taken, and the replay header follows it).
pub fn declare_replay_header(doc: &mut Value) {
    let keyed = operations_mut(doc).filter(|operation| {
        operation["parameters"]
            .as_array()
            .is_some_and(|parameters| {
                parameters
                    .iter()
                    .any(|p| p["name"] == IDEMPOTENCY_KEY_HEADER && p["in"] == "header")
            })
    });
    for operation in keyed {
        let Some(responses) = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let successes = responses
            .iter_mut()
            .filter(|(status, _)| status.starts_with('2'))
            .filter_map(|(_, response)| response.as_object_mut());
        for response in successes {
            let headers = response
                .entry("headers")
                .or_insert_with(|| Value::Object(Default::default()));
            headers[REPLAYED_HEADER] = serde_json::json!({
                "description": "`true` when this is the stored answer to an earlier request with the same \
                    `Idempotency-Key` and body: nothing new was started. Absent otherwise.",
                "schema": { "type": "string", "enum": ["true"] },
            });
        }
    }
}

/// utoipa 5.5 writes a link's `operationId` as `operation_id` (its `Link`
/// lacks the rename), which OpenAPI tools then read as a link to nothing;
/// this writes it as OpenAPI 3.1 spells it.
pub fn spell_link_fields(doc: &mut Value) {
    let links = operations_mut(doc)
        .filter_map(|operation| operation.get_mut("responses")?.as_object_mut())
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("links")?.as_object_mut())
        .flat_map(|links| links.values_mut())
        .filter_map(Value::as_object_mut);
    for link in links {
        if let Some(id) = link.remove("operation_id") {
            link.insert("operationId".into(), id);
        }
    }
}

/// Every operation of the document (each method of each path).
fn operations_mut(doc: &mut Value) -> impl Iterator<Item = &mut Value> {
    doc.get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|operations| operations.values_mut())
}
