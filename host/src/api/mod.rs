//! The HTTP surface: the Org, Zone and DailyRun APIs, chosen by Host header, with
//! the gateway behaviour around them. Handlers are thin: extract, call one
//! domain function, return. Only this module (with `idp/`) knows HTTP.

pub mod dailyrun;
mod dailyrun_body;
pub mod error;
pub mod gateway;
pub mod identity;
pub mod json_body;
pub mod load;
pub mod load_body;
pub mod migration;
pub mod openapi;
pub mod principal;
pub mod query;
pub mod routing;

use std::{sync::Arc, time::Duration};

use axum::{
    Json, Router,
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
    idp::Idp,
    load::{LoadService, commit::LoadCommitter},
    query::QueryService,
    store::Store,
};
use routing::HostRouters;

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
}

/// The Org API's routes (paths under `/v2`).
fn org_api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(identity::router())
        .merge(query::router())
        .merge(load::router())
        .merge(migration::router())
}

/// The Zone API's routes: the Org API's query and load paths, without identity.
fn zone_api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(query::router())
        .merge(load::router())
        .merge(migration::router())
}

/// The DailyRun API's routes (paths under `/dailyRun`).
fn dailyrun_api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().merge(dailyrun::router())
}

/// Adds the fallbacks and the `/v2/openapi.json` route to one API's router.
fn finish(router: Router<AppState>, doc: &Arc<serde_json::Value>, state: &AppState) -> Router {
    let doc = doc.clone();
    router
        .route(
            "/v2/openapi.json",
            get(move || async move { Json(doc.as_ref().clone()) }),
        )
        .fallback(gateway::not_found)
        .method_not_allowed_fallback(gateway::method_not_allowed)
        .with_state(state.clone())
}

/// The whole HTTP application: host routing, APIs, identity provider, gateway.
pub fn app(state: AppState, idp: Option<Arc<Idp>>) -> Router {
    let config = state.config.clone();
    let (org_routes, mut doc) = org_api().split_for_parts();
    let (zone_routes, _) = zone_api().split_for_parts();
    let (dailyrun_routes, dailyrun_doc) = dailyrun_api().split_for_parts();
    doc.merge(dailyrun_doc);
    let doc = Arc::new(serde_json::to_value(&doc).expect("OpenAPI document serialises"));

    // The DailyRun API answers under /dailyRun and under the configured prefix.
    let dailyrun_routes = dailyrun_routes
        .clone()
        .nest(&config.server.dailyrun_prefix, dailyrun_routes);

    let mut default = finish(
        org_routes.clone().merge(dailyrun_routes.clone()),
        &doc,
        &state,
    );
    if let Some(idp) = idp {
        default = default.merge(crate::idp::router(idp));
    }
    let routers = HostRouters {
        config: config.clone(),
        org: finish(org_routes, &doc, &state),
        zone: finish(zone_routes, &doc, &state),
        dailyrun: finish(dailyrun_routes, &doc, &state),
        default,
    };

    Router::new()
        .fallback(routing::dispatch)
        .with_state(routers)
        .layer(from_fn(gateway::json_rejections))
        .layer(DefaultBodyLimit::max(config.server.max_body_bytes as usize))
        .layer(from_fn_with_state(
            config.server.max_body_bytes,
            gateway::limit_body,
        ))
        .layer(from_fn_with_state(
            Duration::from_secs(config.server.request_timeout_s),
            gateway::timeout,
        ))
        .layer(from_fn(gateway::request_context))
}
