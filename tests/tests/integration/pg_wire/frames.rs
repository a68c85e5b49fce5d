//! The Postgres port under attack (issue 45), driven with raw frames over
//! TLS as the attacker drove it: frames larger than their phase allows are
//! refused from their header, before the password and after it; malformed
//! frames get a protocol error, never a dead connection task; guessed
//! passwords and cancel keys hit the address's failure budget; each org
//! gets a share of the listener's connections; a session with nothing
//! running closes at the short idle timeout.

use std::{sync::Arc, time::Duration};

use rand::{Rng as _, SeedableRng as _, rngs::StdRng};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    net::TcpStream,
};
use tokio_rustls::{
    TlsConnector,
    client::TlsStream,
    rustls::{self, pki_types::CertificateDer, pki_types::pem::PemObject as _},
};

use super::{PgApp, pg_app_with as app_with};

/// How long any one answer may take before the test calls it a hang.
const ANSWER: Duration = Duration::from_secs(20);

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A TLS connection to the Postgres port, past its SSLRequest.
async fn tls(pg: &PgApp) -> TlsStream<TcpStream> {
    let mut tcp = TcpStream::connect(pg.app.pg_addr.unwrap()).await.unwrap();
    tcp.write_all(&SSL_REQUEST).await.unwrap();
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(&pg.cert_path).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap()
}

