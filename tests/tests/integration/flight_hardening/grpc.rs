//! A gRPC client of Flight's calls over raw HTTP/2 (h2), its protobuf
//! messages written and read by hand: enough to make the calls the
//! attacker made and read their statuses, nothing more.

use std::{net::SocketAddr, time::Duration};

use base64::Engine as _;
use bytes::Bytes;
use tokio::{net::TcpStream, task::JoinHandle};

/// gRPC status codes.
pub const OK: u32 = 0;
pub const INVALID_ARGUMENT: u32 = 3;
pub const NOT_FOUND: u32 = 5;
pub const PERMISSION_DENIED: u32 = 7;
pub const RESOURCE_EXHAUSTED: u32 = 8;
pub const UNIMPLEMENTED: u32 = 12;
pub const UNAUTHENTICATED: u32 = 16;

/// A gRPC client's limit on an answer's headers (gRPC C++'s and Java's
/// default): a status message past it loses the whole answer.
const GRPC_HEADER_LIMIT: u32 = 8 * 1024;

/// Bounds every wait on the server, only so that a failure cannot hang.
pub const PATIENCE: Duration = Duration::from_secs(30);

const SQL_TYPES: &str = "type.googleapis.com/arrow.flight.protocol.sql.";

// ---- protobuf, by hand ----

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Field `number` holding `payload` (length-delimited).
pub fn field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    varint(number << 3 | 2, &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

/// A Flight SQL message `name` wrapped in `google.protobuf.Any`.
pub fn any(name: &str, value: &[u8]) -> Vec<u8> {
    [
        field(1, format!("{SQL_TYPES}{name}").as_bytes()),
        field(2, value),
    ]
    .concat()
}

/// `FlightDescriptor { type: CMD, cmd }`.
pub fn command_descriptor(cmd: &[u8]) -> Vec<u8> {
    [&[0x08, 0x02][..], &field(2, cmd)].concat()
}

/// The length-delimited fields `number` of a message (other wire types are
/// skipped).
pub fn fields_of(mut message: &[u8], number: u64) -> Vec<Vec<u8>> {
    fn read_varint(bytes: &mut &[u8]) -> u64 {
        let (mut n, mut shift) = (0u64, 0);
        while let Some((&byte, rest)) = bytes.split_first() {
            *bytes = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
            shift += 7;
        }
        n
    }
    let mut found = Vec::new();
    while !message.is_empty() {
        let key = read_varint(&mut message);
        let len = match key & 7 {
            0 => {
                read_varint(&mut message);
                0
            }
            1 => 8,
            5 => 4,
            2 => read_varint(&mut message) as usize,
            other => panic!("wire type {other} in an answer"),
        };
        let (value, rest) = message.split_at(len);
        if key & 7 == 2 && key >> 3 == number {
            found.push(value.to_vec());
        }
        message = rest;
    }
    found
}

// ---- gRPC over raw HTTP/2 ----

/// How a call ended: its gRPC status and message, and the messages of its
/// answer.
#[derive(Debug)]
pub struct Answer {
    pub code: u32,
    pub message: String,
    pub headers: http::HeaderMap,
    pub messages: Vec<Bytes>,
}

/// The gRPC status in `headers` (an answer's, or its trailers).
fn status_in(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        // gRPC escapes its message as S3 escapes a path (`%XX`, `+` kept).
        .map(|m| lakehost_tests::raw_http::percent_decode(&String::from_utf8_lossy(m.as_bytes())))
        .unwrap_or_default();
    Some((code, message))
}

/// One HTTP/2 connection to the Flight listener, opened as a gRPC client
/// opens it (cleartext, prior knowledge), with gRPC's header limit.
pub struct Connection {
    client: h2::client::SendRequest<Bytes>,
    /// The task driving the connection: it ends when the server closes it.
    pub driver: JoinHandle<Result<(), h2::Error>>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> Self {
        let tcp = TcpStream::connect(addr).await.expect("connects");
        let (client, connection) = h2::client::Builder::new()
            .max_header_list_size(GRPC_HEADER_LIMIT)
            .handshake(tcp)
            .await
            .expect("HTTP/2 handshake");
        Self {
            client,
            driver: tokio::spawn(connection),
        }
    }

    /// Sends the call of `method` with `message` and `metadata`: the
    /// answer's headers and its body, not read yet.
    pub async fn start(
        &self,
        method: &str,
        metadata: &[(&str, String)],
        message: &[u8],
    ) -> Result<http::Response<h2::RecvStream>, h2::Error> {
        let mut request = http::Request::post(format!(
            "http://localhost/arrow.flight.protocol.FlightService/{method}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
        for (name, value) in metadata {
            request = request.header(*name, value.as_str());
        }
        let mut client = self.client.clone().ready().await?;
        let (response, mut body) = client.send_request(request.body(()).unwrap(), false)?;
        let mut framed = vec![0];
        framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
        framed.extend_from_slice(message);
        body.send_data(framed.into(), true)?;
        response.await
    }

    /// Calls `method` with `message` and `metadata`; an error when the
    /// connection or the stream failed (closed at the cap, or an answer
    /// past gRPC's header limit).
    pub async fn try_call(
        &self,
        method: &str,
        metadata: &[(&str, String)],
        message: &[u8],
    ) -> Result<Answer, h2::Error> {
        let response = self.start(method, metadata, message).await?;
        let (parts, mut body) = response.into_parts();
        if let Some((code, message)) = status_in(&parts.headers) {
            return Ok(Answer {
                code,
                message,
                headers: parts.headers,
                messages: Vec::new(),
            });
        }
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?.unwrap_or_default();
        let (code, message) = status_in(&trailers).expect("the answer ends with a status");
        let mut messages = Vec::new();
        let mut rest = &data[..];
        while rest.len() >= 5 {
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            messages.push(Bytes::copy_from_slice(&rest[5..5 + len]));
            rest = &rest[5 + len..];
        }
        Ok(Answer {
            code,
            message,
            headers: parts.headers,
            messages,
        })
    }

    pub async fn call(&self, method: &str, metadata: &[(&str, String)], message: &[u8]) -> Answer {
        tokio::time::timeout(PATIENCE, self.try_call(method, metadata, message))
            .await
            .unwrap_or_else(|_| panic!("{method} not answered"))
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// Whether the server closed the connection (waits at most `PATIENCE`).
    pub async fn closed_by_server(&mut self) -> bool {
        tokio::time::timeout(PATIENCE, &mut self.driver)
            .await
            .is_ok()
    }
}

/// The start of a message that may be long, for a failure's text.
pub fn head(text: &str) -> String {
    text.chars().take(100).collect()
}

pub fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}

pub fn basic(id: &str, secret: &str) -> (&'static str, String) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
    ("authorization", format!("Basic {encoded}"))
}

pub fn org(name: &str) -> (&'static str, String) {
    ("x-lakehost-org", name.to_string())
}
