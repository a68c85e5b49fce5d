//! One way to authenticate (issue 46): REST, Flight SQL and the Postgres
//! wire let a caller in through the same `auth::authenticate`, and each
//! answers a refusal with its own status, the same refusal the same way on
//! every call. A token whose claims make no caller (a malformed or empty
//! `service_client_id`) is the spec's 500 on REST's query and load
//! endpoints, `UNAUTHENTICATED` over Flight SQL (its connection closed, as
//! for any refused credential), FATAL 28000 over Postgres (`pg_wire::frames`): never
//! `INTERNAL`, never 42501 with the error's own text.

use lakehost::config::IdpPrincipal;
use lakehost_tests::*;
use serde_json::{Value, json};

use crate::flight_hardening::grpc::*;

/// A client of the embedded identity provider whose tokens carry
/// `service_client_id: "[]"`: valid tokens whose claims make no caller.
pub(crate) const NO_CLIENTS: (&str, &str) = ("demo-no-clients", "demo-no-clients-secret");

pub(crate) fn client_without_service_clients() -> IdpPrincipal {
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
