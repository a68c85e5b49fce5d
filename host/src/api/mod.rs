//! The REST front end: the Org, Zone and DailyRun APIs, chosen by Host
//! header, with the gateway behaviour around them. Handlers read the
//! request (the spec's rules on bodies and headers, the caller), call the
//! services of `query`, `load` and `dailyrun`, and shape the spec's answer;
//! `error.rs` maps every outcome to its status once. The other front ends
//! that speak HTTP (`s3`, `flight`, `idp`, `cluster`) stand beside it and
//! share only what `edge` holds.

mod accept;
pub mod dailyrun;
mod dailyrun_body;
pub mod error;
pub mod gateway;
pub mod health;
pub mod idempotency;
pub mod identity;
pub mod json_body;
pub mod load;
pub mod load_body;
pub mod metrics;
pub mod migration;
pub mod openapi;
pub mod pipeline;
mod pipeline_shadow;
mod prefer;
pub mod principal;
pub mod query;
mod result_download;
pub mod result_page;
pub mod routing;
pub mod schemas;

use std::{sync::Arc, time::Duration};

use axum::{
    Extension, Json, Router,
    extract::DefaultBodyLimit,
    middleware::{from_fn, from_fn_with_state},
    routing::get,
};
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;

use crate::{
    auth::TokenValidator,
    clock::SharedClock,
    config::Config,
    load::{LoadService, commit::LoadCommitter},
    observability::labels::ApiLabel,
    query::QueryService,
    store::Store,
};
use routing::{ApiTarget, HostRouters};

/// Everything handlers share; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub validator: Arc<TokenValidator>,
    pub clock: SharedClock,
    /// The catalog and durable jobs (used by the query and load APIs).
    pub store: Store,
    pub queries: Arc<QueryService>,
    pub loads: Arc<LoadService>,
    pub commits: Arc<LoadCommitter>,
    pub daily_runs: Arc<crate::dailyrun::DailyRunService>,
    /// The pipelines deployed over the API.
    pub deployments: Arc<crate::pipeline::deployed::Deployments>,
    /// What `/readyz` checks.
    pub readiness: crate::readiness::Readiness,
}

/// The Org API's routes (paths under `/v2`).
fn org_api() -> OpenApiRouter<AppState> {
    described()
        .merge(identity::router())
        .merge(query::router())
        .merge(load::router())
        .merge(migration::router())
        .merge(pipeline::router())
}

/// The Zone API's routes: the Org API's query, load and pipeline paths,
/// without identity.
fn zone_api() -> OpenApiRouter<AppState> {
    described()
        .merge(query::router())
        .merge(load::router())
        .merge(migration::router())
        .merge(pipeline::router())
}

/// The DailyRun API's routes (paths under `/dailyRun`).
fn dailyrun_api() -> OpenApiRouter<AppState> {
    described().merge(dailyrun::router())
}

/// An empty router carrying the document's title, description and bearer scheme.
fn described() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
}

/// A router's OpenAPI document as the JSON its host serves.
fn document(doc: &utoipa::openapi::OpenApi) -> Arc<serde_json::Value> {
    let mut doc = serde_json::to_value(doc).expect("OpenAPI document serialises");
    openapi::spell_link_fields(&mut doc);
    openapi::declare_replay_header(&mut doc);
    Arc::new(doc)
}

/// Adds the fallbacks and the `/v2/openapi.json` route to one API's router.
fn finish(router: Router<AppState>, doc: &Arc<serde_json::Value>, state: &AppState) -> Router {
    let doc = doc.clone();
    router
        .route(
            "/v2/openapi.json",
            get(move |Extension(target): Extension<ApiTarget>| async move {
                Json(openapi::for_target(&doc, &target))
            }),
        )
        .fallback(gateway::not_found)
        .method_not_allowed_fallback(gateway::method_not_allowed)
        .with_state(state.clone())
}

/// The whole HTTP application: host routing, the APIs and the gateway, with
/// `provider` (the embedded identity provider's routes, `idp::router`)
/// answered on the default host.
pub fn app(state: AppState, provider: Option<Router>) -> Router {
    let config = state.config.clone();
    // Each host's document lists the paths that host answers: the bare host
    // serves the default org's Org and DailyRun APIs together.
    let (org_routes, mut org_doc) = org_api().split_for_parts();
    let (zone_routes, mut zone_doc) = zone_api().split_for_parts();
    let (dailyrun_routes, mut dailyrun_doc) = dailyrun_api().split_for_parts();
    let (health_routes, health_doc) = health::router().split_for_parts();
    for doc in [&mut org_doc, &mut zone_doc, &mut dailyrun_doc] {
        doc.merge(health_doc.clone());
    }
    let mut default_doc = org_doc.clone();
    default_doc.merge(dailyrun_doc.clone());

    // The DailyRun API answers under /dailyRun and under the configured prefix.
    let dailyrun_routes = dailyrun_routes
        .clone()
        .nest(&config.server.dailyrun_prefix, dailyrun_routes);
    // Every host answers the health checks.
    let finish = |routes: Router<AppState>, doc: &utoipa::openapi::OpenApi| {
        finish(routes.merge(health_routes.clone()), &document(doc), &state)
    };

    let mut default = finish(
        org_routes.clone().merge(dailyrun_routes.clone()),
        &default_doc,
    );
    if let Some(provider) = provider {
        default = default.merge(provider);
    }
    // Each router tags its responses with the API and route template that
    // answered, for the request's log line and metrics.
    let tagged =
        |router: Router, api: ApiLabel| router.layer(from_fn_with_state(api, gateway::tag_route));
    let routers = HostRouters {
        config: config.clone(),
        org: tagged(finish(org_routes, &org_doc), ApiLabel::Org),
        zone: tagged(finish(zone_routes, &zone_doc), ApiLabel::Zone),
        dailyrun: tagged(finish(dailyrun_routes, &dailyrun_doc), ApiLabel::DailyRun),
        default: tagged(default, ApiLabel::Org),
    };

    Router::new()
        .fallback(routing::dispatch)
        .with_state(routers)
        .layer(from_fn(gateway::json_rejections))
        .layer(DefaultBodyLimit::max(config.server.max_body_bytes as usize))
        .layer(from_fn_with_state(
            gateway::BodyCaps {
                body: config.server.max_body_bytes,
                component: config.pipeline.max_component_bytes,
            },
            gateway::limit_body,
        ))
        .layer(from_fn_with_state(
            Duration::from_secs(config.server.request_timeout_s),
            gateway::timeout,
        ))
        // Inside the request's span: a panic's 500 has its request code.
        .layer(gateway::catch_panics())
        .layer(from_fn(gateway::request_context))
}
