//! Lingering close: a request refused before its body was read (a missing
//! token, a role below the route's, a 413 on a chunked body) has the rest
//! of its body read and dropped beside its answer, so the answer reaches
//! its client and the connection stays usable.
//!
//! Without it hyper closes such a connection once the answer is written,
//! with the client's unread bytes still in the socket; the kernel then
//! resets the connection, and a client still sending its body (most send
//! the whole body before they read) loses the answer to the reset and sees
//! "connection closed before message completed" instead of the 401 or 403.
//!
//! Bounded: at most [`LINGER_BYTES`] more are read, within [`LINGER_TIME`].
//! A body whose declared rest is larger is not read at all, and its
//! connection is closed as before (the client of a refused upload that
//! large may see the reset; one that sends `Expect: 100-continue` never
//! sends the body and always gets the answer). Nothing is read for a
//! request that sent `Expect: 100-continue` either: reading would ask its
//! client for a body the answer already refused.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use http_body_util::BodyExt as _;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::oneshot;

/// The most of a refused request's body read past.
pub(crate) const LINGER_BYTES: u64 = 8 * 1024 * 1024;

/// How long a refused request's body is read past at most.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(5);

/// A request body that hands itself back, when dropped before its end, to
/// whoever holds the [`Unread`] made with it.
pub(crate) struct Lingering<B> {
    inner: Option<B>,
    unread: Option<oneshot::Sender<B>>,
}

/// The rest of a request body its handler dropped unread, if it did.
pub(crate) struct Unread<B>(oneshot::Receiver<B>);

impl<B: HttpBody + Unpin> Lingering<B> {
    /// `body`, watched; `Err(body)` as it was when there is nothing to read
    /// past (no body) or it is to be left unread (`leave_unread`: one its
    /// client holds back for a `100 Continue`, or an HTTP/2 stream).
    pub(crate) fn watch(body: B, leave_unread: bool) -> Result<(Self, Unread<B>), B> {
        if body.is_end_stream() || leave_unread {
            return Err(body);
        }
        let (sender, receiver) = oneshot::channel();
        Ok((
            Self {
                inner: Some(body),
                unread: Some(sender),
            },
            Unread(receiver),
        ))
    }
}

impl<B: HttpBody + Unpin> HttpBody for Lingering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // Read to its end (or broken): nothing to read past.
            self.unread = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl<B> Drop for Lingering<B> {
    fn drop(&mut self) {
        if let (Some(unread), Some(inner)) = (self.unread.take(), self.inner.take()) {
            let _ = unread.send(inner);
        }
    }
}

/// `request` with its body watched, and what tells afterwards whether its
/// handler left part of the body unread. HTTP/1 only: an HTTP/2 stream
/// dropped unread is reset alone, its answer and connection unharmed.
pub(crate) fn watch_request<B>(
    request: http::Request<B>,
) -> (http::Request<axum::body::Body>, Option<Unread<B>>)
where
    B: HttpBody<Data = bytes::Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    let leave_unread = request.version() >= http::Version::HTTP_2
        || request
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (parts, body) = request.into_parts();
    match Lingering::watch(body, leave_unread) {
        Ok((body, unread)) => (
            http::Request::from_parts(parts, axum::body::Body::new(body)),
            Some(unread),
        ),
        Err(body) => (
            http::Request::from_parts(parts, axum::body::Body::new(body)),
            None,
        ),
    }
}

impl<B: HttpBody + Unpin> Unread<B> {
    /// What the handler left of the body, when it dropped the body before
    /// its end and the declared rest is within the bound; `None` when the
    /// body was read to its end, is still held (a handler that handed it
    /// on), or is too large to read past.
    pub(crate) fn rest(mut self) -> Option<B> {
        let rest = self.0.try_recv().ok()?;
        (!rest.is_end_stream() && rest.size_hint().lower() <= LINGER_BYTES).then_some(rest)
    }
}

