//! `deploy.rs`'s tests: the commands against a fake API (an axum router
//! that answers as the server does and keeps the calls it was sent).

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::IntoResponse,
};
use sha2::{Digest as _, Sha256};

use super::*;

/// A call the fake API was sent: method and path, content type,
/// authorization, body.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    to: String,
    content_type: String,
    authorization: String,
    body: Vec<u8>,
}

/// What a shadow found, as `GET /v2/pipeline/load/shadow` answers it: one
/// load it refused that the active steps passed, one whose step gave no
/// verdict.
fn shadow_report() -> serde_json::Value {
    let run = |load_id: &str, shadow: &str, step: Option<&str>, message: Option<&str>| {
        serde_json::json!({"loadId": load_id, "version": 7, "agreed": false,
            "activeOutcome": "passed", "shadowOutcome": shadow, "step": step,
            "message": message, "steps": [], "ranAt": "2026-12-06T09:10:00.000000+00:00"})
    };
    serde_json::json!({"version": 7, "setBy": "demo-admin",
    "setAt": "2026-12-06T09:00:02.000000+00:00", "loads": 12, "agreements": 10,
    "disagreements": [
        run("load-b", "failed (ParquetValidation)", Some("guard"), Some("column id has nulls")),
        run("load-a", "error", None, None),
    ]})
}

/// An API that stores whatever it is sent, makes it version 7 (or
/// refuses it as a server refuses a bad grant), and activates it; it
/// keeps the calls it was sent.
async fn fake_api(refuse_versions: bool) -> (ApiArgs, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let header = |name| {
                    headers
                        .get(name)
                        .map(|v: &header::HeaderValue| v.to_str().unwrap().to_string())
                        .unwrap_or_default()
                };
                let to = format!("{method} {}", uri.path());
                seen.lock().unwrap().push(Call {
                    to: to.clone(),
                    content_type: header(header::CONTENT_TYPE),
                    authorization: header(header::AUTHORIZATION),
                    body: body.to_vec(),
                });
                let (status, answer) = match to.as_str() {
                    "POST /v2/pipeline/load/versions" if refuse_versions => (
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({"message": "steps[1].grants[0]: `lake-sql` is not allowed"}),
                    ),
                    "POST /v2/pipeline/load/versions" => (
                        StatusCode::CREATED,
                        serde_json::json!({"version": 7, "digest": "sha256:ab",
                            "createdBy": "demo-admin", "createdAt": "2026-12-06T09:00:00.000000+00:00",
                            "steps": [{"name": "guard"}]}),
                    ),
                    "PUT /v2/pipeline/load/shadow" => (
                        StatusCode::OK,
                        serde_json::json!({"version": 7, "setBy": "demo-admin",
                            "setAt": "2026-12-06T09:00:02.000000+00:00"}),
                    ),
                    "DELETE /v2/pipeline/load/shadow" => (
                        StatusCode::OK,
                        serde_json::json!({"version": null, "setBy": "demo-admin",
                            "setAt": "2026-12-06T09:00:03.000000+00:00"}),
                    ),
                    "GET /v2/pipeline/load/shadow" => (StatusCode::OK, shadow_report()),
                    "PUT /v2/pipeline/load/active" => (
                        StatusCode::OK,
                        serde_json::json!({"version": 7, "activatedBy": "demo-admin",
                            "activatedAt": "2026-12-06T09:00:01.000000+00:00"}),
                    ),
                    _ => {
                        let digest = uri.path().rsplit('/').next().unwrap().to_string();
                        (
                            StatusCode::CREATED,
                            serde_json::json!({"digest": digest, "bytes": body.len(), "world": "step"}),
                        )
                    }
                };
                (status, axum::Json(answer)).into_response()
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let args = ApiArgs {
        api: format!("http://{address}/v2"),
        token: "T0KEN".into(),
        ca_cert: None,
    };
    (args, calls)
}

const MANIFEST: &str = "version = 1\n\n[[steps]]\nname = \"guard\"\n\
                        component = \"guard.wasm\" # ours\ngrants = [\"lake-append\"]\n";

#[tokio::test]
async fn deploy_uploads_posts_the_digests_and_activates() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("load.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(dir.path().join("guard.wasm"), b"\0asm guard").unwrap();
    let (args, calls) = fake_api(false).await;

    deploy_manifest(&args, PipelineKind::Load, &manifest, Then::Activate)
        .await
        .unwrap();

    let digest = format!("sha256:{}", hex::encode(Sha256::digest(b"\0asm guard")));
    let calls = calls.lock().unwrap().clone();
    let call = |to: String, content_type: &str, body: &[u8]| Call {
        to,
        content_type: content_type.into(),
        authorization: "Bearer T0KEN".into(),
        body: body.to_vec(),
    };
    assert_eq!(
        calls,
        [
            call(
                format!("PUT /v2/pipeline/components/{digest}"),
                "application/wasm",
                b"\0asm guard"
            ),
            call(
                "POST /v2/pipeline/load/versions".into(),
                "application/toml",
                MANIFEST
                    .replace("\"guard.wasm\"", &format!("\"{digest}\""))
                    .as_bytes()
            ),
            call(
                "PUT /v2/pipeline/load/active".into(),
                "application/json",
                br#"{"version":7}"#
            ),
        ]
    );
}

