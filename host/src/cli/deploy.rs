//! `lakehost pipeline deploy | versions | activate`, part of the binary: the
//! client side of the pipeline deployment API (docs/pipeline-deploy.md, "The
//! command line"). `deploy` uploads each `.wasm` file a manifest names (by
//! path, relative to the manifest's folder), puts each one's digest where its
//! path was, in the author's own text (comments and layout kept), posts that
//! text as a new version and may activate it; `versions` and `activate` read
//! and move the activation. Reading the manifest and its files is
//! `deploy_manifest.rs`'s, the HTTP calls `deploy_api.rs`'s; this module
//! puts them in order and prints what they did.
//!
//! It knows the server only through HTTP, and a manifest only as far as
//! finding its components: every other check (keys, grants, limits, worlds)
//! is the server's, whose message is printed as it comes. Exit codes: 0 when
//! done; 1 when the server refused (any answer outside 2xx) or the manifest
//! cannot be deployed as it is; 2 when the API cannot be reached or answers
//! what the API never sends, or a file cannot be read.

use std::{path::Path, process::ExitCode};

use lakehost::pipeline::PipelineKind;

#[path = "deploy_api.rs"]
mod api;
#[path = "deploy_manifest.rs"]
mod manifest;

pub use api::ApiArgs;
use api::{Api, CallError, segment};
use manifest::{LocalManifest, ManifestError};

/// Any of the commands' failures, each with its exit code.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Call(#[from] CallError),
}

impl CommandError {
    fn exit_code(&self) -> u8 {
        match self {
            CommandError::Manifest(e) => e.exit_code(),
            CommandError::Call(e) => e.exit_code(),
        }
    }
}

/// `lakehost pipeline deploy`.
pub async fn deploy(
    api: &ApiArgs,
    kind: PipelineKind,
    manifest: &Path,
    activate: bool,
) -> ExitCode {
    finish(
        "deploy",
        deploy_manifest(api, kind, manifest, activate).await,
    )
}

/// `lakehost pipeline versions`.
pub async fn versions(api: &ApiArgs, kind: PipelineKind) -> ExitCode {
    finish("versions", list_versions(api, kind).await)
}

/// `lakehost pipeline activate`.
pub async fn activate(api: &ApiArgs, kind: PipelineKind, version: u64) -> ExitCode {
    let done = async {
        let api = Api::new(api)?;
        let activation = api.activate(kind, version).await?;
        println!("{}", activation.line());
        Ok(())
    };
    finish("activate", done.await)
}

fn finish(command: &str, outcome: Result<(), CommandError>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lakehost pipeline {command}: {}", with_causes(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// An error and its causes on one line, each cause once (some errors repeat
/// their source's text in their own).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = e.source();
    }
    text
}

async fn deploy_manifest(
    api_args: &ApiArgs,
    kind: PipelineKind,
    manifest: &Path,
    activate: bool,
) -> Result<(), CommandError> {
    // Every file is read (and its size checked) before the first call, so a
    // manifest that cannot go stores nothing.
    let local = LocalManifest::read(manifest)?;
    let api = Api::new(api_args)?;
    for component in &local.components {
        let stored = api
            .store_component(&component.digest(), component.bytes.clone())
            .await?;
        let how = if stored.created {
            "stored"
        } else {
            "already stored"
        };
        println!(
            "component {}: {} ({how}, world {})",
            component.written, stored.body.digest, stored.body.world
        );
    }
    let version = api.post_version(kind, local.with_digests()).await?;
    println!("version {} {}", version.version, version.digest);
    if activate {
        let activation = api.activate(kind, version.version).await?;
        println!("{}", activation.line());
    }
    Ok(())
}

async fn list_versions(api_args: &ApiArgs, kind: PipelineKind) -> Result<(), CommandError> {
    let api = Api::new(api_args)?;
    let versions = api.versions(kind).await?;
    if versions.is_empty() {
        println!("no versions of the {} pipeline", segment(kind));
    }
    for version in &versions {
        let steps: Vec<&str> = version.steps.iter().map(|s| s.name.as_str()).collect();
        println!(
            "version {}  {}  {}  {}  {}",
            version.version,
            version.created_at,
            version.created_by,
            version.digest,
            steps.join(",")
        );
    }
    let active = api.active(kind).await?;
    match active.version {
        Some(_) => println!("active: {}", active.line()),
        None => println!("active: none (the operator's files)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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

        deploy_manifest(&args, PipelineKind::Load, &manifest, true)
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

        let e = deploy_manifest(&args, PipelineKind::Load, &manifest, true)
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

        let e = deploy_manifest(&args, PipelineKind::Load, &manifest, false)
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
}