/// Reads `rest` and drops what it reads, up to [`LINGER_BYTES`] within
/// [`LINGER_TIME`]; the bytes read. Run beside the answer: a client that
/// waits for the answer before it sends more gets it at once.
pub(crate) async fn read_past<B>(mut rest: B) -> u64
where
    B: HttpBody + Unpin,
{
    let mut read = 0u64;
    let reading = async {
        while let Some(Ok(frame)) = rest.frame().await {
            if let Some(data) = frame.data_ref() {
                read += bytes::Buf::remaining(data) as u64;
                if read > LINGER_BYTES {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, reading).await;
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;

    use bytes::Bytes;
    use futures::StreamExt as _;
    use http_body_util::{Full, StreamBody};

    /// A body of data frames, one per size, none declaring a length.
    type Chunks =
        StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    fn chunks(sizes: &[usize]) -> Chunks {
        let frames: Vec<_> = sizes
            .iter()
            .map(|n| Ok(Frame::data(Bytes::from(vec![b'x'; *n]))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_body_dropped_unread_is_read_past() {
        let (body, unread) = Lingering::watch(chunks(&[10, 20, 30]), false).ok().unwrap();
        drop(body);
        assert_eq!(read_past(unread.rest().unwrap()).await, 60);
    }

    #[tokio::test]
    async fn a_body_read_halfway_is_read_past_from_where_it_stopped() {
        let (mut body, unread) = Lingering::watch(chunks(&[10, 20, 30]), false).ok().unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), 10);
        drop(body);
        assert_eq!(read_past(unread.rest().unwrap()).await, 50);
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_not_handed_back() {
        let (body, unread) = Lingering::watch(chunks(&[10, 20]), false).ok().unwrap();
        let read = body.collect().await.unwrap().to_bytes();
        assert_eq!(read.len(), 30);
        assert!(unread.rest().is_none());
    }

    #[test]
    fn a_body_still_held_is_not_waited_for() {
        let (body, unread) = Lingering::watch(chunks(&[10]), false).ok().unwrap();
        assert!(unread.rest().is_none());
        drop(body);
    }

    #[tokio::test]
    async fn a_declared_rest_over_the_bound_is_left_unread() {
        let big = Full::new(Bytes::from(vec![0u8; LINGER_BYTES as usize + 1]));
        let (body, unread) = Lingering::watch(big, false).ok().unwrap();
        drop(body);
        assert!(unread.rest().is_none());
        let small = Full::new(Bytes::from(vec![0u8; 1024]));
        let (body, unread) = Lingering::watch(small, false).ok().unwrap();
        drop(body);
        assert_eq!(read_past(unread.rest().unwrap()).await, 1024);
    }

    #[tokio::test]
    async fn an_undeclared_rest_is_read_up_to_the_bound_only() {
        let chunk = 1024 * 1024;
        let many = vec![chunk; LINGER_BYTES as usize / chunk + 4];
        let (body, unread) = Lingering::watch(chunks(&many), false).ok().unwrap();
        drop(body);
        assert_eq!(
            read_past(unread.rest().unwrap()).await,
            LINGER_BYTES + chunk as u64,
            "stops at the first chunk past the bound"
        );
    }

    #[tokio::test]
    async fn a_rest_that_never_ends_is_given_up_after_the_time_bound() {
        // A client that sends 10 bytes and then nothing, for good.
        let first = Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; 10])));
        let frames = futures::stream::iter([first]).chain(futures::stream::pending());
        let (body, unread) = Lingering::watch(StreamBody::new(frames), false)
            .ok()
            .unwrap();
        drop(body);
        let read = tokio::time::timeout(LINGER_TIME * 4, read_past(unread.rest().unwrap()))
            .await
            .expect("read_past gives up by itself");
        assert_eq!(read, 10);
    }

    #[test]
    fn no_body_or_one_held_back_for_a_continue_is_not_watched() {
        assert!(Lingering::watch(Full::new(Bytes::new()), false).is_err());
        assert!(Lingering::watch(chunks(&[10]), true).is_err());
        assert!(Lingering::watch(chunks(&[10]), false).is_ok());
    }
}
