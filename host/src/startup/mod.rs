//! `Application`: binds the listeners (the APIs on `server.listen`, the upload
//! endpoint on `storage.s3_listen`, `/metrics` on `server.metrics_listen`),
//! builds state and serves HTTP (or HTTPS with rustls, TLS 1.2 and 1.3 only,
//! on the first two; metrics are plain HTTP for the scraper). Tests build it
//! on port 0 in-process and read the bound addresses. Each listener is served
//! by `listener::serve`, with its connection cap and timeouts.
//!
//! Stopping: the first SIGTERM or SIGINT drains the replica (`drain.rs`):
//! readiness fails at once, the API and upload listeners close after
//! `server.drain_notice_ms`, open requests and running jobs get until
//! `server.drain_s`, jobs still running then are handed back, and
//! `run_until_stopped` returns (the process exits 0). Metrics are served
//! until then, so the drain itself can be watched. A second signal exits at
//! once with 130.

use std::{future::Future, net::SocketAddr, path::Path, sync::Arc, time::Duration};

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use url::Url;

mod wire;

use wire::{
    ClusterWorkerListener, FlightListener, PgListener, cluster_worker_listener_of,
    flight_listener_of, pg_listener_of, serve_pg,
};

use crate::{
    api::{self, AppState},
    auth::TokenValidator,
    clock::{SharedClock, SystemClock},
    config::Config,
    dailyrun::DailyRunService,
    drain::Drain,
    engine::{distributed::Cluster, runtime::EngineRuntime},
    idp::Idp,
    lake::{Lake, retired::RetiredFileSweeper},
    listener::{self, ConnectionLimits},
    load::{LoadService, commit::LoadCommitter},
    pipeline::PipelineEngine,
    query::QueryService,
    readiness::Readiness,
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
        let listener = TcpListener::bind(config.server.listen)
            .await
            .with_context(|| {
                format!("cannot listen on {} (server.listen)", config.server.listen)
            })?;
        let addr = listener.local_addr()?;
        let upload_listener = TcpListener::bind(config.storage.s3_listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (storage.s3_listen)",
                    config.storage.s3_listen
                )
            })?;
        let upload_addr = upload_listener.local_addr()?;
        let metrics_listener = TcpListener::bind(config.server.metrics_listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (server.metrics_listen)",
                    config.server.metrics_listen
                )
            })?;
        let metrics_addr = metrics_listener.local_addr()?;
        let flight_listener =
            wire::bind(config.server.flight_listen, "server.flight_listen").await?;
        let pg_listener = wire::bind(config.server.pg_listen, "server.pg_listen").await?;
        let tls = match (&config.server.tls_cert, &config.server.tls_key) {
            (Some(cert), Some(key)) => Some(tls_acceptor(cert, key, &[b"h2", b"http/1.1"])?),
            _ => None,
        };
        std::fs::create_dir_all(&config.storage.data_dir).with_context(|| {
            format!(
                "cannot create {} (storage.data_dir)",
                config.storage.data_dir.display()
            )
        })?;
        let auth_url = match &config.auth.auth_url {
            Some(url) => url.clone(),
            None => own_url(addr, tls.is_some()),
        };
        let store = open_store(&config).await?;
        let lake = Lake::from_config(&config.storage)
            .context("opening the lake (storage.data_dir / storage.lake_url)")?;
        let upload_endpoint = match &config.uploads.public_url {
            Some(url) => url.clone(),
            None => own_url(upload_addr, tls.is_some()),
        };
        let drain = Drain::new();
        let cluster = Cluster::from_config(&config)?;
        let cluster_worker_listener = match &cluster {
            Some(_) => {
                wire::bind(
                    Some(config.distributed.worker_listen),
                    "distributed.worker_listen",
                )
                .await?
            }
            None => None,
        };
        let queries = QueryService::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            config.query.clone(),
            (upload_endpoint.clone(), config.uploads.bucket.clone()),
            drain.clone(),
            cluster.clone(),
        )
        .await
        .context("starting the query service")?;
        let cluster_worker = match (cluster_worker_listener, &cluster) {
            (Some(listener), Some(cluster)) => Some(cluster_worker_listener_of(
                listener,
                cluster,
                &lake,
                &queries,
                &config.query,
            )?),
            _ => None,
        };
        let loads = LoadService::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            config.uploads.clone(),
            upload_endpoint,
        )
        .await
        .context("starting the load service")?;
        let workers = CancellationToken::new();
        if let Some(cluster) = &cluster {
            cluster.start(workers.clone());
        }
        // One recorder per process; each server renders it with its own store.
        let metrics_handle = crate::observability::metrics::install();
        crate::observability::metrics::start_upkeep(metrics_handle.clone(), workers.clone());
        let metrics_router = api::metrics::router(metrics_handle, store.clone());
        queries.start(workers.clone());
        loads.start_sweeper(workers.clone());
        // A query planned on a dropped or replaced table's file list may run
        // for up to the query time limit; its files are kept that long.
        let retired_files = RetiredFileSweeper::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            std::time::Duration::from_secs(config.query.time_limit_s),
        );
        retired_files.start(workers.clone());
        api::idempotency::start_sweeper(store.clone(), clock.clone(), workers.clone());
        let engine = PipelineEngine::shared().map_err(|e| anyhow::anyhow!(e))?;
        engine.keep_compiled_in(config.storage.data_dir.join("compiled-steps"));
        {
            // Compile the built-in steps off the request path, once.
            let engine = engine.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = engine.precompile_builtins() {
                    tracing::error!(error = %e, "a built-in pipeline step does not compile");
                }
            });
        }
        // Components an operator swaps in are compiled here, not by the
        // next commit that needs them.
        crate::pipeline::manifest::watch::start(
            engine.clone(),
            crate::pipeline::files::PipelineFiles::of(&config.pipeline),
            workers.clone(),
        );
        // The pipelines' SQL (check_sum keys, inserts, daily transforms) runs
        // apart from the runtime serving HTTP, as queries do.
        let pipeline_runtime = Arc::new(
            EngineRuntime::new(config.pipeline.commit_workers + 1)
                .context("starting the pipelines' runtime")?,
        );
        let commits = LoadCommitter::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            (engine.clone(), pipeline_runtime.clone()),
            config.pipeline.clone(),
            drain.clone(),
        );
        commits.start(workers.clone());
        let daily_runs = DailyRunService::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            (engine, pipeline_runtime),
            &config,
            (workers.clone(), drain.clone()),
        );
        // Its first tick ends runs that a stopped server left RUNNING.
        daily_runs.start_scheduler();
        let upload_router = crate::s3::router(
            loads.clone(),
            lake.object_store(),
            crate::s3::results::ResultDownloads {
                links: queries.result_links(),
                store: lake.object_store(),
                clock: clock.clone(),
            },
        );
        let config = Arc::new(config);
        let idp = if config.idp.enabled {
            let idp = Idp::new(config.clone(), auth_url.clone(), clock.clone())
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
        let validator = Arc::new(TokenValidator::new(
            &config.auth,
            auth_url.clone(),
            clock.clone(),
            own_certificate.as_deref(),
        )?);
        let config_wire_idle_s = config.server.wire_idle_timeout_s;
        let listeners = 2
            + u64::from(flight_listener.is_some())
            + u64::from(pg_listener.is_some())
            + u64::from(cluster_worker.is_some());
        let limits = ConnectionLimits::for_listeners(&config.server, listeners, config.orgs.len());
        let drain_for = Duration::from_secs(config.server.drain_s);
        let drain_notice = Duration::from_millis(config.server.drain_notice_ms);
        let readiness = Readiness {
            store: store.clone(),
            lake: lake.clone(),
            drain: drain.clone(),
        };
        let state = AppState {
            config,
            validator,
            clock,
            store: store.clone(),
            queries,
            loads: loads.clone(),
            commits,
            daily_runs: daily_runs.clone(),
            readiness,
        };
        let flight = match flight_listener {
            Some(listener) => Some(flight_listener_of(listener, &state)?),
            None => None,
        };
        let pg = match pg_listener {
            Some(listener) => {
                let tls = match (&state.config.server.tls_cert, &state.config.server.tls_key) {
                    (Some(cert), Some(key)) => Some(tls_acceptor(cert, key, &[b"postgresql"])?),
                    _ => None,
                };
                Some(pg_listener_of(listener, tls, &state)?)
            }
            None => None,
        };
        let router = api::app(state, idp.clone());
        Ok(Self {
            listener,
            addr,
            tls,
            router,
            upload_listener,
            upload_addr,
            upload_router,
            metrics_listener,
            metrics_addr,
            metrics_router,
            flight,
            pg,
            cluster_worker,
            limits,
            wire_idle_timeout: Duration::from_secs(config_wire_idle_s),
            loads,
            daily_runs,
            retired_files,
            auth_url,
            idp,
            store,
            lake,
            drain,
            drain_for,
            drain_notice,
            _workers_when_dropped: workers.clone().drop_guard(),
            workers,
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

    /// Serves the APIs and the upload endpoint until SIGTERM or SIGINT, then
    /// drains; a second signal exits the process at once (130).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let signalled = stop_signals()?;
        self.run_until(signalled).await
    }

    /// Serves until `stop` resolves, then drains (see the module header) and
    /// returns when the replica may exit.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> std::io::Result<()> {
        // Scrapers are few: a small cap, out of the descriptors kept back.
        // Served until the drain is over (the task ends when this returns).
        let metrics = tokio::spawn(listener::serve(
            self.metrics_listener,
            None,
            self.metrics_router,
            ConnectionLimits {
                max_connections: api::metrics::MAX_SCRAPE_CONNECTIONS,
                ..self.limits
            },
            CancellationToken::new(),
        ));
        let _metrics = tokio_util::task::AbortOnDropHandle::new(metrics);
        let stop_accepting = CancellationToken::new();
        let flight = self.flight.map(|flight| {
            let limits = ConnectionLimits {
                busy_timeout: self.wire_idle_timeout,
                ..self.limits
            };
            listener::serve(
                flight.listener,
                self.tls.clone(),
                flight.router,
                limits,
                stop_accepting.clone(),
            )
        });
        // Stages come from other replicas' queries: served like the APIs,
        // without TLS (the secret is checked on every call; keep the
        // listener on a private network).
        let cluster_worker = self.cluster_worker.map(|worker| {
            listener::serve(
                worker.listener,
                None,
                worker.router,
                ConnectionLimits {
                    idle_timeout: worker.idle_timeout,
                    ..self.limits
                },
                stop_accepting.clone(),
            )
        });
        let pg = self.pg.map(|pg| {
            let limits = ConnectionLimits {
                busy_timeout: self.wire_idle_timeout,
                ..self.limits
            };
            serve_pg(pg, limits, stop_accepting.clone())
        });
        let serving = async {
            tokio::join!(
                listener::serve(
                    self.listener,
                    self.tls.clone(),
                    self.router,
                    self.limits,
                    stop_accepting.clone()
                ),
                listener::serve(
                    self.upload_listener,
                    self.tls,
                    self.upload_router,
                    self.limits,
                    stop_accepting.clone()
                ),
                async {
                    if let Some(flight) = flight {
                        flight.await;
                    }
                },
                async {
                    if let Some(pg) = pg {
                        pg.await;
                    }
                },
                async {
                    if let Some(worker) = cluster_worker {
                        worker.await;
                    }
                },
            )
        };
        tokio::pin!(serving);
        tokio::select! {
            _ = &mut serving => return Ok(()),
            () = stop => {}
        }
        let deadline = tokio::time::Instant::now() + self.drain_for;
        tracing::info!(
            drain_s = self.drain_for.as_secs(),
            running_jobs = self.drain.running_jobs(),
            "draining"
        );
        self.drain.begin();
        tokio::select! {
            _ = &mut serving => {}
            _ = tokio::time::sleep(self.drain_notice) => {}
        }
        stop_accepting.cancel();
        let (requests, handed_back) = tokio::join!(
            tokio::time::timeout_at(deadline, &mut serving),
            self.drain.end_jobs(deadline)
        );
        if requests.is_err() {
            tracing::warn!("requests still open at the end of the drain were cut");
        }
        self.workers.cancel();
        self.store.close().await;
        tracing::info!(handed_back, "drained");
        Ok(())
    }
}

