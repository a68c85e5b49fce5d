//! What moves on one connection, and when a connection that does not move
//! is closed:
//!
//! - idle: nothing moved for the short timeout (`server.idle_timeout_s`)
//!   while no statement or request runs on it;
//! - busy: nothing moved for the long timeout (`server.wire_idle_timeout_s`
//!   on the wire listeners) while one runs, since a statement is silent
//!   while its query works;
//! - stalled: a response the server has ready waited for the client to
//!   read it for the short timeout (a write that does not complete, or a
//!   response body that hyper stopped asking for because the client's
//!   HTTP/2 window stays shut), whether or not a statement runs, so a
//!   client that stops reading a stream gives its slot back long before the
//!   query's time limit.
//!
//! It never reads or interprets the bytes themselves.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Instant,
};

/// "Not waiting" in the stall clocks.
const NOT_WAITING: u64 = u64::MAX;

/// The two idle timeouts of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleTimeouts {
    /// Nothing runs on the connection (and the stall budget).
    pub idle: Duration,
    /// A statement or request runs on it.
    pub busy: Duration,
}

/// When a byte last moved on one connection, whether a statement runs on it,
/// and since when a response waits for the client; times in milliseconds
/// since `start`.
#[derive(Clone)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
    running: Arc<AtomicUsize>,
    write_waiting_ms: Arc<AtomicU64>,
    body_waiting_ms: Arc<AtomicU64>,
}

/// A statement or request running on a connection: the busy timeout
/// applies until it is dropped.
pub(crate) struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            running: Arc::new(AtomicUsize::new(0)),
            write_waiting_ms: Arc::new(AtomicU64::new(NOT_WAITING)),
            body_waiting_ms: Arc::new(AtomicU64::new(NOT_WAITING)),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Marks a statement (or request) as running until the guard drops.
    pub(crate) fn busy(&self) -> Busy {
        self.running.fetch_add(1, Ordering::Relaxed);
        Busy(self.running.clone())
    }

    pub(crate) fn watch<T>(&self, inner: T) -> ActivityIo<T> {
        ActivityIo {
            inner,
            activity: self.clone(),
        }
    }

    /// `body` as a response body that keeps the connection busy until it
    /// ends and tells when hyper stops asking for its frames.
    pub(crate) fn watch_body<B>(&self, body: B) -> ActivityBody<B> {
        ActivityBody {
            inner: body,
            activity: self.clone(),
            _busy: self.busy(),
        }
    }

    /// When the connection is to be closed if nothing changes before.
    fn deadline(&self, timeouts: IdleTimeouts) -> Instant {
        let last = self.at(self.last_ms.load(Ordering::Relaxed));
        let quiet = if self.running.load(Ordering::Relaxed) > 0 {
            timeouts.busy
        } else {
            timeouts.idle
        };
        let mut deadline = last + quiet;
        for waiting in [&self.write_waiting_ms, &self.body_waiting_ms] {
            let since = waiting.load(Ordering::Relaxed);
            if since != NOT_WAITING {
                deadline = deadline.min(self.at(since) + timeouts.idle);
            }
        }
        deadline
    }

    /// Drives `connection` until it ends (`Some`) or it was idle, busy or
    /// stalled past its timeout (`None`: the connection is dropped, which
    /// closes it).
    pub(crate) async fn close_when_idle<F: Future>(
        &self,
        connection: F,
        timeouts: IdleTimeouts,
    ) -> Option<F::Output> {
        tokio::pin!(connection);
        loop {
            // A statement that starts or ends changes the deadline without a
            // byte moving: look again at least once per short timeout.
            let check = Instant::now() + timeouts.idle;
            let deadline = self.deadline(timeouts).min(check);
            tokio::select! {
                ended = connection.as_mut() => return Some(ended),
                _ = tokio::time::sleep_until(deadline) => {
                    if self.deadline(timeouts) <= Instant::now() {
                        return None;
                    }
                }
            }
        }
    }

    fn waiting(clock: &AtomicU64, now: u64) {
        // Keeps the first moment of a wait.
        let _ = clock.compare_exchange(NOT_WAITING, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn done_waiting(clock: &AtomicU64) {
        clock.store(NOT_WAITING, Ordering::Relaxed);
    }
}

/// A connection's byte stream that records when bytes move and since when
/// a write waits.
pub(crate) struct ActivityIo<T> {
    inner: T,
    activity: Activity,
}

impl<T> ActivityIo<T> {
    fn wrote(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) if *n > 0 => {
                Activity::done_waiting(&self.activity.write_waiting_ms);
                self.activity.touch();
            }
            Poll::Pending => {
                Activity::waiting(&self.activity.write_waiting_ms, self.activity.now_ms())
            }
            _ => Activity::done_waiting(&self.activity.write_waiting_ms),
        }
    }
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
        self.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        match polled {
            Poll::Pending => {
                Activity::waiting(&self.activity.write_waiting_ms, self.activity.now_ms())
            }
            Poll::Ready(_) => Activity::done_waiting(&self.activity.write_waiting_ms),
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that keeps its connection busy until it ends, and
/// records since when a frame it gave was not followed by hyper asking for
/// the next (the client does not read: its HTTP/2 window stays shut).
pub(crate) struct ActivityBody<B> {
    inner: B,
    activity: Activity,
    _busy: Busy,
}

impl<B: HttpBody + Unpin> HttpBody for ActivityBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Activity::done_waiting(&self.activity.body_waiting_ms);
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && frame.is_data()
        {
            Activity::waiting(&self.activity.body_waiting_ms, self.activity.now_ms());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for ActivityBody<B> {
    fn drop(&mut self) {
        Activity::done_waiting(&self.activity.body_waiting_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: IdleTimeouts = IdleTimeouts {
        idle: Duration::from_secs(60),
        busy: Duration::from_secs(1800),
    };

    #[test]
    fn the_long_timeout_holds_only_while_a_statement_runs() {
        let activity = Activity::new();
        activity.last_ms.store(1_000, Ordering::Relaxed);
        let last = activity.at(1_000);
        assert_eq!(activity.deadline(TIMEOUTS), last + TIMEOUTS.idle);
        let busy = activity.busy();
        assert_eq!(activity.deadline(TIMEOUTS), last + TIMEOUTS.busy);
        drop(busy);
        assert_eq!(activity.deadline(TIMEOUTS), last + TIMEOUTS.idle);
    }

    #[test]
    fn a_response_nobody_reads_ends_a_busy_connection_at_the_short_timeout() {
        let activity = Activity::new();
        let _busy = activity.busy();
        Activity::waiting(&activity.body_waiting_ms, 5_000);
        // A later wait does not move the first one's start.
        Activity::waiting(&activity.body_waiting_ms, 9_000);
        assert_eq!(
            activity.deadline(TIMEOUTS),
            activity.at(5_000) + TIMEOUTS.idle
        );
        Activity::done_waiting(&activity.body_waiting_ms);
        Activity::waiting(&activity.write_waiting_ms, 7_000);
        assert_eq!(
            activity.deadline(TIMEOUTS),
            activity.at(7_000) + TIMEOUTS.idle
        );
        Activity::done_waiting(&activity.write_waiting_ms);
        assert_eq!(activity.deadline(TIMEOUTS), activity.at(0) + TIMEOUTS.busy);
    }
}
