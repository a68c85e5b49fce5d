//! The load resources over HTTP (spec "POST /load", "GET /load/{load_id}",
//! "POST /load/{load_id}/file", "Load request errors"): bodies, exact error
//! messages, ownership, scopes, and the upload descriptor's shape.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use lakehost_tests::*;
use serde_json::{Value, json};

const NOT_FOUND: &str = "NotFound: load_id does not exist for this user.";

fn message(text: &str) -> Value {
    json!({ "message": text })
}

fn admin(app: &TestApp) -> String {
    app.token_for(&["ZoneAdmin"], "[0]")
}

#[tokio::test]
async fn a_load_is_created_open_and_read_back_by_its_creator() {
    let app = spawn_app().await;
    let token = admin(&app);
    let id = app
        .create_load(
            &token,
            &json!({
                "load_type": "APPEND_ONLY", "table_name": "trips_2024",
                "load_as_service_client_id": "12", "partitions": ["day"]
            }),
        )
        .await;
    let (status, body) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&token))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "loadId": id, "LoadStatus": "OPEN", "load_type": "APPEND_ONLY",
            "table_name": "trips_2024", "load_as_service_client_id": "12",
            "partitions": ["day"]
        })
    );
    // Durable in the store.
    let stored = app.store.load(&id).await.unwrap().unwrap();
    assert_eq!(stored.load.owner_sub, "user-1");
    assert_eq!(stored.load.table_name, "trips_2024");
}

#[tokio::test]
async fn every_load_request_error_has_the_specs_message() {
    let app = spawn_app().await;
    let token = admin(&app);
    let cases: Vec<(&str, &str)> = vec![
        (
            r#"{"table_name": "trips"}"#,
            "MissingParameterError: \"load_type\" parameter missing from request.",
        ),
        (
            r#"{"load_type": "APPEND_ONLY"}"#,
            "MissingParameterError: \"table_name\" parameter missing from request.",
        ),
        (
            r#"{"load_type": "OVERWRITE", "table_name": "trips"}"#,
            "InvalidParameterError: invalid load_type parameter",
        ),
        (
            r#"{"load_type": "APPEND_ONLY", "table_name": "Trips"}"#,
            "InvalidParameterError: table_name - Value should be in lowercase and contain only lowercase letters and underscores.",
        ),
        (
            r#"{"load_type": "APPEND_ONLY", "table_name": "_trips"}"#,
            "InvalidParameterError: table_name - Value should be in lowercase and contain only lowercase letters and underscores.",
        ),
        (
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips_"}"#,
            "InvalidParameterError: table_name - Value should be in lowercase and contain only lowercase letters and underscores.",
        ),
        (
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips", "load_as_service_client_id": 12}"#,
            "InvalidParameterError: load_as_service_client_id - Value should be a string.",
        ),
        (
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips", "partitions": ["Day"]}"#,
            "InvalidParameterError: partitions - \"Day\" should contain only lowercase letters, digits and underscores.",
        ),
        ("{not json", "JSON not well formed."),
        ("", "JSON not well formed."),
        ("[1, 2]", "JSON not well formed."),
    ];
    for (body, expected) in cases {
        let (status, reply) = app.post_raw(ORG_HOST, LOAD, &token, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply, message(expected), "{body}");
    }
}

#[tokio::test]
async fn loads_are_visible_to_their_creator_only() {
    let app = spawn_app().await;
    let mine = app.token_of("alice", &["ZoneAdmin"], "[0]");
    let theirs = app.token_of("bob", &["ZoneAdmin"], "[0]");
    let id = app
        .create_load(
            &mine,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    for (status, body) in [
        app.get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&theirs))
            .await,
        app.post_raw(ORG_HOST, &format!("{LOAD}/{id}/file"), &theirs, "")
            .await,
        app.get(ORG_HOST, &format!("{LOAD}/no-such-load"), Some(&mine))
            .await,
        app.post_raw(ORG_HOST, &format!("{LOAD}/no-such-load/file"), &mine, "")
            .await,
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body, message(NOT_FOUND));
    }
    // The org's load is not the zone's: the same user on the lab Zone API.
    let zone_token = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let (status, body) = app
        .get(
            "lab.demo.api.localhost",
            &format!("{LOAD}/{id}"),
            Some(&zone_token),
        )
        .await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, message(NOT_FOUND)));
}

#[tokio::test]
async fn the_zone_api_has_its_own_loads_and_scopes() {
    let app = spawn_app().await;
    let zone_host = "lab.demo.api.localhost";
    let zone_token = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let (status, reply) = app
        .post_raw(
            zone_host,
            LOAD,
            &zone_token,
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    let id = reply["loadId"].as_str().unwrap();
    let (status, body) = app
        .get(zone_host, &format!("{LOAD}/{id}"), Some(&zone_token))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["LoadStatus"], "OPEN");
    let (status, descriptor) = app
        .post_raw(zone_host, &format!("{LOAD}/{id}/file"), &zone_token, "")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        descriptor["path"]
            .as_str()
            .unwrap()
            .starts_with(&format!("demo/lab/{id}/")),
        "{descriptor}"
    );

    // An Org API token with only the query scopes may not load.
    let mut claims = app.valid_claims("demo");
    claims["scope"] = json!("query:read query:write");
    let query_only = app.sign("demo", &claims);
    let (status, body) = app
        .post_raw(
            ORG_HOST,
            LOAD,
            &query_only,
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips"}"#,
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::FORBIDDEN, message("Forbidden"))
    );
    let (status, body) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&query_only))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::FORBIDDEN, message("Forbidden"))
    );
    let (status, body) = app.get(ORG_HOST, &format!("{LOAD}/{id}"), None).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, unauthorized()));
}

