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
//! - an idle timeout: a connection on which no byte moved for that long is
//!   closed, whether it never sent anything or sits between requests.
//!
//! Each connection gets TCP_NODELAY: small JSON responses must not wait on
//! delayed ACKs.
//!
//! When told to stop (a drain), it stops accepting, closes idle keep-alive
//! connections, lets each open request finish and closes its connection
//! after it, and returns once every connection is gone (the caller bounds
//! the wait).

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder as ConnectionBuilder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;

/// Descriptors kept back from the connection caps for the store, the lake,
/// log files and outgoing requests.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The guards of one listener (`server.max_connections`,
/// `server.header_read_timeout_s`, `server.idle_timeout_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    /// The configured limits, with the connection cap lowered to this
    /// listener's share of the process's descriptors when the configured cap
    /// would not fit (`listeners` serve from the same budget).
    pub fn for_listeners(server: &ServerConfig, listeners: u64) -> Self {
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
        Self {
            max_connections,
            header_read_timeout: Duration::from_secs(server.header_read_timeout_s),
            idle_timeout: Duration::from_secs(server.idle_timeout_s),
        }
    }
}

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
    let connections = GracefulShutdown::new();
    while let Some((stream, peer, permit)) = next_connection(&listener, &open, &stop, |_| {}).await
    {
        let requested = CancellationToken::new();
        let service = {
            let service = service.clone();
            let requested = requested.clone();
            hyper::service::service_fn(move |request| {
                requested.cancel();
                hyper::service::Service::call(&service, request)
            })
        };
        let tls = tls.clone();
        let drain = connections.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let activity = Activity::new();
            let mut builder = ConnectionBuilder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let served = match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let io = TokioIo::new(activity.watch(stream));
                    let connection =
                        drain.watch(builder.serve_connection_with_upgrades(io, service));
                    let connection =
                        first_request_in_time(connection, &requested, limits.header_read_timeout);
                    activity
                        .close_when_idle(connection, limits.idle_timeout)
                        .await
                        .flatten()
                }
                None => {
                    let io = TokioIo::new(activity.watch(stream));
                    let connection =
                        drain.watch(builder.serve_connection_with_upgrades(io, service));
                    let connection =
                        first_request_in_time(connection, &requested, limits.header_read_timeout);
                    activity
                        .close_when_idle(connection, limits.idle_timeout)
                        .await
                        .flatten()
                }
            };
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
    connections.shutdown().await;
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

/// When a byte last moved on one connection, in milliseconds since `start`.
#[derive(Clone)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn watch<T>(&self, inner: T) -> ActivityIo<T> {
        ActivityIo {
            inner,
            activity: self.clone(),
        }
    }

    /// Drives `connection` until it ends (`Some`) or nothing moved on it for
    /// `idle` (`None`: the connection is dropped, which closes it).
    pub(crate) async fn close_when_idle<F: Future>(
        &self,
        connection: F,
        idle: Duration,
    ) -> Option<F::Output> {
        tokio::pin!(connection);
        loop {
            let deadline = self.last() + idle;
            tokio::select! {
                ended = connection.as_mut() => return Some(ended),
                _ = tokio::time::sleep_until(deadline) => {
                    if self.last() + idle <= Instant::now() {
                        return None;
                    }
                }
            }
        }
    }
}

/// A connection's byte stream that records when bytes move.
pub(crate) struct ActivityIo<T> {
    inner: T,
    activity: Activity,
}

impl<T: AsyncRead + Unpin> AsyncRead for ActivityIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ActivityIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
