//! Gateway behaviour: 413 above max_body_bytes, the timeout error, request ids,
//! HTTPS with TLS 1.2 and 1.3.

use lakehost_tests::*;
use serde_json::json;

#[tokio::test]
async fn bodies_above_the_limit_get_413() {
    let app = spawn_app_with(|c| c.server.max_body_bytes = 1024).await;
    // Declared length over the limit.
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, SECURITY_METADATA)
        .body(vec![b'x'; 2048])
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"message": "Request Entity Too Large"})
        )
    );
    // A chunked body (no length) over the limit, read by the token endpoint.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b'a'; 512])).collect();
    let response = app
        .http
        .post(format!(
            "{}/realms/demo/protocol/openid-connect/token",
            app.base
        ))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(reqwest::Body::wrap_stream(futures_stream(chunks)))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"message": "Request Entity Too Large"})
        )
    );
    // Under the limit still works.
    let token = app.client_token("demo", "demo-admin").await;
    assert_eq!(
        app.get(ORG_HOST, SECURITY_METADATA, Some(&token)).await.0,
        StatusCode::OK
    );
}

fn futures_stream(
    chunks: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    tokio_stream::iter(chunks)
}

#[tokio::test]
async fn slow_requests_get_the_gateway_timeout() {
    // An identity provider that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://localhost:{}", silent.local_addr().unwrap().port());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let app = spawn_app_with(|c| {
        c.server.request_timeout_s = 1;
        c.auth.auth_url = Some(silent_url.parse().unwrap());
        c.idp.enabled = false;
    })
    .await;
    let mut claims = app.valid_claims("demo");
    claims["iss"] = json!(format!("{silent_url}/realms/demo"));
    let (status, body) = app
        .get(
            ORG_HOST,
            SECURITY_METADATA,
            Some(&app.sign("demo", &claims)),
        )
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::GATEWAY_TIMEOUT,
            json!({"message": "Endpoint request timed out"})
        )
    );
    // The server keeps answering.
    assert_eq!(
        app.get(ORG_HOST, "/v2/openapi.json", None).await.0,
        StatusCode::OK
    );
    hold.abort();
}

#[tokio::test]
async fn a_short_caller_request_id_is_echoed_anything_else_replaced() {
    let app = spawn_app().await;
    let send = |id: Option<&str>| {
        let mut request = app.request(reqwest::Method::GET, ORG_HOST, "/v2/openapi.json");
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        request.send()
    };
    let id = |r: &reqwest::Response| r.headers()["x-request-id"].to_str().unwrap().to_string();
    // A proxy's token follows the request.
    let kept = send(Some("edge-7f3a.b_2")).await.unwrap();
    assert_eq!(id(&kept), "edge-7f3a.b_2");
    // Spaces, quotes, JSON or long values are not trusted into logs.
    for hostile in [
        "two words",
        "\"quoted\"",
        "{\"level\":\"ERROR\"}",
        &"x".repeat(65),
    ] {
        let replaced = send(Some(hostile)).await.unwrap();
        let fresh = id(&replaced);
        assert_eq!(fresh.len(), 32, "{hostile:?} -> {fresh}");
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()), "{fresh}");
    }
    // Without one, each request gets its own.
    let first = send(None).await.unwrap();
    let second = app
        .request(reqwest::Method::GET, ORG_HOST, "/nowhere")
        .send()
        .await
        .unwrap();
    assert_eq!(id(&first).len(), 32);
    assert_ne!(id(&first), id(&second));
}

/// Issue 45, finding 11: "Running in production" sets `auth.auth_url`; with
/// the embedded provider behind the server's own certificate, tokens must
/// still validate (the validator trusts that certificate whenever the
/// embedded provider serves the realms, not only when the URL is unset).
#[tokio::test]
async fn https_with_an_explicit_auth_url_validates_the_embedded_providers_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert_path, key_path) = localhost_certificate(dir.path());
    // The port is chosen first, since the URL must name it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = spawn_app_with(|c| {
        c.server.listen = format!("127.0.0.1:{port}").parse().unwrap();
        c.server.tls_cert = Some(cert_path.clone());
        c.server.tls_key = Some(key_path.clone());
        c.auth.auth_url = Some(format!("https://localhost:{port}").parse().unwrap());
    })
    .await;
    let token = app.client_token("demo", "demo-admin").await;
    let (status, body) = app.get(ORG_HOST, SECURITY_METADATA, Some(&token)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["athena_service_client_where_clause"], "1=1", "{body}");
}

#[tokio::test]
async fn https_serves_tls_12_and_13() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, cert_path, key_path) = localhost_certificate(dir.path());
    let app = spawn_app_with(|c| {
        c.server.tls_cert = Some(cert_path.clone());
        c.server.tls_key = Some(key_path.clone());
    })
    .await;
    let root = reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap();
    for version in [
        reqwest::tls::Version::TLS_1_2,
        reqwest::tls::Version::TLS_1_3,
    ] {
        let client = reqwest::Client::builder()
            .add_root_certificate(root.clone())
            .min_tls_version(version)
            .max_tls_version(version)
            .build()
            .unwrap();
        let base = format!("https://localhost:{}", app.addr.port());
        // The embedded provider over HTTPS, and the validator fetching from it.
        let response = client
            .post(format!("{base}/realms/demo/protocol/openid-connect/token"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", "demo-admin"),
                ("client_secret", "demo-admin-secret"),
            ])
            .send()
            .await
            .unwrap();
        let (status, body) = read(response).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["access_token"].as_str().is_some());
        let response = client
            .get(format!("{base}{SECURITY_METADATA}"))
            .bearer_auth(body["access_token"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{version:?}");
    }
    // Plain HTTP to the TLS port does not get an answer.
    let plain = reqwest::get(format!(
        "http://127.0.0.1:{}/v2/openapi.json",
        app.addr.port()
    ))
    .await;
    assert!(plain.is_err() || plain.unwrap().status() != StatusCode::OK);
}
