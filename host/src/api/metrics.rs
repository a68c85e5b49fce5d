//! `GET /metrics` in the Prometheus text format, served on its own listener
//! (`server.metrics_listen`), never on the APIs' address: the figures are for
//! operators. What is rendered, and the gauges sampled per scrape, are
//! `observability::metrics`'s; this is only the HTTP edge.

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::{observability::metrics::render, store::Store};

/// Open connections on the metrics listener (scrapers are few; past it a
/// connection is closed at once).
pub const MAX_SCRAPE_CONNECTIONS: usize = 16;

/// What a scrape needs: the process's recorder and this server's store (its
/// pool and the job counts).
#[derive(Clone)]
struct Scrape {
    handle: PrometheusHandle,
    store: Store,
}

/// The metrics listener's router: `/metrics`, and 404 for anything else.
pub fn router(handle: PrometheusHandle, store: Store) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(Scrape { handle, store })
}

async fn metrics(State(scrape): State<Scrape>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&scrape.handle, &scrape.store).await,
    )
}
