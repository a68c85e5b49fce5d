//! The DailyRun API's flag (spec "GET/POST /dailyRun/dailyRun_enabled",
//! "DailyRun errors"): 404 until first set, the accepted spellings, the exact
//! 400, scopes, paths under the prefix, one flag per org.

use lakehost_tests::*;
use serde_json::{Value, json};

const FLAG: &str = "/dailyRun/dailyRun_enabled";
const DAILYRUN_HOST: &str = "api.demo.localhost";

fn token(app: &TestApp, org: &str, scopes: &str) -> String {
    let mut claims = app.valid_claims(org);
    claims["scope"] = json!(scopes);
    app.sign(org, &claims)
}

async fn post(
    app: &TestApp,
    host: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (StatusCode, Value) {
    app.post_raw(host, path, token, body).await
}

#[tokio::test]
async fn the_flag_is_not_found_until_set_then_reads_back() {
    let app = spawn_app().await;
    let both = token(&app, "demo", "dailyrun:enabled:read dailyrun:enabled:write");
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"message": "DailyRun not found"})
        )
    );

    let bad = json!({"message": "Body must be valid JSON with 'dailyRun' set to true or false."});
    for body in [
        "",
        "{",
        "[]",
        "{}",
        r#"{"dailyRun": "maybe"}"#,
        r#"{"dailyRun": 2}"#,
        r#"{"dailyRun": null}"#,
    ] {
        let (status, reply) = post(&app, DAILYRUN_HOST, FLAG, &both, body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, bad.clone()),
            "{body}"
        );
    }
    let (status, _) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing was written by a bad body"
    );

    for (body, expected) in [
        (r#"{"dailyRun": true}"#, true),
        (r#"{"dailyRun": "no"}"#, false),
        (r#"{"dailyRun": "YES"}"#, true),
        (r#"{"dailyRun": 0}"#, false),
        (r#"{"dailyRun": 1}"#, true),
        (r#"{"dailyRun": "false"}"#, false),
    ] {
        let (status, reply) = post(&app, DAILYRUN_HOST, FLAG, &both, body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::OK, json!({"dailyRun": expected})),
            "{body}"
        );
        let (status, reply) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
        assert_eq!(
            (status, reply),
            (StatusCode::OK, json!({"dailyRun": expected}))
        );
    }

    // The same flag under the prefix and on the bare host (default org).
    let (status, reply) = app
        .get(DAILYRUN_HOST, &format!("/superset{FLAG}"), Some(&both))
        .await;
    assert_eq!(
        (status, reply),
        (StatusCode::OK, json!({"dailyRun": false}))
    );
    let (status, reply) = app.get("localhost", FLAG, Some(&both)).await;
    assert_eq!(
        (status, reply),
        (StatusCode::OK, json!({"dailyRun": false}))
    );
}

#[tokio::test]
async fn the_flag_needs_its_scopes_and_is_per_org() {
    let app = spawn_app().await;
    let read_only = token(&app, "demo", "dailyrun:enabled:read");
    let write_only = token(&app, "demo", "dailyrun:enabled:write");
    let forbidden = json!({"message": "Forbidden"});
    let (status, body) = post(
        &app,
        DAILYRUN_HOST,
        FLAG,
        &read_only,
        r#"{"dailyRun": true}"#,
    )
    .await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, forbidden.clone()));
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, Some(&write_only)).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, forbidden));
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, None).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, unauthorized()));

    let (status, _) = post(
        &app,
        DAILYRUN_HOST,
        FLAG,
        &write_only,
        r#"{"dailyRun": true}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let other = token(
        &app,
        "other",
        "dailyrun:enabled:read dailyrun:enabled:write",
    );
    let (status, body) = app.get("api.other.localhost", FLAG, Some(&other)).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"message": "DailyRun not found"})
        )
    );
    // A demo token is not valid on the other org's API.
    let (status, _) = app.get("api.other.localhost", FLAG, Some(&read_only)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
