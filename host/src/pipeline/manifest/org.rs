//! Which manifest an org runs: `<dir>/orgs/<org>/<kind>.toml`, else the
//! shared `<dir>/<kind>.toml`, else the built-in default
//! ([`builtin::manifest`]), read at each use. The one place that decides it
//! for the load commits and the daily runs.
//!
//! It must never let the server's own directories into a broken manifest's
//! message (that message reaches the caller), never hand out a manifest
//! naming a built-in test step unless `pipeline.test_steps` allows it, and
//! never read a manifest or name a component outside `pipeline.dir` (the
//! manifest is read, and its components resolved, by `files.rs`).

use std::path::{Path, PathBuf};

use super::{ComponentSource, Manifest, ManifestError};
use crate::pipeline::{PipelineKind, builtin, files::PipelineFiles};

/// How the built-in default manifest's origin begins.
pub const BUILT_IN_ORIGIN: &str = "built-in ";

/// The `kind` manifest an org's pipelines run: its own or the shared one
/// under `files.dir` (`manifest_path`), else the repository's default,
/// compiled in. It and its components are read within `files`' folder and
/// caps. A broken manifest's error names the file relative to the folder:
/// it reaches the caller in the load's or run's failure, and the server's
/// own paths stay in the server's log. The built-in test steps are refused
/// unless `test_steps` (`pipeline.test_steps`) allows them.
pub fn org_manifest(
    kind: PipelineKind,
    files: &PipelineFiles,
    org: &str,
    test_steps: bool,
) -> Result<Manifest, ManifestError> {
    let dir = files.dir.as_path();
    let path = manifest_path(dir, org, kind);
    if !path.exists() {
        let origin = format!("{BUILT_IN_ORIGIN}pipelines/{}", kind.file_name());
        return Manifest::parse(kind, builtin::manifest(kind), &origin, Path::new("."));
    }
    let shown = path
        .strip_prefix(dir)
        .unwrap_or(Path::new(kind.file_name()))
        .display()
        .to_string();
    let manifest = Manifest::load_in(kind, &path, files).map_err(|mut e| {
        tracing::warn!(%org, error = %e, "a pipeline manifest is broken");
        e.file = shown.clone();
        e
    })?;
    if !test_steps && let Some(refused) = test_step_refused(&manifest, &shown) {
        return Err(refused);
    }
    Ok(manifest)
}

/// The error for the first step of `manifest` (read from `file`) that
/// names a built-in test step, which a server runs only where
/// `pipeline.test_steps` allows it; `None` when it names none.
pub fn test_step_refused(manifest: &Manifest, file: &str) -> Option<ManifestError> {
    manifest
        .steps
        .iter()
        .enumerate()
        .find_map(|(i, step)| match &step.component {
            ComponentSource::Builtin(name) if builtin::TEST_STEPS.contains(&name.as_str()) => {
                Some(ManifestError {
                    file: file.to_string(),
                    key: format!("steps[{i}].component"),
                    problem: format!(
                        "`{name}` is a test step; this server runs it only with pipeline.test_steps = true"
                    ),
                    cause: None,
                })
            }
            _ => None,
        })
}

/// The `kind` manifest of `org`: `<dir>/orgs/<org>/<load|daily>.toml` when it
/// exists, else `<dir>/<load|daily>.toml`. Read at each use, so an operator's
/// change takes effect without a restart or a rebuild.
pub fn manifest_path(dir: &Path, org: &str, kind: PipelineKind) -> PathBuf {
    let own = dir.join("orgs").join(org).join(kind.file_name());
    if own.exists() {
        own
    } else {
        dir.join(kind.file_name())
    }
}
