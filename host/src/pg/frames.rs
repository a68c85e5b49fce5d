//! Reading one frontend message off a Postgres connection, bounded before
//! any of it is buffered and checked before pgwire's decoder sees it.
//!
//! - **Sizes by phase.** The length a frame announces is checked as soon as
//!   its header arrives, so a client cannot make the server buffer more
//!   than its phase allows: before the password is accepted only the
//!   startup packet ([`STARTUP_FRAME_BYTES`], Postgres's own limit) and the
//!   password message ([`PASSWORD_FRAME_BYTES`]) are read; once the session
//!   is ready, frames up to `server.max_body_bytes`, as REST bodies. A
//!   larger one ends the connection with FATAL 54000; nothing of its body
//!   is read.
//! - **Shapes before decoding.** pgwire's decoders read counts and lengths
//!   from the frame and trust them (a 13-byte `Bind` whose value claims
//!   2 GiB panics its `split_to`), and read past a frame's end into the
//!   next. Each frame is checked here against its type's layout, then
//!   handed to the decoder alone, cut from the buffer. A frame that does
//!   not fit its layout, or a type the phase does not expect, ends the
//!   connection with FATAL 08P01. A decoder panic the checks missed is
//!   caught and answered the same way.
//!
//! It never interprets a message's meaning: that is the handlers'.

use std::panic::AssertUnwindSafe;

use pgwire::{
    api::{ClientInfo as _, PgWireConnectionState},
    messages::PgWireFrontendMessage,
    tokio::server::PgWireMessageServerCodec,
};
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio_util::codec::{Decoder as _, Framed};

/// The largest startup packet (and cancel request), as Postgres's
/// `MAX_STARTUP_PACKET_LENGTH`.
pub const STARTUP_FRAME_BYTES: usize = 10_000;
/// The largest password message: a client secret, with room to spare.
pub const PASSWORD_FRAME_BYTES: usize = 4 * 1024;
/// Bytes asked of the socket at once at most, while a frame is incomplete.
const READ_CHUNK: usize = 64 * 1024;

/// Where a connection is, for what it may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The startup packet (or a cancel request): no type byte.
    Startup,
    /// The password: only a password message (or Terminate).
    Password,
    /// An authenticated session: any frontend message.
    Ready,
}

impl Phase {
    /// The phase of a connection in `state`.
    pub fn of(state: PgWireConnectionState) -> Self {
        match state {
            PgWireConnectionState::AwaitingSslRequest | PgWireConnectionState::AwaitingStartup => {
                Self::Startup
            }
            PgWireConnectionState::AuthenticationInProgress => Self::Password,
            _ => Self::Ready,
        }
    }

    /// The largest frame this phase reads; `ready` is the session's
    /// (`server.max_body_bytes`).
    pub fn limit(self, ready: usize) -> usize {
        match self {
            Self::Startup => STARTUP_FRAME_BYTES,
            Self::Password => PASSWORD_FRAME_BYTES,
            Self::Ready => ready,
        }
    }

    fn header_bytes(self) -> usize {
        match self {
            Self::Startup => 4,
            Self::Password | Self::Ready => 5,
        }
    }
}

/// Why a frame ends its connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame announces more bytes than its phase allows (54000).
    #[error("a message of {announced} bytes is larger than the {limit} bytes this server accepts{}", if *.phase == Phase::Ready { " (server.max_body_bytes)" } else { " before authentication" })]
    TooLarge {
        announced: usize,
        limit: usize,
        phase: Phase,
    },
    /// The frame does not fit its type's layout, or its type is not one
    /// this phase expects (08P01).
    #[error("invalid frontend message: {0}")]
    Malformed(String),
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// The SQLSTATE the client is told.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "54000",
            Self::Malformed(_) => "08P01",
            Self::Io(_) => "08006",
        }
    }
}

fn malformed(why: impl Into<String>) -> FrameError {
    FrameError::Malformed(why.into())
}

/// The whole frame at the start of `buffer`: its length once all of it is
/// there and it fits its layout, `None` while more bytes are needed.
pub fn complete_frame(
    buffer: &[u8],
    phase: Phase,
    ready_limit: usize,
) -> Result<Option<usize>, FrameError> {
    let header = phase.header_bytes();
    if buffer.len() < header {
        return Ok(None);
    }
    let length_at = header - 4;
    let announced = u32::from_be_bytes(
        buffer[length_at..header]
            .try_into()
            .expect("four bytes sliced"),
    ) as usize;
    let minimum = if phase == Phase::Startup { 8 } else { 4 };
    if announced < minimum {
        return Err(malformed(format!("a length of {announced} bytes")));
    }
    let limit = phase.limit(ready_limit);
    if announced > limit {
        return Err(FrameError::TooLarge {
            announced,
            limit,
            phase,
        });
    }
    if phase != Phase::Startup {
        check_type(buffer[0], phase)?;
    }
    let total = length_at + announced;
    if buffer.len() < total {
        return Ok(None);
    }
    if phase != Phase::Startup {
        check_layout(buffer[0], &buffer[header..total])?;
    }
    Ok(Some(total))
}