fn decoded_policy(descriptor: &Value) -> Value {
    let policy = descriptor["presigned_url"]["fields"]["Policy"]
        .as_str()
        .unwrap();
    serde_json::from_slice(&STANDARD.decode(policy).unwrap()).unwrap()
}

#[tokio::test]
async fn a_descriptor_carries_both_upload_routes_of_the_spec() {
    let app = spawn_app().await;
    let token = admin(&app);
    let id = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    let descriptor = app.file_descriptor(&token, &id, Some("part_1")).await;
    let path = format!("demo/-/{id}/part_1.parquet");
    assert_eq!(descriptor["path"], path);
    assert_eq!(descriptor["bucket"], "lakehost-uploads");
    assert_eq!(
        descriptor["presigned_url"]["url"],
        format!("{}/lakehost-uploads", app.upload_endpoint())
    );
    let fields = descriptor["presigned_url"]["fields"].as_object().unwrap();
    let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "AWSAccessKeyId",
            "Policy",
            "Signature",
            "key",
            "x-amz-security-token"
        ]
    );
    assert_eq!(fields["key"], path);
    let credentials = &descriptor["sts_credentials"];
    assert_eq!(fields["AWSAccessKeyId"], credentials["AccessKeyId"]);
    assert_eq!(fields["x-amz-security-token"], credentials["SessionToken"]);
    assert!(credentials["SecretAccessKey"].as_str().unwrap().len() >= 40);

    // The policy: exact bucket, key and token, a size range, one hour.
    let policy = decoded_policy(&descriptor);
    let expiration = chrono::DateTime::parse_from_rfc3339(policy["expiration"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert_eq!(expiration, app.now() + 3600);
    let conditions = policy["conditions"].as_array().unwrap();
    assert!(conditions.contains(&json!({ "bucket": "lakehost-uploads" })));
    assert!(conditions.contains(&json!({ "key": path })));
    assert!(conditions.contains(&json!({ "x-amz-security-token": credentials["SessionToken"] })));
    assert!(conditions.contains(&json!(["content-length-range", 1, 5u64 << 30])));

    // The same file_key again: the same object (overwritten); a new key
    // otherwise; no file_key: a fresh name.
    let again = app.file_descriptor(&token, &id, Some("part_1")).await;
    assert_eq!(again["path"], path);
    assert_ne!(
        again["sts_credentials"]["AccessKeyId"],
        credentials["AccessKeyId"]
    );
    let unnamed = app.file_descriptor(&token, &id, None).await;
    assert_ne!(unnamed["path"], path);
    let files = app.store.load_files(&id).await.unwrap();
    assert_eq!(files.len(), 2);
}

#[tokio::test]
async fn bad_file_keys_are_refused_with_the_rule() {
    let app = spawn_app().await;
    let token = admin(&app);
    let id = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    let rule = "InvalidParameterError: file_key - Value should contain only lowercase letters, digits and underscores (at most 128).";
    for body in [
        r#"{"file_key": "Part1"}"#,
        r#"{"file_key": "../x"}"#,
        r#"{"file_key": "a.parquet"}"#,
        r#"{"file_key": ""}"#,
        r#"{"file_key": 7}"#,
    ] {
        let (status, reply) = app
            .post_raw(ORG_HOST, &format!("{LOAD}/{id}/file"), &token, body)
            .await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, message(rule)),
            "{body}"
        );
    }
    for body in ["{oops", "[1]", "\"part_1\""] {
        let (status, reply) = app
            .post_raw(ORG_HOST, &format!("{LOAD}/{id}/file"), &token, body)
            .await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, message("JSON not well formed.")),
            "{body}"
        );
    }
    assert!(app.store.load_files(&id).await.unwrap().is_empty());
    // `null` is no body: a fresh name, like an empty body.
    for body in ["null", ""] {
        let (status, reply) = app
            .post_raw(ORG_HOST, &format!("{LOAD}/{id}/file"), &token, body)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}: {reply}");
        assert!(reply["path"].as_str().is_some(), "{reply}");
    }
    assert_eq!(app.store.load_files(&id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn load_endpoints_need_the_claims_they_read() {
    let app = spawn_app().await;
    let mut claims = app.valid_claims("demo");
    claims.as_object_mut().unwrap().remove("service_client_id");
    let token = app.sign("demo", &claims);
    let (status, body) = app
        .post_raw(
            ORG_HOST,
            LOAD,
            &token,
            r#"{"load_type": "APPEND_ONLY", "table_name": "trips"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("An Internal Server Error occurred."),
        "{body}"
    );
}
