//! The Postgres listener: accepts connections up to the connection cap,
//! answers the client's SSLRequest and ends TLS within the header deadline
//! (a plain connection is served only far enough to be refused before any
//! password is asked for, see `startup.rs`; without a certificate the
//! listener is on loopback, SSLRequest is answered `N` and plain
//! connections from loopback are served), then runs the message loop:
//! startup within the same deadline, statements for as long as the client
//! uses the connection, closed once nothing moved on it for
//! `server.idle_timeout_s` while no statement runs (and while a result
//! waits for a client that does not read it), or for
//! `server.wire_idle_timeout_s` while one runs. Messages are read by
//! `frames.rs`, within each phase's size limit and checked before decoding.
//! At a drain it stops accepting and closes each connection once its
//! running statement has been answered.

use std::{
    io,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use bytes::BytesMut;
use futures::SinkExt as _;
use pgwire::{
    api::{ClientInfo as _, DefaultClient, NoopHandler, PgWireConnectionState},
    error::{ErrorInfo, PgWireError},
    messages::{PgWireBackendMessage, PgWireFrontendMessage},
    tokio::server::{PgWireMessageServerCodec, process_error, process_message},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::Instant,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::{
    codec::{Framed, FramedParts},
    either::Either,
    sync::CancellationToken,
    task::TaskTracker,
};

use super::{
    PgState,
    cancel::Cancels,
    frames::{FrameError, read_message},
    sqlstate::fatal,
    startup::LakeStartup,
    statements::LakeStatements,
};
use crate::{
    auth::TokenValidator,
    listener::{Activity, ConnectionLimits, OrgShares, next_connection},
    observability::metrics,
};

/// The request code of an SSLRequest (and of a GSSENCRequest), the first
/// eight bytes a libpq client sends.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
const GSSENC_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];

type Stream = Either<tokio_rustls::server::TlsStream<TcpStream>, TcpStream>;
type Connection = Framed<crate::listener::ActivityIo<Stream>, PgWireMessageServerCodec<String>>;

/// Accepts Postgres connections on `listener` until `stop` is cancelled,
/// then lets each connection finish its running statement and returns once
/// none is left.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: PgState,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let cancels = Arc::new(Cancels::new(state.queries.clone()));
    let shares = OrgShares::new(limits.max_connections_per_org);
    let startup = Arc::new(LakeStartup::new(state.clone(), cancels.clone(), shares));
    let frame_limit = usize::try_from(state.config.server.max_body_bytes).unwrap_or(usize::MAX);
    let validator = state.validator.clone();
    let statements = Arc::new(LakeStatements::new(state));
    let over_cap = |_| metrics::pg_connection("over_cap");
    while let Some((stream, peer, permit)) =
        next_connection(&listener, &open, &stop, over_cap).await
    {
        let (tls, startup, statements, cancels, validator, stop) = (
            tls.clone(),
            startup.clone(),
            statements.clone(),
            cancels.clone(),
            validator.clone(),
            stop.clone(),
        );
        connections.spawn(async move {
            let _permit = permit;
            let activity = Activity::new();
            let negotiated = tokio::time::timeout(
                limits.header_read_timeout,
                negotiate(stream, peer, &tls, &activity),
            )
            .await;
            let socket = match negotiated {
                Ok(Ok(socket)) => socket,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "postgres connection failed before its startup");
                    metrics::pg_connection("tls_failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "postgres connection timed out before its startup");
                    metrics::pg_connection("abandoned");
                    return;
                }
            };
            let startup_deadline = Instant::now() + limits.header_read_timeout;
            let handlers = Handlers {
                startup,
                statements,
                cancels,
                validator,
                frame_limit,
                peer: peer.ip(),
            };
            let messages = message_loop(socket, startup_deadline, &handlers, &activity, &stop);
            match activity.close_when_idle(messages, limits.idle()).await {
                Some(Err(e)) => tracing::debug!(%peer, error = %e, "postgres connection ended with an error"),
                None => tracing::debug!(%peer, "postgres connection closed: idle"),
                Some(Ok(())) => {}
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// What answers a connection's messages, and what bounds them.
struct Handlers {
    startup: Arc<LakeStartup>,
    statements: Arc<LakeStatements>,
    cancels: Arc<Cancels>,
    /// Its failure budget counts cancel keys that name no session.
    validator: Arc<TokenValidator>,
    /// The largest message of a ready session (`server.max_body_bytes`).
    frame_limit: usize,
    peer: IpAddr,
}

/// Answers the client's SSLRequest (and GSSENCRequest) and ends TLS; a
/// client that starts without one gets a plain connection, with the bytes
/// already read put back. Without a certificate SSLRequest is answered `N`
/// (libpq's default `sslmode=prefer` then starts in the plain; `require`
/// stops with "server does not support SSL").
async fn negotiate(
    mut stream: TcpStream,
    peer: SocketAddr,
    tls: &Option<TlsAcceptor>,
    activity: &Activity,
) -> io::Result<Connection> {
    let mut first = [0u8; 8];
    loop {
        stream.read_exact(&mut first).await?;
        match first {
            SSL_REQUEST => {
                let Some(tls) = tls else {
                    stream.write_all(b"N").await?;
                    continue;
                };
                stream.write_all(b"S").await?;
                let stream = tls.accept(stream).await?;
                return Ok(framed(
                    Either::Left(stream),
                    peer,
                    true,
                    BytesMut::new(),
                    activity,
                ));
            }
            // No GSSAPI: libpq then asks for TLS, or starts in the plain.
            GSSENC_REQUEST => stream.write_all(b"N").await?,
            _ => {
                let read = BytesMut::from(&first[..]);
                return Ok(framed(Either::Right(stream), peer, false, read, activity));
            }
        }
    }
}

fn framed(
    stream: Stream,
    peer: SocketAddr,
    secure: bool,
    read: BytesMut,
    activity: &Activity,
) -> Connection {
    let codec = PgWireMessageServerCodec::new(DefaultClient::new(peer, secure));
    let mut parts = FramedParts::new(activity.watch(stream), codec);
    parts.read_buf = read;
    let mut socket = Framed::from_parts(parts);
    socket.set_state(PgWireConnectionState::AwaitingStartup);
    socket
}

/// Reads and answers the connection's messages until the client leaves,
/// sends bytes that are not the protocol (or more than its phase allows),
/// misses the startup deadline, or the replica drains (between statements).
async fn message_loop(
    mut socket: Connection,
    startup_deadline: Instant,
    handlers: &Handlers,
    activity: &Activity,
    stop: &CancellationToken,
) -> io::Result<()> {
    let noop = Arc::new(NoopHandler);
    // How the startup ended, counted once: `ready`, `refused`, or (at the
    // loop's end) `abandoned`.
    let mut counted = false;
    loop {
        let limit = handlers.frame_limit;
        let message = match socket.state() {
            PgWireConnectionState::AwaitingStartup
            | PgWireConnectionState::AuthenticationInProgress => tokio::select! {
                message = read_message(&mut socket, limit) => message,
                () = tokio::time::sleep_until(startup_deadline) => Ok(None),
            },
            PgWireConnectionState::ReadyForQuery => tokio::select! {
                message = read_message(&mut socket, limit) => message,
                () = stop.cancelled() => Ok(None),
            },
            _ => read_message(&mut socket, limit).await,
        };
        let message = match message {
            Ok(Some(PgWireFrontendMessage::Terminate(_))) | Ok(None) => break,
            Ok(Some(message)) => message,
            Err(e) => {
                if !counted {
                    metrics::pg_connection("abandoned");
                }
                return refuse_frame(socket, e).await;
            }
        };
        // One cancel request per connection, as Postgres takes it; a key
        // that names no session counts against the sender's budget.
        if let PgWireFrontendMessage::CancelRequest(request) = message {
            metrics::pg_connection("cancel_request");
            let budget = handlers.validator.exchange_failures();
            if budget.check(handlers.peer).is_ok() && !handlers.cancels.cancel(request).await {
                budget.failed(handlers.peer);
            }
            return Ok(());
        }
        let extended = message.is_extended_query();
        let in_startup = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        // A statement runs from its message to its answer: the long idle
        // timeout holds meanwhile.
        let busy = (!in_startup).then(|| activity.busy());
        let processed = process_message(
            message,
            &mut socket,
            handlers.startup.clone(),
            handlers.statements.clone(),
            handlers.statements.clone(),
            noop.clone(),
            handlers.cancels.clone(),
        )
        .await;
        drop(busy);
        if in_startup && !counted {
            let outcome = match (&processed, socket.state()) {
                (Err(_), _) => Some("refused"),
                (Ok(()), PgWireConnectionState::ReadyForQuery) => Some("ready"),
                _ => None,
            };
            if let Some(outcome) = outcome {
                metrics::pg_connection(outcome);
                counted = true;
            }
        }
        if let Err(e) = processed {
            let info = ErrorInfo::from(e);
            if info.is_fatal() || in_startup {
                // The connection ends here: the error, and nothing after it
                // (no ReadyForQuery, no further message read).
                socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await?;
                return socket.close().await;
            }
            process_error(
                &mut socket,
                PgWireError::UserError(Box::new(info)),
                extended,
            )
            .await?;
        }
    }
    if !counted {
        metrics::pg_connection("abandoned");
    }
    socket.close().await
}

/// Ends a connection whose frame was refused: FATAL with the frame's
/// SQLSTATE (nothing more of the frame is read), or just the close when
/// the socket itself failed.
async fn refuse_frame(mut socket: Connection, refused: FrameError) -> io::Result<()> {
    if let FrameError::Io(e) = refused {
        return Err(e);
    }
    tracing::debug!(error = %refused, "postgres frame refused");
    metrics::pg_connection("frame_refused");
    let info = ErrorInfo::from(fatal(refused.code(), refused.to_string()));
    socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    socket.close().await
}
