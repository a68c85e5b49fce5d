//! The pipeline deployment API (docs/pipeline-deploy.md) as one caller
//! sees it: who calls (`--api`, `--token`, `--ca-cert`), one method per call
//! the commands make, the answers' bodies, and a refusal's status and
//! `message` as the server gave them. It knows nothing of manifests but
//! their text and nothing of printing (`deploy.rs` does both).

use std::path::PathBuf;

use lakehost::pipeline::PipelineKind;
use reqwest::{StatusCode, header};
use serde::{Deserialize, de::DeserializeOwned};

/// The API every one of these commands calls, and who calls it.
#[derive(clap::Args)]
pub struct ApiArgs {
    /// The Org (or Zone) API's address, e.g. https://demo.api.example (with
    /// or without its /v2).
    #[arg(long, env = "LAKEHOST_API")]
    pub api: String,
    /// A token of the org's (or zone's) ZoneAdmin, with pipeline:read (and
    /// pipeline:write to deploy, activate or set the shadow).
    #[arg(long, env = "LAKEHOST_TOKEN", hide_env_values = true)]
    pub token: String,
    /// A PEM certificate to trust besides the system's roots, for a server
    /// whose certificate another authority signed.
    #[arg(long, env = "LAKEHOST_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

/// Why a call of the API did not give its answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    #[error("--api {api}: not an http:// or https:// address")]
    BadApi {
        api: String,
        #[source]
        source: Option<url::ParseError>,
    },
    #[error("--ca-cert {}: cannot read it", path.display())]
    CaCertUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--ca-cert {}: not a PEM certificate", path.display())]
    BadCaCert {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot start an HTTP client")]
    Client(#[source] reqwest::Error),
    /// The server answered outside 2xx: its status and `message`.
    #[error("{call}: {status}: {message}")]
    Refused {
        call: String,
        status: StatusCode,
        message: String,
    },
    #[error("{call}: cannot reach the API")]
    Unreachable {
        call: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{call}: {status} with a body the API never sends")]
    UnexpectedAnswer {
        call: String,
        status: StatusCode,
        #[source]
        source: serde_json::Error,
    },
}

impl CallError {
    pub(super) fn exit_code(&self) -> u8 {
        match self {
            CallError::Refused { .. } => 1,
            _ => 2,
        }
    }
}

/// The load pipeline's shadow: only a load pipeline has one.
const SHADOW: &str = "/v2/pipeline/load/shadow";

/// `PUT /v2/pipeline/components/...`'s body.
#[derive(Deserialize)]
pub(super) struct StoredComponent {
    pub(super) digest: String,
    pub(super) world: String,
}

/// A stored component, and whether this call stored it (201) or found it (200).
pub(super) struct Stored {
    pub(super) created: bool,
    pub(super) body: StoredComponent,
}

/// A version, as `POST .../versions` and `GET .../versions` answer it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Version {
    pub(super) version: u64,
    pub(super) digest: String,
    pub(super) created_by: String,
    pub(super) created_at: String,
    pub(super) steps: Vec<VersionStep>,
}

#[derive(Deserialize)]
pub(super) struct VersionStep {
    pub(super) name: String,
}

#[derive(Deserialize)]
struct Versions {
    versions: Vec<Version>,
}

/// An activation: all null when the operator's files run.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Activation {
    pub(super) version: Option<u64>,
    activated_by: Option<String>,
    activated_at: Option<String>,
}

impl Activation {
    pub(super) fn line(&self) -> String {
        let by = self.activated_by.as_deref().unwrap_or("?");
        let at = self.activated_at.as_deref().unwrap_or("?");
        match self.version {
            Some(n) => format!("activated version {n} by {by} at {at}"),
            None => format!("the operator's files, since {at} ({by})"),
        }
    }
}

/// The load pipeline's shadow, as `PUT`, `DELETE` and `GET .../shadow`
/// answer it: all null when none was ever set.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShadowSetting {
    pub(super) version: Option<u64>,
    set_by: Option<String>,
    set_at: Option<String>,
}

