//! The connection guards of the listeners, the APIs, the upload endpoint and
//! Flight SQL (issue: connections that sent nothing, or stopped halfway
//! through their headers, stayed open for good, and 1,100 of them took both
//! ports down): held connections do not stop real requests, the server
//! closes them after the header-read (or first-request) and idle timeouts,
//! by default too, and past each listener's connection cap a new connection
//! is closed at once. (The Postgres listener's: `pg_wire/`.)

use std::{net::SocketAddr, time::Duration};

use lakehost_tests::*;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// Opens `count` connections to `addr`: every second one sends half a
/// request's headers and stops, the others send nothing.
async fn hold(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        if i % 2 == 1 {
            stream
                .write_all(b"GET /v2/identity/security_metadata HTTP/1.1\r\nHost: demo.api.localhost\r\nX-Slow: ")
                .await
                .unwrap();
        }
        held.push(stream);
    }
    held
}

/// Whether the server closed `stream` within `within` (EOF or reset; any
/// bytes it sent first, say a 408, are read past).
async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

async fn identity_status(app: &TestApp, token: &str) -> Result<StatusCode, reqwest::Error> {
    app.request(reqwest::Method::GET, ORG_HOST, SECURITY_METADATA)
        .bearer_auth(token)
        .send()
        .await
        .map(|r| r.status())
}

