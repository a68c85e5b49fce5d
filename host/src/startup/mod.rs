//! `Application`: binds the listeners (the APIs on `server.listen`, the upload
//! endpoint on `storage.s3_listen`, `/metrics` on `server.metrics_listen`),
//! builds state and serves HTTP (or HTTPS with rustls, TLS 1.2 and 1.3 only,
//! on the first two; metrics are plain HTTP for the scraper). Tests build it
//! on port 0 in-process and read the bound addresses. Each listener is served
//! by `listener::serve`, with its connection cap and timeouts.
//!
//! Building is four named steps: bind the listeners (`bind.rs`), start the
//! services and their background work (`services.rs`), make the callers'
//! gate (identity provider and token validator), then the front ends over
//! one `AppState` (`wire.rs` for Flight SQL and Postgres). Serving and
//! stopping are `serve.rs`.
//!
//! Stopping: the first SIGTERM or SIGINT drains the replica (`drain.rs`):
//! readiness fails at once, the API and upload listeners close after
//! `server.drain_notice_ms`, open requests and running jobs get until
//! `server.drain_s`, jobs still running then are handed back, and
//! `run_until_stopped` returns (the process exits 0). Metrics are served
//! until then, so the drain itself can be watched. A second signal exits at
//! once with 130.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use url::Url;

mod bind;
mod serve;
mod services;
mod wire;

pub use services::open_store;

use bind::{Bound, tls_acceptor};
use services::Services;
use wire::{ClusterWorkerListener, FlightListener, PgListener, flight_listener_of, pg_listener_of};

use crate::{
    api::{self, AppState},
    auth::TokenValidator,
    clock::{SharedClock, SystemClock},
    config::Config,
    dailyrun::DailyRunService,
    drain::Drain,
    idp::Idp,
    lake::Lake,
    listener::ConnectionLimits,
    load::LoadService,
    readiness::Readiness,
    retention::Sweeper,
    retired::RetiredFileSweeper,
    store::Store,
};

pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    router: axum::Router,
    upload_listener: TcpListener,
    upload_addr: SocketAddr,
    upload_router: axum::Router,
    metrics_listener: TcpListener,
    metrics_addr: SocketAddr,
    metrics_router: axum::Router,
    /// Arrow Flight SQL, when `server.flight_listen` is set.
    flight: Option<FlightListener>,
    /// The Postgres wire protocol, when `server.pg_listen` is set.
    pg: Option<PgListener>,
    /// The stages of other replicas' distributed reads, when
    /// `distributed.enabled`.
    cluster_worker: Option<ClusterWorkerListener>,
    /// The connection guards of the API and upload listeners.
    limits: ConnectionLimits,
    /// `server.wire_idle_timeout_s`.
    wire_idle_timeout: Duration,
    loads: Arc<LoadService>,
    daily_runs: Arc<DailyRunService>,
    retired_files: Arc<RetiredFileSweeper>,
    retention: Arc<Sweeper>,
    auth_url: Url,
    idp: Option<Arc<Idp>>,
    store: Store,
    lake: Lake,
    drain: Drain,
    /// `server.drain_s` and `server.drain_notice_ms`.
    drain_for: Duration,
    drain_notice: Duration,
    /// Stops the workers and the sweepers (at the drain's end).
    workers: CancellationToken,
    /// Stops them when the application is dropped (in-process tests).
    _workers_when_dropped: tokio_util::sync::DropGuard,
}

