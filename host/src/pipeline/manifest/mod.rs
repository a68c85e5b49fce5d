//! Pipeline manifests (DESIGN.md "Load pipeline as WebAssembly components"):
//! strict, versioned TOML naming the steps in order, each with its component,
//! the capabilities it is granted, its limits and its own config table.
//!
//! ```toml
//! version = 1
//!
//! [[steps]]
//! name = "validate_parquet"
//! component = "builtin:validate_parquet"   # or a path to a .wasm file,
//!                                          # relative to the manifest,
//!                                          # inside the pipeline folder
//! grants = ["staged-files", "log"]
//! time_limit_ms = 10000                    # optional
//! memory_limit_bytes = 67108864            # optional
//! [steps.config]                           # optional, handed to the step as JSON
//! ```
//!
//! `pipelines/load.toml` is the default; `pipelines/orgs/<org>/load.toml`
//! replaces it for one org; `daily.toml` likewise for the daily run. An
//! unknown key, a missing key, a bad value, a capability or a built-in of the
//! other pipeline is an error naming the file and the key; so is a component
//! path that is absolute or climbs out of the pipeline folder. Manifests and
//! component files are read only through `files.rs` (inside the folder,
//! regular files, bounded).
//!
//! This module reads manifest text into a [`Manifest`] and nothing more; which
//! manifest an org runs (its own, the shared one or the built-in default) is
//! `org.rs`'s. It never runs or compiles a step; `watch.rs`, the background
//! round that has the engine compile the manifests' changed components, is
//! the one part that asks for compiling.

use std::{collections::BTreeSet, path::Path};

use serde::Deserialize;

use super::{
    PipelineKind, SharedCause,
    files::{ComponentFile, PathRefused, PipelineFiles, folder_of, read_manifest},
};

mod org;
#[cfg(test)]
mod tests;
pub mod watch;

pub use org::{BUILT_IN_ORIGIN, manifest_path, org_manifest, test_step_refused};

/// The manifest format this host reads.
pub const MANIFEST_VERSION: u32 = 1;

/// Default limits of a step.
pub const DEFAULT_TIME_LIMIT_MS: u64 = 30_000;
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 256 * 1024 * 1024;

/// A capability the host offers steps (one WIT interface each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    StagedFiles,
    StagedSql,
    LakeSchema,
    LakeAppend,
    LakeSql,
    Log,
}

impl Capability {
    pub fn name(self) -> &'static str {
        match self {
            Capability::StagedFiles => "staged-files",
            Capability::StagedSql => "staged-sql",
            Capability::LakeSchema => "lake-schema",
            Capability::LakeAppend => "lake-append",
            Capability::LakeSql => "lake-sql",
            Capability::Log => "log",
        }
    }

    /// The capabilities the steps of a pipeline can import.
    pub fn of(kind: PipelineKind) -> &'static [Capability] {
        match kind {
            PipelineKind::Load => &[
                Capability::StagedFiles,
                Capability::StagedSql,
                Capability::LakeSchema,
                Capability::LakeAppend,
                Capability::Log,
            ],
            PipelineKind::Daily => &[Capability::LakeSql, Capability::Log],
        }
    }
}

/// Where a step's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentSource {
    /// One of the components built into the host (`builtin:<name>`).
    Builtin(String),
    /// A `.wasm` file (resolved against the manifest's folder), read
    /// within its pipeline folder and cap.
    File(ComponentFile),
    /// A component stored over the API (`sha256:<hex>`, its digest), in a
    /// manifest version deployed over the API (`deployed/`).
    Stored(String),
}

/// How a manifest names a built-in component: `builtin:<name>`.
const BUILTIN_PREFIX: &str = "builtin:";

/// How a deployed manifest names a stored component: `sha256:<hex>`.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Whether `text` is a component digest: `sha256:` and 64 lowercase hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix(DIGEST_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Where a manifest's components may come from besides the built-ins: files
/// inside the pipeline folder (an operator's manifest), or components stored
/// over the API (a version deployed over the API).
#[derive(Clone, Copy)]
pub enum ComponentNames<'a> {
    /// `.wasm` paths, resolved against `base` and kept inside `files.dir`.
    Files {
        base: &'a Path,
        files: &'a PipelineFiles,
    },
    /// `sha256:<hex>` digests.
    Stored,
}

