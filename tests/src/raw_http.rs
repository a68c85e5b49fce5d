//! Requests as an attacker writes them: HTTP/1.1 over a plain TCP stream, the
//! request target sent byte for byte. HTTP client libraries parse and
//! normalise URLs first (`..`, `%2e%2e` and `\` never leave them as written),
//! so the hostile-input corpus sends its requests with this instead. S3's
//! signatures over such requests are `s3_signing.rs`'s.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

/// One request: the method, the target (path and query, as sent) and the
/// headers; `Content-Length` and `Connection: close` are added when sent.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawRequest {
    pub fn new(method: &str, target: &str, host: &str) -> Self {
        Self {
            method: method.to_string(),
            target: target.to_string(),
            headers: vec![("Host".into(), host.into())],
            body: Vec::new(),
        }
    }

    /// The value of header `name` (any case), if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Sets header `name`, replacing a value of any case.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value.to_string()));
    }

    /// The target's path, before any `?`.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(&self.target, |(p, _)| p)
    }

    /// The target's query, after the first `?` (empty without one).
    pub fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }
}

/// What came back: the status, the headers and the (de-chunked) body.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The text of the first `<tag>` element of an XML body (S3's errors:
    /// `Code`, `Message`), entities decoded.
    pub fn xml(&self, tag: &str) -> Option<String> {
        let text = self.text();
        let open = format!("<{tag}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{tag}>"))?;
        Some(xml_unescape(&text[start..end]))
    }

    /// The `message` of a JSON body.
    pub fn json_message(&self) -> Option<String> {
        let body: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        body["message"].as_str().map(str::to_string)
    }
}

fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Sends `request` to `addr` and reads the whole answer. The body is written
/// before anything is read; a server that answers early and resets the
/// connection still has its answer read.
pub async fn send(addr: SocketAddr, request: &RawRequest) -> RawResponse {
    send_with_pause(addr, request, request.body.len(), async {}).await
}

/// [`send`], with a pause: the head and the body's first `at` bytes, then
/// the rest once `between` is done (an upload still arriving meanwhile).
pub async fn send_with_pause(
    addr: SocketAddr,
    request: &RawRequest,
    at: usize,
    between: impl Future<Output = ()>,
) -> RawResponse {
    let mut head = format!("{} {} HTTP/1.1\r\n", request.method, request.target);
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        request.body.len()
    ));
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&request.body[..at]);
    // A refusal may come (and the connection close) before the body is read.
    let _ = stream.write_all(&bytes).await;
    between.await;
    let _ = stream.write_all(&request.body[at..]).await;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
    parse_response(&answer)
}

/// Reads one answer from `stream`, which stays open after it (keep-alive):
/// up to the end of its `Content-Length` body, or of its chunked body.
/// `None` when the connection ends (or is reset) before a whole answer.
pub async fn read_answer<R: AsyncRead + Unpin>(stream: &mut R) -> Option<RawResponse> {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&chunk[..n]);
        let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
        let body = &answer[split + 4..];
        let whole = if head.contains("transfer-encoding: chunked") {
            body.ends_with(b"0\r\n\r\n")
        } else {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            body.len() >= length
        };
        if whole {
            return Some(parse_response(&answer));
        }
    }
}

fn parse_response(answer: &[u8]) -> RawResponse {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(answer)));
    let head = String::from_utf8_lossy(&answer[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw_body = &answer[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(raw_body)
    } else {
        raw_body.to_vec()
    };
    RawResponse {
        status,
        headers,
        body,
    }
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            break;
        };
        raw = &raw[end + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        body.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
    body
}

/// Percent-decodes `text` as S3 decodes a path (`+` stays `+`); bytes that
/// are not UTF-8 are replaced.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_plain_or_chunked() {
        let plain = parse_response(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!((plain.status, plain.text().as_str()), (403, "hello"));
        let chunked = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        );
        assert_eq!(chunked.text(), "abcde");
        let error = RawResponse {
            status: 403,
            headers: vec![],
            body: b"<Error><Code>AccessDenied</Code><Message>a &quot;b&quot; &amp; c</Message></Error>"
                .to_vec(),
        };
        assert_eq!(error.xml("Code").unwrap(), "AccessDenied");
        assert_eq!(error.xml("Message").unwrap(), "a \"b\" & c");
    }

    #[test]
    fn paths_decode_as_s3_decodes_them() {
        assert_eq!(percent_decode("a/%2e%2e/b%2Fc+d"), "a/../b/c+d");
        assert_eq!(percent_decode("%E2%88%95%zz"), "\u{2215}%zz");
    }
}
