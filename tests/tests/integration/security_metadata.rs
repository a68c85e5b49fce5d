//! GET /identity/security_metadata: every rule of the spec's "Security metadata"
//! and every row of "Identity endpoint errors", with exact bodies.

use lakehost_tests::*;
use serde_json::{Value, json};

async fn metadata(app: &TestApp, claims: &Value) -> (StatusCode, Value) {
    app.get(ORG_HOST, SECURITY_METADATA, Some(&app.sign("demo", claims)))
        .await
}

fn claims_with(app: &TestApp, roles: &[&str], clients: &str) -> Value {
    let mut claims = app.valid_claims("demo");
    claims["resource_access"] = json!({ "svc_api": { "roles": roles } });
    claims["service_client_id"] = json!(clients);
    claims
}

async fn where_clause(app: &TestApp, roles: &[&str], clients: &str) -> String {
    let (status, body) = metadata(app, &claims_with(app, roles, clients)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["athena_service_client_where_clause"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn where_clause_follows_the_spec() {
    let app = spawn_app().await;
    let list = "service_client_id IN (12, 13, 901)";
    assert_eq!(
        where_clause(&app, &["OwnServiceClientConsumer"], "[12 13]").await,
        list
    );
    assert_eq!(
        where_clause(&app, &["PublicConsumer"], "[12 13]").await,
        list
    );
    assert_eq!(
        where_clause(&app, &["OwnServiceClientAnalyst"], "[12 13]").await,
        list
    );
    assert_eq!(
        where_clause(&app, &["OwnServiceClientAnalyst"], "[901 12]").await,
        "service_client_id IN (901, 12)"
    );
    assert_eq!(where_clause(&app, &["PublicConsumer"], "[0]").await, "1=1");
    assert_eq!(
        where_clause(&app, &["OwnServiceClientConsumer"], "[5 0]").await,
        "1=1"
    );
    assert_eq!(
        where_clause(&app, &["AllServiceClientAnalyst"], "[12]").await,
        "1=1"
    );
    assert_eq!(where_clause(&app, &["ZoneAdmin"], "[12]").await, "1=1");
    assert_eq!(
        where_clause(&app, &["PublicConsumer", "ZoneAdmin"], "[12]").await,
        "1=1"
    );
    assert_eq!(where_clause(&app, &["offline_access"], "[12]").await, "1=0");
}

#[tokio::test]
async fn hash_tracks_roles_and_service_clients() {
    let app = spawn_app().await;
    let hash = |roles: &'static [&'static str], clients: &'static str| {
        let app = &app;
        async move {
            let (status, body) = metadata(app, &claims_with(app, roles, clients)).await;
            assert_eq!(status, StatusCode::OK);
            body["service_client_hash"].as_str().unwrap().to_string()
        }
    };
    let base = hash(&["OwnServiceClientAnalyst"], "[12 13]").await;
    assert_eq!(base.len(), 16);
    // Equal access, another token (new jti) and another claim order: equal.
    assert_eq!(base, hash(&["OwnServiceClientAnalyst"], "[12 13]").await);
    assert_eq!(base, hash(&["OwnServiceClientAnalyst"], "[13 12]").await);
    assert_ne!(base, hash(&["ZoneAdmin"], "[12 13]").await);
    assert_ne!(base, hash(&["OwnServiceClientAnalyst"], "[12]").await);
    assert_ne!(
        base,
        hash(&["OwnServiceClientAnalyst", "PublicConsumer"], "[12 13]").await
    );
}

// The claim errors (a missing or empty sub, jti or resource_access, no
// roles on svc_api, the service_client_id claim's forms) are token cases of
// tests/corpus/tokens/, each body compared whole.

#[tokio::test]
async fn unreachable_keys_give_the_identity_500() {
    // The identity provider is configured at an address where nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://localhost:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let app = spawn_app_with(|c| {
        c.auth.auth_url = Some(dead.parse().unwrap());
        c.idp.enabled = false;
    })
    .await;
    let mut claims = app.valid_claims("demo");
    claims["iss"] = json!(format!("{dead}/realms/demo"));
    let (status, body) = metadata(&app, &claims).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        body,
        json!({ "error": "Error", "message": "There was a problem returning the security metadata" })
    );
}