/// As messages show it: `builtin:<name>`, or a file by its name alone (the
/// server's directories never reach a caller).
impl std::fmt::Display for ComponentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComponentSource::Builtin(name) => write!(f, "{BUILTIN_PREFIX}{name}"),
            ComponentSource::File(file) => f.write_str(
                &file
                    .path()
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy(),
            ),
            ComponentSource::Stored(digest) => f.write_str(digest),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub component: ComponentSource,
    pub grants: BTreeSet<Capability>,
    pub time_limit_ms: u64,
    pub memory_limit_bytes: u64,
    /// The step's `config` table as JSON text.
    pub config_json: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub kind: PipelineKind,
    /// Where it was read from (for messages).
    pub origin: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {problem}")]
pub struct ManifestError {
    pub file: String,
    pub key: String,
    pub problem: String,
    /// Why the file could not be read, when that is the problem.
    #[source]
    pub cause: Option<SharedCause>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    version: u32,
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: String,
    component: String,
    #[serde(default)]
    grants: Vec<Capability>,
    time_limit_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    #[serde(default)]
    config: Option<toml::Table>,
}

impl Manifest {
    /// Reads a manifest file of a `kind` pipeline as the command-line tools
    /// do: its files within the folder a server would hold it in, under the
    /// default cap ([`PipelineFiles::around`]).
    pub fn load(kind: PipelineKind, path: &Path) -> Result<Self, ManifestError> {
        Self::load_in(kind, path, &PipelineFiles::around(path))
    }

    /// Reads a manifest file of a `kind` pipeline, it and its components
    /// within `files`' folder and caps.
    pub fn load_in(
        kind: PipelineKind,
        path: &Path,
        files: &PipelineFiles,
    ) -> Result<Self, ManifestError> {
        let origin = path.display().to_string();
        let text = read_manifest(path, &files.dir).map_err(|e| ManifestError {
            file: origin.clone(),
            key: "<file>".into(),
            problem: format!("cannot read: {e}"),
            cause: Some(SharedCause::new(e)),
        })?;
        Self::parse_in(kind, &text, &origin, folder_of(path), files)
    }

    /// Parses manifest text; relative component paths resolve against
    /// `base`, and stay inside it, under the default cap.
    pub fn parse(
        kind: PipelineKind,
        text: &str,
        origin: &str,
        base: &Path,
    ) -> Result<Self, ManifestError> {
        Self::parse_in(kind, text, origin, base, &PipelineFiles::new(base))
    }

    /// Parses manifest text; relative component paths resolve against
    /// `base` (the manifest's folder) and must stay inside `files.dir`.
    pub fn parse_in(
        kind: PipelineKind,
        text: &str,
        origin: &str,
        base: &Path,
        files: &PipelineFiles,
    ) -> Result<Self, ManifestError> {
        Self::parse_naming(kind, text, origin, ComponentNames::Files { base, files })
    }

