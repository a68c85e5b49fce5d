//! A step's stderr: every write accepted, the last `STDERR_TAIL_BYTES`
//! kept (a Rust panic's message, the end of a Python traceback), to be told
//! with a trap. Nothing a step writes there can trap it or grow the host.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamError},
};

/// How much of a step's stderr is kept: its end.
pub(super) const STDERR_TAIL_BYTES: usize = 4 * 1024;

/// The stderr of one step run; clones share the tail.
#[derive(Clone, Default)]
pub(super) struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    fn keep(&self, bytes: &[u8]) {
        let mut tail = self.0.lock().expect("stderr lock");
        let skip = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
        tail.extend(&bytes[skip..]);
        let over = tail.len().saturating_sub(STDERR_TAIL_BYTES);
        tail.drain(..over);
    }

    /// The kept end, as written.
    pub(super) fn contents(&self) -> Vec<u8> {
        self.0
            .lock()
            .expect("stderr lock")
            .iter()
            .copied()
            .collect()
    }
}

impl OutputStream for StderrTail {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for StderrTail {
    async fn ready(&mut self) {}
}

impl AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_of_any_amount_written() {
        let mut tail = StderrTail::default();
        for _ in 0..100 {
            tail.write(Bytes::from(vec![b'a'; 1000])).unwrap();
        }
        tail.write(Bytes::from_static(b"the end")).unwrap();
        let kept = tail.contents();
        assert_eq!(kept.len(), STDERR_TAIL_BYTES);
        assert!(kept.ends_with(b"aaathe end"));
        tail.write(Bytes::from(vec![b'z'; 3 * STDERR_TAIL_BYTES]))
            .unwrap();
        assert_eq!(tail.contents(), vec![b'z'; STDERR_TAIL_BYTES]);
    }
}