fn startup(user: &str, database: &str) -> Vec<u8> {
    let mut body = vec![0, 3, 0, 0];
    for (key, value) in [("user", user), ("database", database)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut frame = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = vec![kind];
    frame.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

fn cstring(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// The next backend message, `None` once the server closed the connection.
async fn next<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(u8, Vec<u8>)> {
    let read = async {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).await.ok()?;
        let length = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; length.saturating_sub(4)];
        stream.read_exact(&mut body).await.ok()?;
        Some((header[0], body))
    };
    tokio::time::timeout(ANSWER, read)
        .await
        .expect("the server neither answered nor closed the connection")
}

/// An ErrorResponse's severity, SQLSTATE and message.
fn error_fields(body: &[u8]) -> (String, String, String) {
    let (mut severity, mut code, mut message) = Default::default();
    for field in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let value = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'S' => severity = value,
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    (severity, code, message)
}

/// Messages until ReadyForQuery (`Ok`, with the backend key's pid if one
/// came) or an error (`Err`, its fields).
async fn until_ready<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<Option<i32>, (String, String, String)> {
    let mut pid = None;
    loop {
        match next(stream).await {
            Some((b'Z', _)) => return Ok(pid),
            Some((b'E', body)) => return Err(error_fields(&body)),
            Some((b'K', body)) => pid = Some(i32::from_be_bytes(body[..4].try_into().unwrap())),
            Some(_) => {}
            None => panic!("the connection closed without an answer"),
        }
    }
}

/// A session logged in with `user` and `password` on `database`.
async fn login(
    pg: &PgApp,
    user: &str,
    password: &str,
    database: &str,
) -> Result<(TlsStream<TcpStream>, Option<i32>), (String, String, String)> {
    let mut stream = tls(pg).await;
    stream.write_all(&startup(user, database)).await.unwrap();
    match next(&mut stream).await {
        Some((b'R', body)) => assert_eq!(body, 3u32.to_be_bytes(), "a cleartext password"),
        Some((b'E', body)) => return Err(error_fields(&body)),
        other => panic!("no password request: {other:?}"),
    }
    stream
        .write_all(&typed(b'p', &cstring(password)))
        .await
        .unwrap();
    let pid = until_ready(&mut stream).await?;
    Ok((stream, pid))
}

async fn admin(pg: &PgApp) -> TlsStream<TcpStream> {
    login(pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .expect("the admin logs in")
        .0
}

/// The error that ends the connection, then its end.
async fn fatal_then_closed<S: AsyncRead + Unpin>(stream: &mut S) -> (String, String) {
    let (kind, body) = next(stream).await.expect("an error before the close");
    assert_eq!(kind, b'E', "{:?}", String::from_utf8_lossy(&body));
    let (severity, code, message) = error_fields(&body);
    assert_eq!(severity, "FATAL", "{code} {message}");
    assert!(next(stream).await.is_none(), "the connection stayed open");
    (code, message)
}

/// `SELECT 1` answered on a session.
async fn select_one<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    stream
        .write_all(&typed(b'Q', &cstring("SELECT 1 AS one")))
        .await
        .unwrap();
    let mut rows = 0;
    loop {
        match next(stream).await.expect("an answer") {
            (b'D', _) => rows += 1,
            (b'Z', _) => break,
            (b'E', body) => panic!("SELECT 1 failed: {:?}", error_fields(&body)),
            _ => {}
        }
    }
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn a_huge_frame_before_the_password_is_refused_from_its_header() {
    let pg = app_with(|_| {}).await;
    let mut stream = tls(&pg).await;
    // A user that does not exist: the server asks for a password anyway.
    stream.write_all(&startup("nobody", "demo")).await.unwrap();
    assert!(matches!(next(&mut stream).await, Some((b'R', _))));
    // A Query announcing 700 MiB, and only its first KiB.
    let mut frame = vec![b'Q'];
    frame.extend_from_slice(&(700u32 << 20).to_be_bytes());
    frame.extend_from_slice(&[b'x'; 1024]);
    stream.write_all(&frame).await.unwrap();
    let (code, message) = fatal_then_closed(&mut stream).await;
    assert_eq!(code, "54000", "{message}");
    assert!(message.contains("before authentication"), "{message}");
    // A password message of 64 KiB is no password either.
    let mut stream = tls(&pg).await;
    stream
        .write_all(&startup("demo-admin", "demo"))
        .await
        .unwrap();
    assert!(matches!(next(&mut stream).await, Some((b'R', _))));
    stream
        .write_all(&typed(b'p', &vec![b'a'; 64 * 1024]))
        .await
        .unwrap();
    assert_eq!(fatal_then_closed(&mut stream).await.0, "54000");
    // A startup packet announcing 1 MiB.
    let mut stream = tls(&pg).await;
    stream.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
    stream.write_all(&[0, 3, 0, 0]).await.unwrap();
    assert_eq!(fatal_then_closed(&mut stream).await.0, "54000");
}

#[tokio::test]
async fn a_frame_past_max_body_bytes_ends_the_session_and_the_server_goes_on() {
    let pg = app_with(|config| config.server.max_body_bytes = 1 << 20).await;
    let mut stream = admin(&pg).await;
    let mut frame = vec![b'Q'];
    frame.extend_from_slice(&((2u32 << 20) + 4).to_be_bytes());
    frame.extend_from_slice(b"SELECT '");
    stream.write_all(&frame).await.unwrap();
    let (code, message) = fatal_then_closed(&mut stream).await;
    assert_eq!(code, "54000", "{message}");
    assert!(message.contains("server.max_body_bytes"), "{message}");
    // Just under the cap is a statement like any other.
    let mut stream = admin(&pg).await;
    let sql = format!("SELECT length('{}') AS n", "y".repeat((1 << 20) - 100));
    stream
        .write_all(&typed(b'Q', &cstring(&sql)))
        .await
        .unwrap();
    let mut answered = false;
    loop {
        match next(&mut stream).await.expect("an answer") {
            (b'D', _) => answered = true,
            (b'Z', _) => break,
            (b'E', body) => panic!("{:?}", error_fields(&body)),
            _ => {}
        }
    }
    assert!(answered);
}

#[tokio::test]
async fn malformed_frames_get_a_protocol_error_not_a_dead_task() {
    let pg = app_with(|_| {}).await;
    // The 13-byte Bind whose one value claims 2 GiB.
    let mut stream = admin(&pg).await;
    let mut bind = vec![0, 0, 0, 0, 0, 1];
    bind.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    stream.write_all(&typed(b'B', &bind)).await.unwrap();
    let (code, message) = fatal_then_closed(&mut stream).await;
    assert_eq!(code, "08P01", "{message}");
    // Short frames of every type the server reads, with random bodies:
    // each connection gets its answer or a protocol error, never a close
    // without one (the sign of a panicked task).
    let mut rng = StdRng::seed_from_u64(45);
    for round in 0..60 {
        let mut stream = admin(&pg).await;
        let kind = b"QPBCDEHSXdcfp"[round % 13];
        let length = rng.gen_range(0..12);
        let body: Vec<u8> = (0..length).map(|_| rng.r#gen()).collect();
        let mut bytes = typed(kind, &body);
        bytes.extend_from_slice(&typed(b'S', &[]));
        bytes.extend_from_slice(&typed(b'Q', &cstring("SELECT 1 AS one")));
        stream.write_all(&bytes).await.unwrap();
        let mut answered = kind == b'X';
        while let Some((reply, body)) = next(&mut stream).await {
            match reply {
                b'E' => {
                    let (severity, code, _) = error_fields(&body);
                    answered = true;
                    if severity == "FATAL" {
                        assert!(code == "08P01" || code == "54000", "{code}");
                    }
                }
                b'Z' | b'D' | b'1' | b'2' | b'3' | b'C' | b'n' | b'I' | b't' | b'T' | b's' => {
                    answered = true
                }
                _ => {}
            }
            if reply == b'Z' && matches!(body.first(), Some(b'I')) {
                break;
            }
        }
        assert!(
            answered,
            "{:?} with body {body:?}: the connection closed without an answer",
            char::from(kind)
        );
    }
    let mut stream = admin(&pg).await;
    select_one(&mut stream).await;
}

#[tokio::test]
async fn guessed_passwords_use_up_the_address_budget() {
    let pg = app_with(|_| {}).await;
    for _ in 0..10 {
        let refused = login(&pg, "demo-admin", "guess", "demo").await.unwrap_err();
        assert_eq!(refused.1, "28P01", "{refused:?}");
    }
    // Past the budget even the right secret is not tried.
    let refused = login(&pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .unwrap_err();
    assert_eq!(refused.0, "FATAL");
    assert_eq!(refused.1, "53400", "{refused:?}");
    assert!(refused.2.contains("retry in"), "{refused:?}");
    // The window ends on the server's clock.
    pg.app.clock.advance(chrono::Duration::seconds(61));
    admin(&pg).await;
}

#[tokio::test]
async fn cancel_keys_are_random_and_wrong_ones_use_up_the_budget() {
    let pg = app_with(|_| {}).await;
    let (_first, a) = login(&pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .unwrap();
    let (_second, b) = login(&pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .unwrap();
    let (a, b) = (a.expect("a backend key"), b.expect("a backend key"));
    assert!(a > 0 && b > 0);
    assert!((a - b).abs() > 1, "sequential pids {a} and {b}");
    for guess in 0i32..10 {
        let mut tcp = TcpStream::connect(pg.app.pg_addr.unwrap()).await.unwrap();
        let mut request = 16u32.to_be_bytes().to_vec();
        request.extend_from_slice(&80877102u32.to_be_bytes());
        request.extend_from_slice(&a.to_be_bytes());
        request.extend_from_slice(&guess.to_be_bytes());
        tcp.write_all(&request).await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(ANSWER, tcp.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "a cancel request's connection stayed open");
    }
    let refused = login(&pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .unwrap_err();
    assert_eq!(refused.1, "53400", "{refused:?}");
}

#[tokio::test]
async fn each_org_gets_a_share_of_the_listeners_connections() {
    let pg = app_with(|config| {
        config.server.max_connections = 8;
        config.server.max_connections_per_org = Some(2);
    })
    .await;
    let first = admin(&pg).await;
    let _second = admin(&pg).await;
    let refused = login(&pg, "demo-admin", "demo-admin-secret", "demo")
        .await
        .unwrap_err();
    assert_eq!(refused.1, "53300", "{refused:?}");
    assert!(refused.2.contains("2 connections"), "{refused:?}");
    // Another org is not locked out (its test client may only read, so
    // its session being ready is the answer).
    let _other = login(&pg, "other-admin", "other-admin-secret", "other")
        .await
        .expect("the other org connects");
    // A place given back is taken again.
    drop(first);
    let mut again = None;
    for _ in 0..100 {
        if let Ok((stream, _)) = login(&pg, "demo-admin", "demo-admin-secret", "demo").await {
            again = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    select_one(&mut again.expect("the org's place came back")).await;
}

#[tokio::test]
async fn a_session_with_nothing_running_closes_at_the_short_idle_timeout() {
    let pg = app_with(|config| {
        config.server.request_timeout_s = 1;
        config.server.idle_timeout_s = 2;
    })
    .await;
    // `server.wire_idle_timeout_s` stays at its default of 1,900 s: the
    // session below runs nothing, so the 2 s apply.
    let mut stream = admin(&pg).await;
    select_one(&mut stream).await;
    assert!(
        next(&mut stream).await.is_none(),
        "an idle session was kept"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_a_result_loses_its_connection() {
    let pg = app_with(|config| {
        config.server.request_timeout_s = 1;
        config.server.idle_timeout_s = 2;
    })
    .await;
    let mut stream = admin(&pg).await;
    // About 50 MB of rows, far more than the sockets' buffers hold.
    let sql = "SELECT repeat('x', 10000) AS s FROM generate_series(1, 5000)";
    stream.write_all(&typed(b'Q', &cstring(sql))).await.unwrap();
    // The rows start coming (how soon depends on the machine's load: the
    // 50 MB are made and encoded first) ...
    loop {
        match next(&mut stream).await {
            Some((b'D', _)) => break,
            Some((b'Z', _)) | None => panic!("the statement ended before any row"),
            Some(_) => {}
        }
    }
    // ... then the client reads nothing for longer than the stall budget
    // (the short idle timeout; the statement's own time limit is 30 minutes).
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut ended_with_ready = false;
    while let Some((kind, _)) = next(&mut stream).await {
        ended_with_ready = kind == b'Z';
    }
    assert!(
        !ended_with_ready,
        "the whole result was kept for a client that did not read it"
    );
}

#[tokio::test]
async fn a_client_whose_claims_make_no_caller_is_refused_28000() {
    use crate::auth_refusals::{NO_CLIENTS, client_without_service_clients};
    let pg = app_with(|config| config.idp.clients.push(client_without_service_clients())).await;
    // Its secret is right, its token valid: its claims make no caller.
    let (user, secret) = NO_CLIENTS;
    assert_eq!(
        login(&pg, user, secret, "demo").await.err(),
        Some(("FATAL".into(), "28000".into(), "Unauthorized".into()))
    );
    // A wrong secret stays Postgres's wrong password, and a good client
    // logs in.
    assert_eq!(
        login(&pg, "demo-admin", "not-the-secret", "demo")
            .await
            .err(),
        Some((
            "FATAL".into(),
            "28P01".into(),
            "password authentication failed for user \"demo-admin\"".into()
        ))
    );
    assert!(
        login(&pg, "demo-admin", "demo-admin-secret", "demo")
            .await
            .is_ok()
    );
}
