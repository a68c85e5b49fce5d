//! Serves one listener (the APIs, the upload endpoint, any later one): accepts
//! TCP connections, speaks TLS when configured, and hands each connection to
//! hyper, with the guards every listener needs against clients that hold
//! connections without using them (slowloris):
//!
//! - a cap on open connections: past it a new connection is closed at once,
//!   before anything is read, so the process never runs out of descriptors;
//! - a deadline for the TLS handshake and for each request's headers, and
//!   one for the connection's first request (HTTP/2, gRPC on the Flight
//!   listener among them, has no header-read timeout of its own: a client
//!   that sends the preface, or nothing, and no request is closed then);
//! - a request refused before its body was read has the rest of its body
//!   read past, within bounds, beside its answer (`linger.rs`), so the
//!   client gets the answer rather than a reset;
//! - idle timeouts (`activity.rs`): a connection on which no byte moved for
//!   the short one while nothing runs on it, or the long one while a
//!   request runs, is closed, and so is one whose response its client has
//!   stopped reading.
//!
//! Each connection gets TCP_NODELAY: small JSON responses must not wait on
//! delayed ACKs.
//!
//! When told to stop (a drain), it stops accepting, closes idle keep-alive
//! connections, lets each open request finish and closes its connection
//! after it, and returns once every connection is gone (the caller bounds
//! the wait). A response that carries [`CloseConnection`] (a front end's
//! refusal of a call's credentials) ends its connection the same way.
//!
//! Every request carries the connection's [`Peer`] and its
//! [`ConnectionOrg`] (the org's share of the cap, see `shares.rs`); what
//! moves on a connection and its timeouts are `activity.rs`'s.

mod activity;
mod linger;
mod shares;

pub(crate) use activity::{Activity, ActivityIo, IdleTimeouts};
pub use shares::{ConnectionOrg, OrgShare, OrgShares, ShareRefused};

use std::{net::SocketAddr, sync::Arc, time::Duration};

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder as ConnectionBuilder, graceful::GracefulConnection},
    service::TowerToHyperService,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_rustls::TlsAcceptor;
use tokio_util::{either::Either, sync::CancellationToken, task::TaskTracker};

use crate::config::ServerConfig;

/// Descriptors kept back from the connection caps for the store, the lake,
/// log files and outgoing requests.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The guards of one listener (`server.max_connections`,
/// `server.max_connections_per_org`, `server.header_read_timeout_s`,
/// `server.idle_timeout_s`, and on the wire listeners
/// `server.wire_idle_timeout_s` while a statement runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// Each org's share of `max_connections`, once its connections have
    /// authenticated (the wire listeners count them).
    pub max_connections_per_org: usize,
    pub header_read_timeout: Duration,
    /// Nothing moved while nothing runs, or a response waits for its reader.
    pub idle_timeout: Duration,
    /// Nothing moved while a statement or request runs.
    pub busy_timeout: Duration,
}

impl ConnectionLimits {
    /// The configured limits, with the connection cap lowered to this
    /// listener's share of the process's descriptors when the configured cap
    /// would not fit (`listeners` serve from the same budget), for `orgs`
    /// configured orgs.
    pub fn for_listeners(server: &ServerConfig, listeners: u64, orgs: usize) -> Self {
        let configured = server.max_connections;
        let max_connections = match descriptor_budget() {
            Some(budget) => {
                let share = (budget.saturating_sub(RESERVED_DESCRIPTORS) / listeners.max(1)).max(1);
                if (configured as u64) > share {
                    tracing::warn!(
                        configured,
                        share,
                        "server.max_connections is more than the open-file limit allows; \
                         each listener accepts at most {share} connections (raise `ulimit -n`)"
                    );
                }
                configured.min(share as usize)
            }
            None => configured,
        };
        let idle_timeout = Duration::from_secs(server.idle_timeout_s);
        Self {
            max_connections,
            max_connections_per_org: server.connections_per_org(orgs).min(max_connections),
            header_read_timeout: Duration::from_secs(server.header_read_timeout_s),
            idle_timeout,
            busy_timeout: idle_timeout,
        }
    }

    /// The two idle timeouts.
    pub(crate) fn idle(&self) -> IdleTimeouts {
        IdleTimeouts {
            idle: self.idle_timeout,
            busy: self.busy_timeout.max(self.idle_timeout),
        }
    }
}

