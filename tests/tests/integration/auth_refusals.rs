//! One way to authenticate (issue 46): REST, Flight SQL and the Postgres
//! wire let a caller in through the same `auth::authenticate`, and each
//! answers a refusal with its own status, the same refusal the same way on
//! every call. A token whose claims make no caller (a malformed or empty
//! `service_client_id`) is the spec's 500 on REST's query and load
//! endpoints, `UNAUTHENTICATED` over Flight SQL (its connection closed, as
//! for any refused credential), FATAL 28000 over Postgres: never
//! `INTERNAL`, never 42501 with the error's own text.

// The hand-written gRPC client of `flight_hardening`, whose module is
// private to it: compiled here a second time (and only partly used).
#[path = "flight_hardening/grpc.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod grpc;

use std::{path::PathBuf, sync::Arc, time::Duration};

use grpc::*;
use lakehost::config::IdpPrincipal;
use lakehost_tests::*;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};
use tokio_rustls::{
    TlsConnector,
    rustls::{self, pki_types::CertificateDer, pki_types::pem::PemObject as _},
};

/// A client of the embedded identity provider whose tokens carry
/// `service_client_id: "[]"`: valid tokens whose claims make no caller.
const NO_CLIENTS: (&str, &str) = ("demo-no-clients", "demo-no-clients-secret");

fn client_without_service_clients() -> IdpPrincipal {
    IdpPrincipal {
        org: "demo".into(),
        client_id: Some(NO_CLIENTS.0.into()),
        client_secret: Some(NO_CLIENTS.1.into()),
        username: None,
        password: None,
        service_clients: vec![],
        roles: [("svc_api".to_string(), vec!["ZoneAdmin".to_string()])].into(),
        scopes: vec!["query:read".into(), "query:write".into()],
    }
}

/// A demo token whose `service_client_id` claim is not of the form `[12 13]`.
fn malformed_claim_token(app: &TestApp) -> String {
    let mut claims = app.valid_claims("demo");
    claims["service_client_id"] = json!("1,2");
    app.sign("demo", &claims)
}

#[tokio::test]
async fn rest_answers_each_refusal_with_the_specs_status() {
    let app = spawn_app().await;
    let submit = |token: String| {
        let app = &app;
        async move {
            app.submit(ORG_HOST, &token, &json!({ "query": "SELECT 1" }))
                .await
        }
    };
    let refused = |claims: &Value| app.sign("demo", claims);

    // The token's own faults: 401 {"message": "Unauthorized"}.
    let mut expired = app.valid_claims("demo");
    expired["exp"] = json!(app.now() - 120);
    let mut zone_audience = app.valid_claims("demo");
    zone_audience["aud"] = json!("svc_api_lab");
    let mut other_realm = app.valid_claims("demo");
    other_realm["iss"] = json!(app.issuer("other"));
    for (what, token) in [
        ("garbage", "not-a-token".to_string()),
        ("expired", refused(&expired)),
        ("a Zone API's audience", refused(&zone_audience)),
        ("another realm", refused(&other_realm)),
    ] {
        assert_eq!(
            submit(token).await,
            (StatusCode::UNAUTHORIZED, unauthorized()),
            "{what}"
        );
    }
    // A missing scope: 403 {"message": "Forbidden"}.
    let mut read_only = app.valid_claims("demo");
    read_only["scope"] = json!("query:read");
    assert_eq!(
        submit(refused(&read_only)).await,
        (StatusCode::FORBIDDEN, json!({ "message": "Forbidden" }))
    );
    // Claims a query endpoint reads, malformed: the spec's 500, its
    // generic text (with the request code), never the claim's.
    let (status, body) = submit(malformed_claim_token(&app)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "An Internal Server Error occurred. Please contact support if this error persists."
        ),
        "{body}"
    );
    assert!(!message.contains("1,2"), "{body}");
    // The identity endpoint reads them itself: its 403 of the spec.
    let (status, body) = app
        .get(
            ORG_HOST,
            SECURITY_METADATA,
            Some(&malformed_claim_token(&app)),
        )
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::FORBIDDEN,
            json!({
                "error": "Unauthorized",
                "message": "Invalid Service Client claim (claim in incorrect format: 1,2)"
            })
        )
    );
}

async fn flight_app() -> TestApp {
    spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.idp.clients.push(client_without_service_clients());
    })
    .await
}

