//! `lakehost pipeline deploy | versions | activate | shadow`, part of the
//! binary: the client side of the pipeline deployment API
//! (docs/pipeline-deploy.md, "The command line"). `deploy` uploads each
//! `.wasm` file a manifest names (by path, relative to the manifest's
//! folder), puts each one's digest where its path was, in the author's own
//! text (comments and layout kept), posts that text as a new version and may
//! activate it or make it the load pipeline's shadow; `versions` and
//! `activate` read and move the activation; `shadow` sets, clears or reports
//! the shadow. Reading the manifest and its files is
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
use api::{Api, CallError, ShadowReport};
use manifest::{LocalManifest, ManifestError};

/// Any of the commands' failures, each with its exit code.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Call(#[from] CallError),
    /// `--daily --shadow`: refused before any call, as the server would.
    #[error("--shadow: only the load pipeline has a shadow; drop --daily")]
    DailyShadow,
}

impl CommandError {
    fn exit_code(&self) -> u8 {
        match self {
            CommandError::Manifest(e) => e.exit_code(),
            CommandError::Call(e) => e.exit_code(),
            CommandError::DailyShadow => 1,
        }
    }
}

/// What `deploy` does with the version it created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: it waits to be activated.
    Keep,
    /// `--activate`.
    Activate,
    /// `--shadow`: the load pipeline's shadow.
    Shadow,
}

impl Then {
    /// From `--activate` and `--shadow` (which clap keeps apart).
    pub fn from_flags(activate: bool, shadow: bool) -> Self {
        match (activate, shadow) {
            (true, _) => Then::Activate,
            (false, true) => Then::Shadow,
            (false, false) => Then::Keep,
        }
    }
}

/// What `lakehost pipeline shadow` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowAction {
    /// `shadow N`: run version N beside every commit.
    Set(u64),
    /// `shadow --off`.
    Off,
    /// `shadow`: what the shadow found.
    Report,
}

/// `lakehost pipeline deploy`.
pub async fn deploy(api: &ApiArgs, kind: PipelineKind, manifest: &Path, then: Then) -> ExitCode {
    finish("deploy", deploy_manifest(api, kind, manifest, then).await)
}

/// `lakehost pipeline shadow`.
pub async fn shadow(api: &ApiArgs, action: ShadowAction) -> ExitCode {
    let done = shadow_lines(api, action).await.map(|lines| {
        for line in lines {
            println!("{line}");
        }
    });
    finish("shadow", done)
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
    then: Then,
) -> Result<(), CommandError> {
    if then == Then::Shadow && kind == PipelineKind::Daily {
        return Err(CommandError::DailyShadow);
    }
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
    match then {
        Then::Keep => {}
        Then::Activate => {
            let activation = api.activate(kind, version.version).await?;
            println!("{}", activation.line());
        }
        Then::Shadow => {
            let setting = api.set_shadow(Some(version.version)).await?;
            println!(
                "shadow version {}",
                setting.version.unwrap_or(version.version)
            );
        }
    }
    Ok(())
}

/// The lines `shadow` prints.
async fn shadow_lines(
    api_args: &ApiArgs,
    action: ShadowAction,
) -> Result<Vec<String>, CommandError> {
    let api = Api::new(api_args)?;
    Ok(match action {
        ShadowAction::Set(version) => vec![api.set_shadow(Some(version)).await?.line()],
        ShadowAction::Off => {
            api.set_shadow(None).await?;
            vec!["shadow off".into()]
        }
        ShadowAction::Report => report_lines(&api.shadow_report().await?),
    })
}

/// The setting, the tally, then one line per disagreement.
fn report_lines(report: &ShadowReport) -> Vec<String> {
    let mut lines = vec![
        report.setting.line(),
        format!("loads {}, agreements {}", report.loads, report.agreements),
    ];
    for run in &report.disagreements {
        lines.push(format!(
            "{}  active {} vs shadow {}  step {}  {}",
            run.load_id,
            run.active_outcome,
            run.shadow_outcome,
            run.step.as_deref().unwrap_or("-"),
            run.message.as_deref().unwrap_or("-"),
        ));
    }
    lines
}

async fn list_versions(api_args: &ApiArgs, kind: PipelineKind) -> Result<(), CommandError> {
    let api = Api::new(api_args)?;
    let versions = api.versions(kind).await?;
    if versions.is_empty() {
        println!("no versions of the {} pipeline", kind.label());
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
#[path = "deploy_tests.rs"]
mod tests;