/// Resolves on the first SIGTERM or SIGINT; the second exits the process
/// at once with 130. Registered when called.
fn stop_signals() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let (first, signalled) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        let _ = first.send(());
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::warn!("a second stop signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(async move {
        let _ = signalled.await;
    })
}

/// Opens the configured metadata store and makes sure every configured org and
/// zone has its standard databases.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let store = Store::open(
        &config.storage.data_dir,
        config.storage.database_url.as_deref(),
    )
    .await
    .context("opening the metadata store (storage.data_dir / storage.database_url)")?;
    for org in &config.orgs {
        store.ensure_standard_databases(&org.name, None).await?;
        for zone in &org.zones {
            store
                .ensure_standard_databases(&org.name, Some(zone))
                .await?;
        }
    }
    Ok(store)
}

/// The server's own address, used as `auth_url` when none is configured (the
/// embedded identity provider). Loopback and unspecified addresses read as
/// `localhost`, matching DESIGN.md's default `http://localhost:8080`.
fn own_url(addr: SocketAddr, tls: bool) -> Url {
    let scheme = if tls { "https" } else { "http" };
    let host = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        "localhost".to_string()
    } else {
        match addr {
            SocketAddr::V4(v4) => v4.ip().to_string(),
            SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
        }
    };
    Url::parse(&format!("{scheme}://{host}:{}", addr.port())).expect("well-formed URL")
}

/// rustls with TLS 1.2 and 1.3 only, for the server's certificate, offering
/// the ALPN protocols `alpn` (HTTP's two; `postgresql` on the Postgres
/// listener, which libpq asks for).
fn tls_acceptor(cert: &Path, key: &Path, alpn: &[&[u8]]) -> anyhow::Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("cannot read {} (server.tls_cert)", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read {} (server.tls_key)", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("server.tls_cert and server.tls_key do not form a usable pair")?;
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}