#[tokio::test]
async fn flight_refuses_a_token_whose_claims_make_no_caller_as_unauthenticated() {
    let app = flight_app().await;
    let addr = app.flight_addr.unwrap();
    let malformed = malformed_claim_token(&app);
    let statement = any("CommandStatementQuery", &field(1, b"SELECT 1"));
    let calls: [(&str, Vec<u8>); 3] = [
        ("ListActions", vec![]),
        ("GetFlightInfo", command_descriptor(&statement)),
        ("Handshake", vec![]),
    ];
    for (method, message) in &calls {
        let mut connection = Connection::open(addr).await;
        let answer = connection
            .call(method, &[bearer(&malformed)], message)
            .await;
        assert_eq!(
            (answer.code, answer.message.as_str()),
            (UNAUTHENTICATED, "Unauthorized"),
            "{method}"
        );
        assert!(connection.closed_by_server().await, "{method}");
    }
    // A client id and secret the provider accepts, whose token's claims
    // make no caller: refused at the handshake, not handed a token.
    let mut connection = Connection::open(addr).await;
    let answer = connection
        .call("Handshake", &[basic(NO_CLIENTS.0, NO_CLIENTS.1)], &[])
        .await;
    assert_eq!(
        (answer.code, answer.message.as_str()),
        (UNAUTHENTICATED, "Unauthorized")
    );
    assert!(answer.headers.get("authorization").is_none());
    assert!(connection.closed_by_server().await);
    // The same client's secret exchanged over REST gives a valid token that
    // Flight refuses the same way on a call.
    let token = app.client_token("demo", NO_CLIENTS.0).await;
    let mut connection = Connection::open(addr).await;
    let answer = connection.call("ListActions", &[bearer(&token)], &[]).await;
    assert_eq!(answer.code, UNAUTHENTICATED, "{answer:?}");
    assert!(connection.closed_by_server().await);

    // The rest of the table: a missing scope is PERMISSION_DENIED, and a
    // good token still gets its answer on the same connection.
    let mut read_only = app.valid_claims("demo");
    read_only["scope"] = json!("query:read");
    let connection = Connection::open(addr).await;
    let forbidden = connection
        .call(
            "GetFlightInfo",
            &[bearer(&app.sign("demo", &read_only))],
            &command_descriptor(&statement),
        )
        .await;
    assert_eq!(
        (forbidden.code, forbidden.message.as_str()),
        (PERMISSION_DENIED, "Forbidden")
    );
    let good = app.sign("demo", &app.valid_claims("demo"));
    let listed = connection.call("ListActions", &[bearer(&good)], &[]).await;
    assert_eq!(listed.code, OK, "{listed:?}");
}

#[tokio::test]
async fn flight_answers_an_identity_provider_out_of_reach_unavailable() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://localhost:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.auth.auth_url = Some(dead.parse().unwrap());
        config.idp.enabled = false;
    })
    .await;
    let mut claims = app.valid_claims("demo");
    claims["iss"] = json!(format!("{dead}/realms/demo"));
    let token = app.sign("demo", &claims);
    const UNAVAILABLE: u32 = 14;
    for (method, metadata) in [
        ("ListActions", vec![bearer(&token)]),
        ("Handshake", vec![basic("demo-admin", "demo-admin-secret")]),
    ] {
        let connection = Connection::open(app.flight_addr.unwrap()).await;
        let answer = connection.call(method, &metadata, &[]).await;
        assert_eq!(
            (answer.code, answer.message.as_str()),
            (UNAVAILABLE, "the identity provider is unavailable"),
            "{method}"
        );
    }
}

/// How long any one Postgres answer may take before the test calls it a hang.
const ANSWER: Duration = Duration::from_secs(20);

/// The Postgres listener over TLS, the client without service clients
/// configured, and the certificate a client trusts.
async fn pg_app() -> (TestApp, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert_path, key_path) = localhost_certificate(dir.path());
    let app = spawn_app_with(|config| {
        config.server.pg_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.tls_cert = Some(cert_path.clone());
        config.server.tls_key = Some(key_path);
        config.idp.clients.push(client_without_service_clients());
    })
    .await;
    (app, cert_path, dir)
}

/// The next backend message, `None` once the server closed the connection.
async fn next_message<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(u8, Vec<u8>)> {
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

/// Logs in as `user` with `password` on `database` over TLS: `Ok` at
/// ReadyForQuery, or the error's severity, SQLSTATE and message.
async fn pg_login(
    app: &TestApp,
    cert: &PathBuf,
    (user, password): (&str, &str),
    database: &str,
) -> Result<(), (String, String, String)> {
    let mut tcp = TcpStream::connect(app.pg_addr.unwrap()).await.unwrap();
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .unwrap();
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S", "the server takes TLS");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(cert).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut stream = TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let mut body = vec![0, 3, 0, 0];
    for (key, value) in [("user", user), ("database", database)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&body);
    stream.write_all(&startup).await.unwrap();
    match next_message(&mut stream).await {
        Some((b'R', body)) => assert_eq!(body, 3u32.to_be_bytes(), "a cleartext password"),
        other => panic!("no password request: {other:?}"),
    }
    let mut password_message = vec![b'p'];
    password_message.extend_from_slice(&((password.len() + 5) as u32).to_be_bytes());
    password_message.extend_from_slice(password.as_bytes());
    password_message.push(0);
    stream.write_all(&password_message).await.unwrap();
    loop {
        match next_message(&mut stream).await {
            Some((b'Z', _)) => return Ok(()),
            Some((b'E', body)) => {
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
                assert!(
                    next_message(&mut stream).await.is_none(),
                    "the connection stayed open after {code}"
                );
                return Err((severity, code, message));
            }
            Some(_) => {}
            None => panic!("the connection closed without an answer"),
        }
    }
}

#[tokio::test]
async fn postgres_refuses_a_client_whose_claims_make_no_caller_with_28000() {
    let (app, cert, _dir) = pg_app().await;
    // Its secret is right, its token valid: its claims make no caller.
    assert_eq!(
        pg_login(&app, &cert, NO_CLIENTS, "demo").await,
        Err(("FATAL".into(), "28000".into(), "Unauthorized".into()))
    );
    // A wrong secret stays Postgres's wrong password, and a good client
    // logs in.
    assert_eq!(
        pg_login(&app, &cert, ("demo-admin", "not-the-secret"), "demo").await,
        Err((
            "FATAL".into(),
            "28P01".into(),
            "password authentication failed for user \"demo-admin\"".into()
        ))
    );
    assert_eq!(
        pg_login(&app, &cert, ("demo-admin", "demo-admin-secret"), "demo").await,
        Ok(())
    );
}
