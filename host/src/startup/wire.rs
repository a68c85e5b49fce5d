//! The wire-protocol listeners the application serves beside its HTTP ones
//! (Arrow Flight SQL, the Postgres protocol, a distributed cluster's worker): binding each configured one,
//! and what each serves. Without a protocol's cargo feature its key is
//! refused by `Config::validate` first, and the functions here say so.

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::{api::AppState, listener::ConnectionLimits};

/// The Postgres listener, its address and what it serves.
#[cfg_attr(not(feature = "pg-wire"), allow(dead_code))]
pub(super) struct PgListener {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    /// The server's certificate, offering ALPN `postgresql`.
    pub tls: Option<TlsAcceptor>,
    #[cfg(feature = "pg-wire")]
    pub state: crate::pg::PgState,
}

/// The Flight SQL listener, its address and its service.
pub(super) struct FlightListener {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    pub router: axum::Router,
}

/// The worker listener of a distributed cluster, its address and its
/// service.
pub(super) struct ClusterWorkerListener {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    pub router: axum::Router,
    pub idle_timeout: std::time::Duration,
}

/// The worker listener of `cluster`: its stages run in sessions over
/// `lake`, sharing the query service's parquet footer cache.
pub(super) fn cluster_worker_listener_of(
    listener: TcpListener,
    cluster: &crate::cluster::Cluster,
    lake: &crate::lake::Lake,
    queries: &crate::query::QueryService,
    limits: &crate::config::QueryConfig,
) -> anyhow::Result<ClusterWorkerListener> {
    Ok(ClusterWorkerListener {
        addr: listener.local_addr()?,
        listener,
        router: cluster.worker_router(lake, queries.metadata_cache()),
        // A stage may compute silently as long as a query may run.
        idle_timeout: std::time::Duration::from_secs(limits.time_limit_s + 60),
    })
}

/// A listener on `address` when the key `key` sets one.
pub(super) async fn bind(
    address: Option<SocketAddr>,
    key: &str,
) -> anyhow::Result<Option<TcpListener>> {
    match address {
        Some(address) => {
            Ok(Some(TcpListener::bind(address).await.with_context(
                || format!("cannot listen on {address} ({key})"),
            )?))
        }
        None => Ok(None),
    }
}

/// The Postgres listener serving the query service of `state`.
#[cfg(feature = "pg-wire")]
pub(super) fn pg_listener_of(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: &AppState,
) -> anyhow::Result<PgListener> {
    Ok(PgListener {
        addr: listener.local_addr()?,
        listener,
        tls,
        state: crate::pg::PgState::new(
            state.config.clone(),
            state.validator.clone(),
            state.queries.clone(),
        ),
    })
}

/// Without the Postgres protocol compiled in, `Config::validate` refuses the
/// key first.
#[cfg(not(feature = "pg-wire"))]
pub(super) fn pg_listener_of(
    _listener: TcpListener,
    _tls: Option<TlsAcceptor>,
    _state: &AppState,
) -> anyhow::Result<PgListener> {
    anyhow::bail!("server.pg_listen: this lakehost was built without the Postgres wire protocol")
}

/// Serves the Postgres listener: over TLS, or without a certificate in the
/// plain on loopback (`Config::validate` allows no other address then).
#[cfg(feature = "pg-wire")]
pub(super) async fn serve_pg(pg: PgListener, limits: ConnectionLimits, stop: CancellationToken) {
    crate::pg::serve(pg.listener, pg.tls, pg.state, limits, stop).await
}

#[cfg(not(feature = "pg-wire"))]
pub(super) async fn serve_pg(_pg: PgListener, _limits: ConnectionLimits, _stop: CancellationToken) {
}

/// The Flight SQL listener serving the query service of `state`.
#[cfg(feature = "flight-sql")]
pub(super) fn flight_listener_of(
    listener: TcpListener,
    state: &AppState,
) -> anyhow::Result<FlightListener> {
    let addr = listener.local_addr()?;
    let router = crate::flight::router(crate::flight::FlightState {
        config: state.config.clone(),
        validator: state.validator.clone(),
        store: state.store.clone(),
        queries: state.queries.clone(),
        sessions: std::sync::Arc::new(crate::flight::sessions::FlightSessions::new(
            state.clock.clone(),
        )),
    });
    Ok(FlightListener {
        listener,
        addr,
        router,
    })
}

/// Without Flight SQL compiled in, `Config::validate` refuses the key first.
#[cfg(not(feature = "flight-sql"))]
pub(super) fn flight_listener_of(
    _listener: TcpListener,
    _state: &AppState,
) -> anyhow::Result<FlightListener> {
    anyhow::bail!("server.flight_listen: this lakehost was built without Flight SQL")
}