/// A GET of the upload endpoint's root: S3's XML answer, whatever its status.
async fn upload_endpoint_answers(app: &TestApp) -> bool {
    match reqwest::get(format!("{}/", app.upload_endpoint())).await {
        Ok(response) => response
            .text()
            .await
            .is_ok_and(|body| body.starts_with("<?xml")),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_connections_do_not_stop_real_requests_and_are_closed_by_the_timeouts() {
    let app = spawn_app_with(|c| {
        c.server.request_timeout_s = 2;
        c.server.header_read_timeout_s = 2;
        c.server.idle_timeout_s = 3;
    })
    .await;
    let token = app.token_for(&["OwnServiceClientAnalyst"], "[1 2]");
    let mut held = hold(app.addr, 500).await;
    held.extend(hold(app.upload_addr, 500).await);

    // Real clients are served on both ports meanwhile.
    assert_eq!(identity_status(&app, &token).await.unwrap(), StatusCode::OK);
    assert!(upload_endpoint_answers(&app).await);

    // Every held connection is closed by the server: the half-sent ones by
    // the header-read timeout, the silent ones by it or the idle timeout.
    for stream in &mut held {
        assert!(
            closed_by_server(stream, Duration::from_secs(20)).await,
            "a held connection is still open"
        );
    }
    assert_eq!(identity_status(&app, &token).await.unwrap(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_new_connection_is_closed_at_once_and_served_again_after() {
    let app = spawn_app_with(|c| c.server.max_connections = 20).await;
    let token = app.token_for(&["OwnServiceClientAnalyst"], "[1 2]");
    // Each listener has its own cap: the API's, then the upload endpoint's.
    for addr in [app.addr, app.upload_addr] {
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        // The 21st is accepted after the first 20 and closed before any read.
        let mut excess = TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_by_server(&mut excess, Duration::from_secs(10)).await,
            "{addr}"
        );
        // The held ones are still open (their timeouts are the defaults).
        assert!(!closed_by_server(&mut held[0], Duration::from_millis(300)).await);
    }

    // The held connections are gone: real requests are served again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(api) = identity_status(&app, &token).await
            && upload_endpoint_answers(&app).await
        {
            assert_eq!(api, StatusCode::OK);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_connection_that_sends_nothing_is_closed_after_ten_seconds() {
    // `server.header_read_timeout_s` = 10 unless configured: open at 5 s,
    // closed well before the 60 s idle timeout.
    let app = spawn_app().await;
    let mut api = TcpStream::connect(app.addr).await.unwrap();
    let mut upload = TcpStream::connect(app.upload_addr).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!closed_by_server(&mut api, Duration::from_millis(100)).await);
    assert!(!closed_by_server(&mut upload, Duration::from_millis(100)).await);
    assert!(closed_by_server(&mut api, Duration::from_secs(20)).await);
    assert!(closed_by_server(&mut upload, Duration::from_secs(20)).await);
}

/// An HTTP/2 connection to `addr` (cleartext, prior knowledge, as gRPC
/// clients open the Flight listener): its handle, and the task driving it,
/// which ends when the server closes the connection.
async fn http2_connection(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    (client, tokio::spawn(connection))
}

/// Whether the task driving a connection ended within `within`.
async fn ended_within<T>(task: &mut tokio::task::JoinHandle<T>, within: Duration) -> bool {
    tokio::time::timeout(within, task).await.is_ok()
}

/// One gRPC call on `client` (Flight's ListActions, with no token): the
/// HTTP status it was answered with.
async fn grpc_call(client: h2::client::SendRequest<bytes::Bytes>, token: &str) -> http::StatusCode {
    let mut client = client.ready().await.unwrap();
    let request =
        http::Request::post("http://localhost/arrow.flight.protocol.FlightService/ListActions")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // An empty protobuf message, framed: not compressed, length 0.
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    response.await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_connection_that_begins_no_request_is_closed_after_the_header_read_timeout() {
    // While nothing runs, the Flight listener's idle timeout is the short
    // one (60 s by default): only the first-request deadline can close
    // these in time. Every call but the handshake carries a token.
    let app = spawn_app_with(|c| {
        c.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        c.server.header_read_timeout_s = 1;
    })
    .await;
    let flight = app.flight_addr.expect("a Flight listener");
    let mut silent = TcpStream::connect(flight).await.unwrap();
    let (_preface_only, mut preface_only) = http2_connection(flight).await;
    let (client, mut used) = http2_connection(flight).await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    assert_eq!(
        grpc_call(client.clone(), &token).await,
        http::StatusCode::OK
    );

    assert!(
        closed_by_server(&mut silent, Duration::from_secs(20)).await,
        "a connection that sent nothing is still open"
    );
    assert!(
        ended_within(&mut preface_only, Duration::from_secs(20)).await,
        "an HTTP/2 connection that began no request is still open"
    );
    // The one that made a call is kept past that deadline (3 times it) and
    // serves the next call. `client` is held to the end: h2 ends a client
    // connection itself once its last handle is dropped.
    assert!(!ended_within(&mut used, Duration::from_secs(3)).await);
    assert_eq!(
        grpc_call(client.clone(), &token).await,
        http::StatusCode::OK
    );
    assert!(!used.is_finished());
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_read_gets_its_answer_on_a_connection_that_stays() {
    // The flake this mends: a component PUT refused (403) before its body
    // was read lost its answer to a reset, since the server closed the
    // connection with the client's bytes unread. Now the rest of the body
    // is read past beside the answer, and the connection serves the next
    // request. The body is larger than hyper reads in one go.
    let app = spawn_app().await;
    let body = vec![b'x'; 600_000];
    let digest = "sha256:".to_string() + &"ab".repeat(32);
    let cases = [
        (
            app.addr,
            format!("PUT /v2/pipeline/components/{digest} HTTP/1.1\r\nHost: {ORG_HOST}\r\n"),
            401,
        ),
        (
            app.upload_addr,
            "PUT /staging/some/key.parquet HTTP/1.1\r\nHost: localhost\r\n".to_string(),
            403,
        ),
    ];
    for (addr, head, refused) in cases {
        let (mut reading, mut writing) = TcpStream::connect(addr).await.unwrap().into_split();
        let request = format!("{head}Content-Length: {}\r\n\r\n", body.len());
        let sent = body.clone();
        let sending = tokio::spawn(async move {
            writing.write_all(request.as_bytes()).await?;
            writing.write_all(&sent).await?;
            Ok::<_, std::io::Error>(writing)
        });
        let answer =
            tokio::time::timeout(Duration::from_secs(30), raw_http::read_answer(&mut reading))
                .await
                .expect("an answer in time");
        let answer = answer.expect("an answer, not a reset");
        assert_eq!(answer.status, refused, "{addr}");
        // The refusal each listener gives, whole: the spec's 401 body on
        // the API, S3's error on the upload endpoint.
        if addr == app.addr {
            let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(body, unauthorized());
        } else {
            assert_eq!(answer.xml("Code").as_deref(), Some("AccessDenied"));
        }
        let mut writing = sending.await.unwrap().expect("the whole body is taken");
        // The same connection answers the next request.
        writing
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("the connection stays open after the refusal");
        let next =
            tokio::time::timeout(Duration::from_secs(30), raw_http::read_answer(&mut reading))
                .await
                .expect("an answer in time");
        assert!(
            next.is_some(),
            "{addr}: the connection was closed after the refusal"
        );
    }
}
