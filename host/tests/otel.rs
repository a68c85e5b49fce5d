//! The `otel` build exports spans: `lakehost serve` with
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set sends OTLP/HTTP protobuf to that
//! collector, with the request span and its request id, as service
//! `lakehost`. Built and run only with `--features otel`, which the test
//! suite's build has (`tests/` turns it on).

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpListener,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// One request a collector received: request line, content type, body.
struct Received {
    request_line: String,
    content_type: String,
    body: Vec<u8>,
}

/// A collector that answers 200 to everything and hands each request over.
fn fake_collector() -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (sender, received) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let sender = sender.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut length, mut content_type) = (0usize, String::new());
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap(),
                            "content-type" => content_type = value.trim().to_string(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .unwrap();
                    let _ = sender.send(Received {
                        request_line: request_line.trim_end().to_string(),
                        content_type,
                        body,
                    });
                }
            });
        }
    });
    (endpoint, received)
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn spans_reach_the_collector_with_the_request_id() {
    let (endpoint, received) = fake_collector();
    let dir = tempfile::tempdir().unwrap();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_lakehost"))
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0")
            .env("LAKEHOST_STORAGE_S3_LISTEN", "127.0.0.1:0")
            .env("LAKEHOST_SERVER_METRICS_LISTEN", "127.0.0.1:0")
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(server.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("lakehost listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET /v2/openapi.json HTTP/1.1\r\nHost: localhost\r\nx-request-id: otel-probe-7\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let contains = |body: &[u8], text: &str| body.windows(text.len()).any(|w| w == text.as_bytes());
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let export = received
            .recv_timeout(left)
            .expect("the collector received the request's span within 30 s");
        assert_eq!(export.request_line, "POST /v1/traces HTTP/1.1");
        assert_eq!(export.content_type, "application/x-protobuf");
        if contains(&export.body, "otel-probe-7") {
            assert!(contains(&export.body, "request"), "the span's name");
            assert!(contains(&export.body, "lakehost"), "the service name");
            break;
        }
    }
}
