//! What the Comotion SDK (comotion-sdk 1.2.2) needs beyond the spec, over
//! HTTP: `GET /v2/migration` reports a completed migration (else the SDK's
//! upload helpers go to a retired v1 endpoint), `POST /v2/migration` is
//! refused, and the identity provider answers under Keycloak's legacy
//! `/auth/realms/<org>/...` prefix, which the SDK builds its URLs with.

use lakehost_tests::*;
use serde_json::json;

const NOTHING_TO_MIGRATE: &str =
    "This lake has always been a v2 lake; there is nothing to migrate.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_is_reported_completed_and_cannot_be_started() {
    let app = spawn_app().await;
    let consumer = app.token_for(&["PublicConsumer"], "[901]");
    let zone = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let completed = json!({
        "full_migration_status": "Completed",
        "full_migration_message": NOTHING_TO_MIGRATE,
        "flash_schema_status": "Completed",
        "flash_schema_message": NOTHING_TO_MIGRATE,
    });
    for (host, token) in [(ORG_HOST, &consumer), ("lab.demo.api.localhost", &zone)] {
        assert_eq!(
            app.get(host, "/v2/migration", Some(token)).await,
            (StatusCode::OK, completed.clone())
        );
        let (status, body) = app.post_raw(host, "/v2/migration", token, "{}").await;
        assert_eq!(
            (status, body),
            (
                StatusCode::CONFLICT,
                json!({ "message": NOTHING_TO_MIGRATE })
            )
        );
    }
    assert_eq!(
        app.get(ORG_HOST, "/v2/migration", None).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );
    // Both operations are in the OpenAPI document.
    let (_, doc) = app.get(ORG_HOST, "/v2/openapi.json", None).await;
    let operations = &doc["paths"]["/v2/migration"];
    assert!(
        operations["get"].is_object() && operations["post"].is_object(),
        "{operations}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_provider_answers_under_the_legacy_auth_prefix_too() {
    let app = spawn_app().await;
    for path in [
        ".well-known/openid-configuration",
        "protocol/openid-connect/certs",
    ] {
        let legacy = app
            .http
            .get(format!("{}/auth/realms/demo/{path}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(legacy.status(), StatusCode::OK, "{path}");
        let legacy: serde_json::Value = legacy.json().await.unwrap();
        assert_eq!(legacy, app.realm_document("demo", path).await, "{path}");
    }
    let (status, body) = app
        .token_request_under(
            "/auth",
            "demo",
            &[
                ("grant_type", "client_credentials"),
                ("client_id", "demo-admin"),
                ("client_secret", "demo-admin-secret"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["access_token"].as_str().unwrap();
    let (status, _) = app.get(ORG_HOST, SECURITY_METADATA, Some(token)).await;
    assert_eq!(status, StatusCode::OK);
}