/// Whether a message of type `kind` may come in `phase`.
fn check_type(kind: u8, phase: Phase) -> Result<(), FrameError> {
    let expected: &[u8] = match phase {
        Phase::Startup => return Ok(()),
        Phase::Password => b"pX",
        Phase::Ready => b"QPBCDEHSXdcfp",
    };
    if expected.contains(&kind) {
        Ok(())
    } else if phase == Phase::Password {
        Err(malformed(format!(
            "expected a password message, got message type {:?}",
            char::from(kind)
        )))
    } else {
        Err(malformed(format!(
            "unknown message type {:?}",
            char::from(kind)
        )))
    }
}

/// A frame body read front to back, every read bounds-checked.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], FrameError> {
        if self.0.len() < n {
            return Err(malformed(format!("{what} runs past the message's end")));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn cstring(&mut self, what: &str) -> Result<(), FrameError> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| malformed(format!("{what} has no terminating zero byte")))?;
        self.0 = &self.0[end + 1..];
        Ok(())
    }

    fn u16(&mut self, what: &str) -> Result<usize, FrameError> {
        let bytes = self.take(2, what)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]) as usize)
    }

    fn i32(&mut self, what: &str) -> Result<i32, FrameError> {
        let bytes = self.take(4, what)?;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn array(&mut self, count: usize, width: usize, what: &str) -> Result<(), FrameError> {
        self.take(count.saturating_mul(width), what).map(|_| ())
    }
}

/// Whether `body` fits the layout of message type `kind` (the fields
/// pgwire's decoder reads, in its order).
fn check_layout(kind: u8, body: &[u8]) -> Result<(), FrameError> {
    let mut body = Body(body);
    match kind {
        b'Q' => body.cstring("the query")?,
        b'P' => {
            body.cstring("the statement name")?;
            body.cstring("the query")?;
            let types = body.u16("the parameter type count")?;
            body.array(types, 4, "the parameter types")?;
        }
        b'B' => {
            body.cstring("the portal name")?;
            body.cstring("the statement name")?;
            let formats = body.u16("the parameter format count")?;
            body.array(formats, 2, "the parameter formats")?;
            let values = body.u16("the parameter count")?;
            for _ in 0..values {
                let length = body.i32("a parameter's length")?;
                match length {
                    -1 => {}
                    n if n >= 0 => {
                        body.take(n as usize, "a parameter's value")?;
                    }
                    n => return Err(malformed(format!("a parameter length of {n}"))),
                }
            }
            let results = body.u16("the result format count")?;
            body.array(results, 2, "the result formats")?;
        }
        b'C' | b'D' => {
            let target = body.take(1, "the target")?[0];
            if target != b'S' && target != b'P' {
                return Err(malformed(format!(
                    "a close or describe target of {:?}",
                    char::from(target)
                )));
            }
            body.cstring("the name")?;
        }
        b'E' => {
            body.cstring("the portal name")?;
            body.i32("the row limit")?;
        }
        b'f' => body.cstring("the failure message")?,
        // Sync, Flush, Terminate, CopyDone and CopyData read nothing of
        // their body, or all of it; a password message is raw bytes until
        // the startup handler reads it (bounds-checked there).
        _ => {}
    }
    Ok(())
}

/// The next message of `socket`, read within its phase's limits (see the
/// module header); `None` when the client closed the connection between
/// messages.
pub async fn read_message<T: AsyncRead + Unpin + 'static>(
    socket: &mut Framed<T, PgWireMessageServerCodec<String>>,
    ready_limit: usize,
) -> Result<Option<PgWireFrontendMessage>, FrameError> {
    loop {
        let phase = Phase::of(socket.state());
        if let Some(total) = complete_frame(socket.read_buffer(), phase, ready_limit)? {
            let mut frame = socket.read_buffer_mut().split_to(total);
            let codec = socket.codec_mut();
            let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| codec.decode(&mut frame)));
            return match decoded {
                Ok(Ok(Some(message))) => Ok(Some(message)),
                Ok(Ok(None)) => Err(malformed("an incomplete message")),
                Ok(Err(e)) => Err(malformed(e.to_string())),
                Err(_) => Err(malformed("a message the decoder could not read")),
            };
        }
        let wanted = wanted_bytes(socket.read_buffer(), phase);
        let mut buffer = std::mem::take(socket.read_buffer_mut());
        buffer.reserve(wanted);
        let read = socket.get_mut().read_buf(&mut buffer).await;
        *socket.read_buffer_mut() = buffer;
        if read? == 0 {
            return if socket.read_buffer().is_empty() {
                Ok(None)
            } else {
                Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
            };
        }
    }
}