#[tokio::test]
async fn a_refused_version_is_the_servers_message_exit_code_1_and_activates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("load.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(dir.path().join("guard.wasm"), b"\0asm guard").unwrap();
    let (args, calls) = fake_api(true).await;

    let e = deploy_manifest(&args, PipelineKind::Load, &manifest, Then::Activate)
        .await
        .unwrap_err();

    assert_eq!(
        e.to_string(),
        "POST /v2/pipeline/load/versions: 400 Bad Request: steps[1].grants[0]: `lake-sql` is not allowed"
    );
    assert_eq!(e.exit_code(), 1);
    let tos: Vec<String> = calls.lock().unwrap().iter().map(|c| c.to.clone()).collect();
    assert_eq!(tos.len(), 2, "{tos:?}");
    assert_eq!(tos[1], "POST /v2/pipeline/load/versions");
}

#[tokio::test]
async fn a_missing_component_stops_the_deploy_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("load.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let (args, calls) = fake_api(false).await;

    let e = deploy_manifest(&args, PipelineKind::Load, &manifest, Then::Keep)
        .await
        .unwrap_err();

    assert!(
        with_causes(&e).contains("guard.wasm"),
        "{}",
        with_causes(&e)
    );
    assert_eq!(e.exit_code(), 2);
    assert!(calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn deploy_shadow_sets_the_new_version_as_the_load_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("load.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(dir.path().join("guard.wasm"), b"\0asm guard").unwrap();
    let (args, calls) = fake_api(false).await;

    deploy_manifest(&args, PipelineKind::Load, &manifest, Then::Shadow)
        .await
        .unwrap();

    let calls = calls.lock().unwrap().clone();
    let tos: Vec<&str> = calls.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(tos.len(), 3, "{tos:?}");
    assert_eq!(tos[1], "POST /v2/pipeline/load/versions");
    assert_eq!(
        calls[2],
        Call {
            to: "PUT /v2/pipeline/load/shadow".into(),
            content_type: "application/json".into(),
            authorization: "Bearer T0KEN".into(),
            body: br#"{"version":7}"#.to_vec(),
        }
    );
}

#[tokio::test]
async fn a_daily_shadow_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("daily.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(dir.path().join("guard.wasm"), b"\0asm guard").unwrap();
    let (args, calls) = fake_api(false).await;

    let e = deploy_manifest(&args, PipelineKind::Daily, &manifest, Then::Shadow)
        .await
        .unwrap_err();

    assert!(matches!(e, CommandError::DailyShadow), "{e}");
    assert_eq!(
        e.to_string(),
        "--shadow: only the load pipeline has a shadow; drop --daily"
    );
    assert_eq!(e.exit_code(), 1);
    assert!(calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn shadow_without_a_version_prints_what_it_found() {
    let (args, calls) = fake_api(false).await;

    let lines = shadow_lines(&args, ShadowAction::Report).await.unwrap();

    assert_eq!(
        lines,
        [
            "shadow version 7 by demo-admin at 2026-12-06T09:00:02.000000+00:00",
            "loads 12, agreements 10",
            "load-b  active passed vs shadow failed (ParquetValidation)  step guard  column id has nulls",
            "load-a  active passed vs shadow error  step -  -",
        ]
    );
    let tos: Vec<String> = calls.lock().unwrap().iter().map(|c| c.to.clone()).collect();
    assert_eq!(tos, ["GET /v2/pipeline/load/shadow"]);
}

#[tokio::test]
async fn shadow_sets_a_version_and_turns_it_off() {
    let (args, calls) = fake_api(false).await;

    let set = shadow_lines(&args, ShadowAction::Set(7)).await.unwrap();
    let off = shadow_lines(&args, ShadowAction::Off).await.unwrap();

    assert_eq!(
        set,
        ["shadow version 7 by demo-admin at 2026-12-06T09:00:02.000000+00:00"]
    );
    assert_eq!(off, ["shadow off"]);
    let calls = calls.lock().unwrap().clone();
    let sent: Vec<(&str, &[u8])> = calls
        .iter()
        .map(|c| (c.to.as_str(), c.body.as_slice()))
        .collect();
    assert_eq!(
        sent,
        [
            (
                "PUT /v2/pipeline/load/shadow",
                br#"{"version":7}"#.as_slice()
            ),
            ("DELETE /v2/pipeline/load/shadow", b"".as_slice()),
        ]
    );
}

#[test]
fn no_shadow_reads_as_such() {
    let report: ShadowReport = serde_json::from_value(serde_json::json!({
        "version": null, "setBy": null, "setAt": null,
        "loads": 0, "agreements": 0, "disagreements": []
    }))
    .unwrap();
    assert_eq!(
        report_lines(&report),
        ["no shadow", "loads 0, agreements 0"]
    );
}
