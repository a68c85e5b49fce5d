//! The connection guards of both listeners, the APIs and the upload endpoint
//! (issue: connections that sent nothing, or stopped halfway through their
//! headers, stayed open for good, and 1,100 of them took both ports down):
//! held connections do not stop real requests, the server closes them after
//! the header-read and idle timeouts, and past the connection cap a new
//! connection is closed at once.

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
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(app.addr).await.unwrap());
    }
    // The 21st is accepted after the first 20 and closed before any read.
    let mut excess = TcpStream::connect(app.addr).await.unwrap();
    assert!(closed_by_server(&mut excess, Duration::from_secs(10)).await);
    // The held ones are still open (their timeouts are the defaults: 10 s, 60 s).
    assert!(!closed_by_server(&mut held[0], Duration::from_millis(300)).await);

    // Once the held connections go, real requests are served again.
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(status) = identity_status(&app, &token).await {
            assert_eq!(status, StatusCode::OK);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
