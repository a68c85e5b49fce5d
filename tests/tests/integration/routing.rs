//! Routing by Host header (DESIGN.md): Org, Zone and DailyRun hosts, the bare
//! host's default org, unknown orgs, zones and paths; zone audiences; the
//! OpenAPI document.

use lakehost::auth::validator::Expected;
use lakehost_tests::*;
use serde_json::{Value, json};

fn not_found() -> Value {
    json!({ "message": "Not Found" })
}

#[tokio::test]
async fn hosts_reach_their_api() {
    let app = spawn_app().await;
    let token = app.sign("demo", &app.valid_claims("demo"));
    for host in [ORG_HOST, "localhost", "127.0.0.1", "DEMO.API.LOCALHOST"] {
        let (status, body) = app.get(host, SECURITY_METADATA, Some(&token)).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }
    // The identity endpoint is Org API only.
    for host in ["lab.demo.api.localhost", "api.demo.localhost"] {
        let (status, body) = app.get(host, SECURITY_METADATA, Some(&token)).await;
        assert_eq!(
            (status, body),
            (StatusCode::NOT_FOUND, not_found()),
            "{host}"
        );
    }
}

#[tokio::test]
async fn unknown_orgs_zones_and_paths_are_404() {
    let app = spawn_app().await;
    let token = app.sign("demo", &app.valid_claims("demo"));
    for (host, path) in [
        ("nope.api.localhost", SECURITY_METADATA),
        ("moon.demo.api.localhost", "/v2/openapi.json"),
        ("lab.other.api.localhost", "/v2/openapi.json"),
        ("api.nope.localhost", "/dailyRun/dailyRun_enabled"),
        (ORG_HOST, "/v2/nothing/here"),
        (ORG_HOST, "/v1/identity/security_metadata"),
        ("localhost", "/"),
    ] {
        let (status, body) = app.get(host, path, Some(&token)).await;
        assert_eq!(
            (status, body),
            (StatusCode::NOT_FOUND, not_found()),
            "{host}{path}"
        );
    }
    // Unknown paths are 404 before authentication.
    let (status, _) = app.get(ORG_HOST, "/v2/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let response = app
        .request(reqwest::Method::DELETE, ORG_HOST, SECURITY_METADATA)
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"message": "Method Not Allowed"})
        )
    );
}

#[tokio::test]
async fn zone_tokens_need_the_zone_audience() {
    // The Zone API's endpoints arrive with the query and load issues; the
    // validator they will use is checked here against the real provider.
    let app = spawn_app().await;
    let config = test_config(&app.data_dir);
    let validator = lakehost::auth::TokenValidator::new(
        &config.auth,
        format!("http://localhost:{}", app.addr.port())
            .parse()
            .unwrap(),
        std::sync::Arc::new(app.clock.clone()),
        None,
    )
    .unwrap();
    let token_with_aud = |aud: Value| {
        let mut claims = app.valid_claims("demo");
        claims["aud"] = aud;
        app.sign("demo", &claims)
    };
    let lab = Expected {
        org: "demo",
        audience: "svc_api_lab",
    };
    assert!(
        validator
            .validate(&token_with_aud(json!("svc_api_lab")), lab)
            .await
            .is_ok()
    );
    assert!(
        validator
            .validate(&token_with_aud(json!(["svc_api", "svc_api_lab"])), lab)
            .await
            .is_ok()
    );
    assert!(
        validator
            .validate(&token_with_aud(json!("svc_api_ops")), lab)
            .await
            .is_err(),
        "another zone's aud"
    );
    assert!(
        validator
            .validate(&token_with_aud(json!("svc_api")), lab)
            .await
            .is_err(),
        "the Org API's aud"
    );
    // And the scope a zone endpoint asks for carries the zone prefix.
    let target = lakehost::api::routing::ApiTarget {
        org: "demo".into(),
        kind: lakehost::api::routing::ApiKind::Zone("lab".into()),
    };
    assert_eq!(
        lakehost::api::principal::scope_for("query:write", &target),
        "lab:query:write"
    );
}

#[tokio::test]
async fn openapi_document_lists_every_endpoint_without_auth() {
    let app = spawn_app().await;
    let (status, doc) = app.get(ORG_HOST, "/v2/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.contains_key(SECURITY_METADATA), "{paths:?}");
    let token = app.sign("demo", &app.valid_claims("demo"));
    // Every documented operation exists (not 404/405) and demands a token,
    // except the health checks, which answer without one.
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            let operation = &item[method.as_str().to_lowercase()];
            if operation["tags"] == json!(["health"]) {
                assert!(operation.get("security").is_none(), "{path}");
                let response = app
                    .request(method.clone(), "localhost", path)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::OK, "{method} {path}");
                continue;
            }
            assert!(
                item[method.as_str().to_lowercase()]["security"].is_array(),
                "{method} {path} documents its security"
            );
            let concrete = path.replace("{query_id}", "q").replace("{load_id}", "l");
            let response = app
                .request(method.clone(), "localhost", &concrete)
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} without a token"
            );
            // With a valid token lacking every scope: 403 where a scope is documented.
            let mut claims = app.valid_claims("demo");
            claims["scope"] = json!("");
            let unscoped = app.sign("demo", &claims);
            let response = app
                .request(method.clone(), "localhost", &concrete)
                .bearer_auth(&unscoped)
                .send()
                .await
                .unwrap();
            let scopes = item[method.as_str().to_lowercase()]["security"][0]["bearer"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if scopes.is_empty() {
                assert_ne!(
                    response.status(),
                    StatusCode::FORBIDDEN,
                    "{method} {path} needs no scope"
                );
            } else {
                let (status, body) = read(response).await;
                assert_eq!(
                    (status, body),
                    (StatusCode::FORBIDDEN, json!({"message": "Forbidden"})),
                    "{method} {path}"
                );
            }
            let _ = &token;
        }
    }
}