impl ShadowSetting {
    pub(super) fn line(&self) -> String {
        let by = self.set_by.as_deref().unwrap_or("?");
        let at = self.set_at.as_deref().unwrap_or("?");
        match self.version {
            Some(n) => format!("shadow version {n} by {by} at {at}"),
            None => "no shadow".into(),
        }
    }
}

/// `GET /v2/pipeline/load/shadow`: the setting and what it found since.
#[derive(Debug, Deserialize)]
pub(super) struct ShadowReport {
    #[serde(flatten)]
    pub(super) setting: ShadowSetting,
    pub(super) loads: u64,
    pub(super) agreements: u64,
    pub(super) disagreements: Vec<ShadowRun>,
}

/// A commit whose shadow run did not agree with its active steps.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShadowRun {
    pub(super) load_id: String,
    pub(super) active_outcome: String,
    pub(super) shadow_outcome: String,
    pub(super) step: Option<String>,
    pub(super) message: Option<String>,
}

/// A refusal's body.
#[derive(Deserialize)]
struct Refusal {
    message: String,
}

/// The pipeline deployment API of one org (or zone), as one caller.
pub(super) struct Api {
    /// The address without its `/v2`, and without a trailing `/`.
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    pub(super) fn new(args: &ApiArgs) -> Result<Self, CallError> {
        let bad_api = |source| CallError::BadApi {
            api: args.api.clone(),
            source,
        };
        let parsed = url::Url::parse(&args.api).map_err(|e| bad_api(Some(e)))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(bad_api(None));
        }
        let trimmed = args.api.trim_end_matches('/');
        let base = trimmed.strip_suffix("/v2").unwrap_or(trimmed).to_string();
        let mut http = reqwest::Client::builder();
        if let Some(path) = &args.ca_cert {
            let pem = std::fs::read(path).map_err(|source| CallError::CaCertUnreadable {
                path: path.clone(),
                source,
            })?;
            let root =
                reqwest::Certificate::from_pem(&pem).map_err(|source| CallError::BadCaCert {
                    path: path.clone(),
                    source,
                })?;
            http = http.add_root_certificate(root);
        }
        Ok(Self {
            base,
            token: args.token.clone(),
            http: http.build().map_err(CallError::Client)?,
        })
    }

    pub(super) async fn store_component(
        &self,
        digest: &str,
        bytes: bytes::Bytes,
    ) -> Result<Stored, CallError> {
        let path = format!("/v2/pipeline/components/{digest}");
        let request = self
            .http
            .put(self.url(&path))
            .header(header::CONTENT_TYPE, "application/wasm")
            .body(bytes);
        let (status, body) = self.call(format!("PUT {path}"), request).await?;
        Ok(Stored {
            created: status == StatusCode::CREATED,
            body,
        })
    }

    pub(super) async fn post_version(
        &self,
        kind: PipelineKind,
        manifest: String,
    ) -> Result<Version, CallError> {
        let path = format!("/v2/pipeline/{}/versions", kind.label());
        let request = self
            .http
            .post(self.url(&path))
            .header(header::CONTENT_TYPE, "application/toml")
            .body(manifest);
        Ok(self.call(format!("POST {path}"), request).await?.1)
    }

    pub(super) async fn versions(&self, kind: PipelineKind) -> Result<Vec<Version>, CallError> {
        let path = format!("/v2/pipeline/{}/versions", kind.label());
        let request = self.http.get(self.url(&path));
        let (_, body): (_, Versions) = self.call(format!("GET {path}"), request).await?;
        Ok(body.versions)
    }

    pub(super) async fn active(&self, kind: PipelineKind) -> Result<Activation, CallError> {
        let path = format!("/v2/pipeline/{}/active", kind.label());
        let request = self.http.get(self.url(&path));
        Ok(self.call(format!("GET {path}"), request).await?.1)
    }

    pub(super) async fn activate(
        &self,
        kind: PipelineKind,
        version: u64,
    ) -> Result<Activation, CallError> {
        let path = format!("/v2/pipeline/{}/active", kind.label());
        let request = self
            .http
            .put(self.url(&path))
            .json(&serde_json::json!({ "version": version }));
        Ok(self.call(format!("PUT {path}"), request).await?.1)
    }

    /// Runs a load version beside every commit (`version`), or no more
    /// (`None`).
    pub(super) async fn set_shadow(
        &self,
        version: Option<u64>,
    ) -> Result<ShadowSetting, CallError> {
        let request = match version {
            Some(version) => self
                .http
                .put(self.url(SHADOW))
                .json(&serde_json::json!({ "version": version })),
            None => self.http.delete(self.url(SHADOW)),
        };
        let method = if version.is_some() { "PUT" } else { "DELETE" };
        Ok(self.call(format!("{method} {SHADOW}"), request).await?.1)
    }

    pub(super) async fn shadow_report(&self) -> Result<ShadowReport, CallError> {
        let request = self.http.get(self.url(SHADOW));
        Ok(self.call(format!("GET {SHADOW}"), request).await?.1)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request with the token; a 2xx answer's status and body, or
    /// the server's refusal.
    async fn call<T: DeserializeOwned>(
        &self,
        call: String,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, T), CallError> {
        let unreachable = |call: &String| {
            let call = call.clone();
            move |source| CallError::Unreachable { call, source }
        };
        let answer = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(unreachable(&call))?;
        let status = answer.status();
        let body = answer.bytes().await.map_err(unreachable(&call))?;
        if !status.is_success() {
            return Err(CallError::Refused {
                message: refusal_message(&body),
                call,
                status,
            });
        }
        let parsed =
            serde_json::from_slice(&body).map_err(|source| CallError::UnexpectedAnswer {
                call,
                status,
                source,
            })?;
        Ok((status, parsed))
    }
}

