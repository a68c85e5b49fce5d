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
//!                                          # relative to the manifest
//! grants = ["staged-files", "log"]
//! time_limit_ms = 10000                    # optional
//! memory_limit_bytes = 67108864            # optional
//! [steps.config]                           # optional, handed to the step as JSON
//! ```
//!
//! `pipelines/load.toml` is the default; `pipelines/orgs/<org>/load.toml`
//! replaces it for one org. An unknown key, a missing key or a bad value is an
//! error naming the file and the key.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use serde::Deserialize;

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
    Log,
}

impl Capability {
    pub fn name(self) -> &'static str {
        match self {
            Capability::StagedFiles => "staged-files",
            Capability::StagedSql => "staged-sql",
            Capability::LakeSchema => "lake-schema",
            Capability::LakeAppend => "lake-append",
            Capability::Log => "log",
        }
    }
}

/// Where a step's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentSource {
    /// One of the components built into the host (`builtin:<name>`).
    Builtin(String),
    /// A `.wasm` file (resolved against the manifest's folder).
    File(PathBuf),
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
    /// Reads a manifest file.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
            file: origin.clone(),
            key: "<file>".into(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &origin, path.parent().unwrap_or(Path::new(".")))
    }

    /// Parses manifest text; relative component paths resolve against `base`.
    pub fn parse(text: &str, origin: &str, base: &Path) -> Result<Self, ManifestError> {
        let error = |key: &str, problem: String| ManifestError {
            file: origin.to_string(),
            key: key.to_string(),
            problem,
        };
        let document: toml::Value = toml::from_str(text)
            .map_err(|e| error("<toml>", format!("not valid TOML: {}", e.message())))?;
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
        let mut names = BTreeSet::new();
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
            if !names.insert(step.name.clone()) {
                return Err(error(
                    &at("name"),
                    format!("step `{}` is listed twice", step.name),
                ));
            }
            let component = match step.component.strip_prefix("builtin:") {
                Some(name) if super::builtin::component(name).is_some() => {
                    ComponentSource::Builtin(name.to_string())
                }
                Some(name) => {
                    return Err(error(
                        &at("component"),
                        format!(
                            "no built-in component `{name}`; built in are {}",
                            super::builtin::names().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
                None if step.component.ends_with(".wasm") => {
                    ComponentSource::File(base.join(&step.component))
                }
                None => {
                    return Err(error(
                        &at("component"),
                        "use `builtin:<name>` or a path to a .wasm file".into(),
                    ));
                }
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
            origin: origin.to_string(),
            steps,
        })
    }
}

/// The load manifest of `org`: `<dir>/orgs/<org>/load.toml` when it exists,
/// else `<dir>/load.toml`. Read at each commit, so an operator's change takes
/// effect without a restart or a rebuild.
pub fn load_manifest_path(dir: &Path, org: &str) -> PathBuf {
    let own = dir.join("orgs").join(org).join("load.toml");
    if own.exists() {
        own
    } else {
        dir.join("load.toml")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, "test.toml", Path::new("/manifests"))
    }

    #[test]
    fn the_shipped_manifests_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
        let manifest = Manifest::load(&dir.join("load.toml")).unwrap();
        let names: Vec<&str> = manifest.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "validate_parquet",
                "enforce_service_clients",
                "verify_checksums",
                "match_schema",
                "insert"
            ]
        );
        let insert = manifest.steps.last().unwrap();
        assert!(insert.grants.contains(&Capability::LakeAppend));
        assert!(
            manifest.steps[..4]
                .iter()
                .all(|s| !s.grants.contains(&Capability::LakeAppend)),
            "only the insert step may append"
        );
    }

    #[test]
    fn a_valid_manifest_with_a_file_component_and_config() {
        let manifest = parse(
            r#"
            version = 1
            [[steps]]
            name = "reject_columns"
            component = "steps/reject.wasm"
            grants = ["staged-files", "log"]
            time_limit_ms = 500
            [steps.config]
            forbidden = ["ssn"]
            "#,
        )
        .unwrap();
        let step = &manifest.steps[0];
        assert_eq!(
            step.component,
            ComponentSource::File(PathBuf::from("/manifests/steps/reject.wasm"))
        );
        assert_eq!(step.time_limit_ms, 500);
        assert_eq!(step.memory_limit_bytes, DEFAULT_MEMORY_LIMIT_BYTES);
        assert_eq!(step.config_json, r#"{"forbidden":["ssn"]}"#);
    }

    #[test]
    fn invalid_manifests_name_the_file_and_the_key() {
        let cases = [
            (
                "version = 1\nsteps = []\nextra = 1\n",
                "extra",
                "unknown field `extra`",
            ),
            ("steps = []\n", "<root>", "missing field `version`"),
            ("version = 2\nsteps = []\n", "version", "not supported"),
            ("version = 1\nsteps = []\n", "steps", "at least one step"),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ntimeout = 1\n",
                "steps[0].timeout",
                "unknown field `timeout`",
            ),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ngrants = [\"network\"]\n",
                "steps[0].grants[0]",
                "unknown variant `network`",
            ),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:nope\"\n",
                "steps[0].component",
                "no built-in component `nope`",
            ),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"http://x/y\"\n",
                "steps[0].component",
                ".wasm",
            ),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n",
                "steps[1].name",
                "listed twice",
            ),
            (
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\nmemory_limit_bytes = 10\n",
                "steps[0].memory_limit_bytes",
                "at least",
            ),
            ("version = ", "<toml>", "not valid TOML"),
        ];
        for (text, key, problem) in cases {
            let error = parse(text).unwrap_err();
            assert_eq!(error.file, "test.toml", "{text}");
            assert_eq!(error.key, key, "{text}: {error}");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
    }
}