/// How much room to make for the next read: the rest of the frame whose
/// header is here (already checked against its limit), at most a chunk.
fn wanted_bytes(buffer: &[u8], phase: Phase) -> usize {
    let header = phase.header_bytes();
    if buffer.len() < header {
        return header;
    }
    let announced = u32::from_be_bytes(
        buffer[header - 4..header]
            .try_into()
            .expect("four bytes sliced"),
    ) as usize;
    (header - 4 + announced)
        .saturating_sub(buffer.len())
        .clamp(1, READ_CHUNK)
}

/// The fuzzers' entry point: the first byte picks the phase, the rest is
/// what the client sent. The checks, then pgwire's decoder on every frame
/// they accept, exactly as `read_message` runs them but without catching
/// a panic: a panic here is a frame the checks let through wrongly.
#[cfg(feature = "fuzzing")]
pub fn fuzz_frames(bytes: &[u8]) -> bool {
    let Some((&selector, rest)) = bytes.split_first() else {
        return false;
    };
    let phase = match selector % 3 {
        0 => Phase::Startup,
        1 => Phase::Password,
        _ => Phase::Ready,
    };
    let state = match phase {
        Phase::Startup => PgWireConnectionState::AwaitingStartup,
        Phase::Password => PgWireConnectionState::AuthenticationInProgress,
        Phase::Ready => PgWireConnectionState::ReadyForQuery,
    };
    let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 5432));
    let mut codec =
        PgWireMessageServerCodec::<String>::new(pgwire::api::DefaultClient::new(peer, true));
    codec.client_info.set_state(state);
    let mut buffer = bytes::BytesMut::from(rest);
    let mut accepted = false;
    while let Ok(Some(total)) = complete_frame(&buffer, phase, 1 << 20) {
        let mut frame = buffer.split_to(total);
        match codec.decode(&mut frame) {
            Ok(Some(_)) => accepted = true,
            _ => break,
        }
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut frame = vec![kind];
        frame.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        frame.extend_from_slice(body);
        frame
    }

    #[test]
    fn a_huge_announcement_is_refused_from_its_header_alone() {
        let header = [b'Q', 0x2b, 0xc0, 0, 0];
        assert!(matches!(
            complete_frame(&header, Phase::Password, 1 << 20),
            Err(FrameError::TooLarge {
                announced: 0x2bc0_0000,
                limit: PASSWORD_FRAME_BYTES,
                phase: Phase::Password
            })
        ));
        assert!(matches!(
            complete_frame(&header, Phase::Ready, 10 << 20),
            Err(FrameError::TooLarge { .. })
        ));
        let startup = [0x00, 0x10, 0x00, 0x00];
        assert!(matches!(
            complete_frame(&startup, Phase::Startup, 10 << 20),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn only_a_password_comes_before_authentication() {
        let query = frame(b'Q', b"SELECT 1\0");
        assert!(matches!(
            complete_frame(&query, Phase::Password, 1 << 20),
            Err(FrameError::Malformed(_))
        ));
        let password = frame(b'p', b"secret\0");
        assert!(matches!(
            complete_frame(&password, Phase::Password, 1 << 20),
            Ok(Some(n)) if n == password.len()
        ));
    }

    #[test]
    fn a_bind_whose_value_runs_past_its_frame_is_malformed() {
        // No names, no formats, one value claiming 2 GiB, in 13 bytes.
        let mut body = vec![0, 0, 0, 0, 0, 1];
        body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
        let bind = frame(b'B', &body);
        assert!(matches!(
            complete_frame(&bind, Phase::Ready, 1 << 20),
            Err(FrameError::Malformed(why)) if why.contains("parameter's value")
        ));
        let mut good = vec![0, 0, 0, 0, 0, 1];
        good.extend_from_slice(&1i32.to_be_bytes());
        good.extend_from_slice(b"7\0\0");
        let bind = frame(b'B', &good);
        assert!(matches!(
            complete_frame(&bind, Phase::Ready, 1 << 20),
            Ok(Some(n)) if n == bind.len()
        ));
    }

    #[test]
    fn an_incomplete_frame_waits_for_more() {
        let query = frame(b'Q', b"SELECT 1\0");
        assert!(matches!(
            complete_frame(&query[..7], Phase::Ready, 1 << 20),
            Ok(None)
        ));
        assert_eq!(wanted_bytes(&query[..7], Phase::Ready), query.len() - 7);
    }

    #[test]
    fn lengths_below_the_header_are_malformed() {
        assert!(matches!(
            complete_frame(&[b'S', 0, 0, 0, 3], Phase::Ready, 1 << 20),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            complete_frame(&[0, 0, 0, 7], Phase::Startup, 1 << 20),
            Err(FrameError::Malformed(_))
        ));
    }
}