/// A refusal's `message`; a body without one (a proxy's page) as text, cut
/// short.
fn refusal_message(body: &[u8]) -> String {
    if let Ok(refusal) = serde_json::from_slice::<Refusal>(body) {
        return refusal.message;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(no message)".into();
    }
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_the_servers_message() {
        assert_eq!(
            refusal_message(br#"{"message": "steps[0].grants[0]: `lake-sql` is not allowed"}"#),
            "steps[0].grants[0]: `lake-sql` is not allowed"
        );
        assert_eq!(
            refusal_message(b"<html>bad gateway</html>\n"),
            "<html>bad gateway</html>"
        );
        assert_eq!(refusal_message(b""), "(no message)");
    }

    #[test]
    fn the_api_is_taken_with_or_without_its_v2() {
        let api = |address: &str| ApiArgs {
            api: address.into(),
            token: "t".into(),
            ca_cert: None,
        };
        for address in ["https://demo.api.example", "https://demo.api.example/v2/"] {
            let client = Api::new(&api(address)).unwrap();
            assert_eq!(
                client.url("/v2/pipeline/load/active"),
                "https://demo.api.example/v2/pipeline/load/active"
            );
        }
        assert!(matches!(
            Api::new(&api("demo.api.example")),
            Err(CallError::BadApi { .. })
        ));
        assert!(matches!(
            Api::new(&api("ftp://demo.api.example")),
            Err(CallError::BadApi { source: None, .. })
        ));
    }

    #[tokio::test]
    async fn an_api_that_cannot_be_reached_is_exit_code_2() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = ApiArgs {
            api: format!("http://127.0.0.1:{port}"),
            token: "t".into(),
            ca_cert: None,
        };
        let e = Api::new(&args)
            .unwrap()
            .active(PipelineKind::Load)
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::Unreachable { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("GET /v2/pipeline/load/active: cannot reach the API")
        );
        assert_eq!(e.exit_code(), 2);
    }
}