    /// Parses manifest text whose components other than built-ins are
    /// named as `names` allows.
    pub fn parse_naming(
        kind: PipelineKind,
        text: &str,
        origin: &str,
        names: ComponentNames<'_>,
    ) -> Result<Self, ManifestError> {
        let error = |key: &str, problem: String| ManifestError {
            file: origin.to_string(),
            key: key.to_string(),
            problem,
            cause: None,
        };
        let document: toml::Value =
            toml::from_str(text).map_err(|e| error("<toml>", toml_problem(text, &e)))?;
        let raw: RawManifest = serde_path_to_error::deserialize(document).map_err(|e| {
            let key = e.path().to_string();
            error(
                if key == "." { "<root>" } else { &key },
                e.into_inner().message().trim().to_string(),
            )
        })?;
        if raw.version != MANIFEST_VERSION {
            return Err(error(
                "version",
                format!(
                    "version {} is not supported; this host reads version {MANIFEST_VERSION}",
                    raw.version
                ),
            ));
        }
        if raw.steps.is_empty() {
            return Err(error("steps", "a pipeline needs at least one step".into()));
        }
        let mut step_names = BTreeSet::new();
        let mut steps = Vec::with_capacity(raw.steps.len());
        for (i, step) in raw.steps.into_iter().enumerate() {
            let at = |key: &str| format!("steps[{i}].{key}");
            let valid_name = !step.name.is_empty()
                && step.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !valid_name {
                return Err(error(
                    &at("name"),
                    "use lowercase letters, digits, `_` and `-`".into(),
                ));
            }
            if !step_names.insert(step.name.clone()) {
                return Err(error(
                    &at("name"),
                    format!("step `{}` is listed twice", step.name),
                ));
            }
            let component = match step.component.strip_prefix(BUILTIN_PREFIX) {
                Some(name) => match super::builtin::component(name) {
                    Some((builtin_kind, _)) if builtin_kind == kind => {
                        ComponentSource::Builtin(name.to_string())
                    }
                    found => {
                        let ours: Vec<&str> = super::builtin::names()
                            .filter(|(_, k)| *k == kind)
                            .map(|(n, _)| n)
                            .collect();
                        let problem = if found.is_some() {
                            format!("`{name}` is not one of the built-in {}", kind.steps_name())
                        } else {
                            format!("no built-in component `{name}`")
                        };
                        return Err(error(
                            &at("component"),
                            format!("{problem}; built in are {}", ours.join(", ")),
                        ));
                    }
                },
                None => other_component(&step.component, names)
                    .map_err(|problem| error(&at("component"), problem.to_string()))?,
            };
            let time_limit_ms = step.time_limit_ms.unwrap_or(DEFAULT_TIME_LIMIT_MS);
            let memory_limit_bytes = step
                .memory_limit_bytes
                .unwrap_or(DEFAULT_MEMORY_LIMIT_BYTES);
            if time_limit_ms == 0 {
                return Err(error(&at("time_limit_ms"), "must be at least 1".into()));
            }
            if memory_limit_bytes < 1024 * 1024 {
                return Err(error(
                    &at("memory_limit_bytes"),
                    "must be at least 1048576 (1 MiB)".into(),
                ));
            }
            let allowed = Capability::of(kind);
            if let Some((j, refused)) = step
                .grants
                .iter()
                .enumerate()
                .find(|(_, g)| !allowed.contains(g))
            {
                let names: Vec<&str> = allowed.iter().map(|c| c.name()).collect();
                return Err(error(
                    &at(&format!("grants[{j}]")),
                    format!(
                        "`{}` is not a capability of {}; they may be granted {}",
                        refused.name(),
                        kind.steps_name(),
                        names.join(", ")
                    ),
                ));
            }
            let config_json = serde_json::to_string(&step.config.unwrap_or_default())
                .map_err(|e| error(&at("config"), e.to_string()))?;
            steps.push(Step {
                name: step.name,
                component,
                grants: step.grants.into_iter().collect(),
                time_limit_ms,
                memory_limit_bytes,
                config_json,
            });
        }
        Ok(Self {
            kind,
            origin: origin.to_string(),
            steps,
        })
    }
}

impl Manifest {
    /// Refuses a load manifest with no step granted `lake-append`: nothing
    /// would write the load's rows. (`pipeline check` and deployed
    /// versions refuse it; a server running such a file fails its
    /// commits.)
    pub fn check_appends(&self) -> Result<(), ManifestError> {
        let appends = |step: &Step| step.grants.contains(&Capability::LakeAppend);
        if self.kind == PipelineKind::Daily || self.steps.iter().any(appends) {
            return Ok(());
        }
        Err(ManifestError {
            file: self.origin.clone(),
            key: "steps".into(),
            problem: "no step is granted `lake-append`: nothing would write the load's rows \
                      (keep `builtin:insert`, or grant your own step lake-append)"
                .into(),
            cause: None,
        })
    }
}

/// Why a component that is not a built-in is refused where it is named.
#[derive(Debug, thiserror::Error)]
enum NamingProblem {
    #[error(transparent)]
    File(#[from] PathRefused),
    #[error(
        "a stored component (`sha256:<hex>`) is named only in a version deployed over the API; \
         name a .wasm file here"
    )]
    StoredInFiles,
    #[error("use `builtin:<name>` or a path to a .wasm file")]
    NotAFile,
    #[error(
        "use `builtin:<name>` or `sha256:<64 lowercase hex digits>` of a component stored with \
         PUT /v2/pipeline/components/sha256:<hex> (a file path names a disk no replica has; \
         `lakehost pipeline deploy` uploads the files and names them so)"
    )]
    NotStored,
}

/// A component that is not a built-in, as `names` allows it.
fn other_component(
    component: &str,
    names: ComponentNames<'_>,
) -> Result<ComponentSource, NamingProblem> {
    match names {
        ComponentNames::Files { base, files } if component.ends_with(".wasm") => Ok(
            ComponentSource::File(ComponentFile::resolve(component, base, files)?),
        ),
        ComponentNames::Files { .. } if component.starts_with(DIGEST_PREFIX) => {
            Err(NamingProblem::StoredInFiles)
        }
        ComponentNames::Files { .. } => Err(NamingProblem::NotAFile),
        ComponentNames::Stored if is_digest(component) => {
            Ok(ComponentSource::Stored(component.to_string()))
        }
        ComponentNames::Stored => Err(NamingProblem::NotStored),
    }
}

/// A TOML error as a manifest's problem: its line and column, then what.
fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', "; ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("not valid TOML at line {line}, column {column}: {message}")
        }
        None => format!("not valid TOML: {message}"),
    }
}