impl Application {
    /// Builds the server on the wall clock.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        Self::build_with_clock(config, Arc::new(SystemClock)).await
    }

    /// Builds the server with an injected clock (tests move it).
    pub async fn build_with_clock(config: Config, clock: SharedClock) -> anyhow::Result<Self> {
        config.validate()?;
        let bound = Bound::listeners(&config).await?;
        std::fs::create_dir_all(&config.storage.data_dir).with_context(|| {
            format!(
                "cannot create {} (storage.data_dir)",
                config.storage.data_dir.display()
            )
        })?;
        let auth_url = bound.auth_url(&config);
        let services = Services::start(&config, &bound, clock.clone()).await?;
        let config = Arc::new(config);
        let (idp, validator) = callers_gate(&config, &auth_url, &clock, &services.store).await?;
        let state = AppState {
            config: config.clone(),
            validator,
            clock,
            store: services.store.clone(),
            queries: services.queries.clone(),
            loads: services.loads.clone(),
            commits: services.commits.clone(),
            daily_runs: services.daily_runs.clone(),
            deployments: services.deployments.clone(),
            readiness: Readiness {
                store: services.store.clone(),
                lake: services.lake.clone(),
                drain: services.drain.clone(),
            },
        };
        Self::front_ends(bound, services, state, idp, auth_url)
    }

    /// The last step: the front ends over `state`, and the application that
    /// serves them.
    fn front_ends(
        bound: Bound,
        services: Services,
        state: AppState,
        idp: Option<Arc<Idp>>,
        auth_url: Url,
    ) -> anyhow::Result<Self> {
        let config = state.config.clone();
        let flight = match bound.flight {
            Some(listener) => Some(flight_listener_of(listener, &state)?),
            None => None,
        };
        let pg = match bound.pg {
            Some(listener) => {
                let tls = match (&config.server.tls_cert, &config.server.tls_key) {
                    (Some(cert), Some(key)) => Some(tls_acceptor(cert, key, &[b"postgresql"])?),
                    _ => None,
                };
                Some(pg_listener_of(listener, tls, &state)?)
            }
            None => None,
        };
        let listeners = 2
            + u64::from(flight.is_some())
            + u64::from(pg.is_some())
            + u64::from(services.cluster_worker.is_some());
        let router = api::app(state, idp.clone().map(crate::idp::router));
        Ok(Self {
            listener: bound.api,
            addr: bound.api_addr,
            tls: bound.tls,
            router,
            upload_listener: bound.upload,
            upload_addr: bound.upload_addr,
            upload_router: services.upload_router,
            metrics_listener: bound.metrics,
            metrics_addr: bound.metrics_addr,
            metrics_router: services.metrics_router,
            flight,
            pg,
            cluster_worker: services.cluster_worker,
            limits: ConnectionLimits::for_listeners(&config.server, listeners, config.orgs.len()),
            wire_idle_timeout: Duration::from_secs(config.server.wire_idle_timeout_s),
            loads: services.loads,
            daily_runs: services.daily_runs,
            retired_files: services.retired_files,
            retention: services.retention,
            auth_url,
            idp,
            store: services.store,
            lake: services.lake,
            drain: services.drain,
            drain_for: Duration::from_secs(config.server.drain_s),
            drain_notice: Duration::from_millis(config.server.drain_notice_ms),
            _workers_when_dropped: services.workers.clone().drop_guard(),
            workers: services.workers,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the upload endpoint listens.
    pub fn upload_addr(&self) -> SocketAddr {
        self.upload_addr
    }

    /// Where `GET /metrics` is served.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Where the Postgres wire protocol is served, when `server.pg_listen`
    /// is set.
    pub fn pg_addr(&self) -> Option<SocketAddr> {
        self.pg.as_ref().map(|pg| pg.addr)
    }

    /// Where Arrow Flight SQL is served, when `server.flight_listen` is set.
    pub fn flight_addr(&self) -> Option<SocketAddr> {
        self.flight.as_ref().map(|flight| flight.addr)
    }

    /// Where this replica's worker listener is (`distributed.enabled`).
    pub fn cluster_worker_addr(&self) -> Option<SocketAddr> {
        self.cluster_worker.as_ref().map(|worker| worker.addr)
    }

    /// The load service (tests run its staging sweep directly).
    pub fn loads(&self) -> Arc<LoadService> {
        self.loads.clone()
    }

    /// The daily-run service (tests drive its scheduler tick directly).
    pub fn daily_runs(&self) -> Arc<DailyRunService> {
        self.daily_runs.clone()
    }

    /// The retired-file sweeper (tests run its sweep directly).
    pub fn retired_files(&self) -> Arc<RetiredFileSweeper> {
        self.retired_files.clone()
    }

    /// The retention sweep (tests run its rounds directly).
    pub fn retention(&self) -> Arc<Sweeper> {
        self.retention.clone()
    }

    /// The identity provider's base address the validator uses.
    pub fn auth_url(&self) -> &Url {
        &self.auth_url
    }

    pub fn idp(&self) -> Option<Arc<Idp>> {
        self.idp.clone()
    }

    /// The metadata store the server uses (tests seed the catalog through it).
    pub fn store(&self) -> Store {
        self.store.clone()
    }

    pub fn lake(&self) -> Lake {
        self.lake.clone()
    }

    /// This server's drain (tests begin one through `run_until`).
    pub fn drain(&self) -> Drain {
        self.drain.clone()
    }
}

/// The callers' gate: the embedded identity provider when `idp.enabled`
/// (its keys and login codes in the shared store, so every replica is the
/// same provider), and the validator of every front end's tokens.
async fn callers_gate(
    config: &Arc<Config>,
    auth_url: &Url,
    clock: &SharedClock,
    store: &Store,
) -> anyhow::Result<(Option<Arc<Idp>>, Arc<TokenValidator>)> {
    let idp = if config.idp.enabled {
        let idp = Idp::new(
            config.clone(),
            auth_url.clone(),
            clock.clone(),
            store.clone(),
        )
        .await
        .context("starting the embedded identity provider")?;
        Some(Arc::new(idp))
    } else {
        None
    };
    // With the embedded provider behind our own TLS certificate, the validator
    // must trust that certificate to fetch discovery and JWKS from ourselves,
    // whether `auth.auth_url` names this server or is left to default to it
    // (trusting it besides the public roots is harmless when the realm is
    // served elsewhere).
    let own_certificate = match (config.idp.enabled, &config.server.tls_cert) {
        (true, Some(cert)) => Some(
            std::fs::read(cert)
                .with_context(|| format!("cannot read {} (server.tls_cert)", cert.display()))?,
        ),
        _ => None,
    };
    let validator = TokenValidator::new(
        &config.auth,
        auth_url.clone(),
        clock.clone(),
        own_certificate.as_deref(),
    )?;
    Ok((idp, Arc::new(validator)))
}