/// Request extension: the address the request's connection comes from
/// (the failure budgets of password front ends count by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// Response extension: the listener closes the connection once this
/// response is sent (gracefully: HTTP/2 says GOAWAY), so a client whose
/// credentials were refused does not keep its place under the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseConnection;

/// The open-file limit, raised first to its hard limit (the soft default of
/// 1,024 is too small for a server).
#[cfg(unix)]
fn descriptor_budget() -> Option<u64> {
    // SAFETY: getrlimit/setrlimit write and read only the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
        (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
    }
}

#[cfg(not(unix))]
fn descriptor_budget() -> Option<u64> {
    None
}

/// Accepts connections on `listener` until `stop` is cancelled and serves
/// `router` on each (HTTP/1.1 and HTTP/2, through TLS when `tls` is set);
/// then finishes the open requests and returns when no connection is left.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let service = TowerToHyperService::new(router);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let shares = OrgShares::new(limits.max_connections_per_org);
    let connections = TaskTracker::new();
    while let Some((stream, peer, permit)) = next_connection(&listener, &open, &stop, |_| {}).await
    {
        let activity = Activity::new();
        let requested = CancellationToken::new();
        let close = stop.child_token();
        let service = {
            let (service, activity, requested, close) = (
                service.clone(),
                activity.clone(),
                requested.clone(),
                close.clone(),
            );
            let org = ConnectionOrg::new(shares.clone());
            hyper::service::service_fn(move |mut request: http::Request<_>| {
                requested.cancel();
                request.extensions_mut().insert(Peer(peer));
                request.extensions_mut().insert(org.clone());
                let busy = activity.busy();
                let (request, unread) = linger::watch_request(request);
                let answered = hyper::service::Service::call(&service, request);
                let (activity, close) = (activity.clone(), close.clone());
                async move {
                    let response = answered.await?;
                    if let Some(rest) = unread.and_then(linger::Unread::rest) {
                        tokio::spawn(linger::read_past(rest));
                    }
                    drop(busy);
                    if response.extensions().get::<CloseConnection>().is_some() {
                        close.cancel();
                    }
                    Ok::<_, std::convert::Infallible>(
                        response.map(|body| axum::body::Body::new(activity.watch_body(body))),
                    )
                }
            })
        };
        let tls = tls.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = ConnectionBuilder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let stream = match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => Either::Left(stream),
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
                None => Either::Right(stream),
            };
            let io = TokioIo::new(activity.watch(stream));
            let connection = builder.serve_connection_with_upgrades(io, service);
            let connection = until_closed(connection, &close);
            let connection =
                first_request_in_time(connection, &requested, limits.header_read_timeout);
            let served = activity
                .close_when_idle(connection, limits.idle())
                .await
                .flatten();
            match served {
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "connection ended with an error")
                }
                None => tracing::debug!(%peer, "connection closed: idle"),
                Some(Ok(())) => {}
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Serves `connection` until it ends; once `close` is cancelled (the drain,
/// or a response that asked for it), shuts it down gracefully: open
/// requests finish, idle keep-alive connections close at once.
async fn until_closed<C: GracefulConnection>(
    connection: C,
    close: &CancellationToken,
) -> Result<(), C::Error> {
    tokio::pin!(connection);
    tokio::select! {
        ended = connection.as_mut() => return ended,
        () = close.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    connection.await
}

/// The next connection under the cap `open`, with its permit and
/// TCP_NODELAY set; `None` once `stop` is cancelled. Accept errors (out of
/// descriptors and the like) are waited out, not spun on; a connection past
/// the cap is closed at once, before anything is read (`over_cap` hears of
/// it).
pub(crate) async fn next_connection(
    listener: &TcpListener,
    open: &Arc<Semaphore>,
    stop: &CancellationToken,
    over_cap: impl Fn(SocketAddr),
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return None,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection refused: at the connection cap");
            over_cap(peer);
            continue;
        };
        let _ = stream.set_nodelay(true);
        return Some((stream, peer, permit));
    }
}

/// Drives `connection` until it ends (`Some`); `None` (the connection is
/// dropped, which closes it) when `requested` was not cancelled `within`
/// the first poll: no request began on it in time.
async fn first_request_in_time<F: Future>(
    connection: F,
    requested: &CancellationToken,
    within: Duration,
) -> Option<F::Output> {
    tokio::pin!(connection);
    tokio::select! {
        ended = connection.as_mut() => return Some(ended),
        () = requested.cancelled() => {}
        () = tokio::time::sleep(within) => return None,
    }
    Some(connection.await)
}
