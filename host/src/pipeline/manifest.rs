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
//! replaces it for one org; `daily.toml` likewise for the daily run. An
//! unknown key, a missing key, a bad value, a capability or a built-in of the
//! other pipeline is an error naming the file and the key.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use super::PipelineKind;

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
    /// Reads a manifest file of a `kind` pipeline.
    pub fn load(kind: PipelineKind, path: &Path) -> Result<Self, ManifestError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
            file: origin.clone(),
            key: "<file>".into(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::parse(
            kind,
            &text,
            &origin,
            path.parent().unwrap_or(Path::new(".")),
        )
    }

    /// Parses manifest text; relative component paths resolve against `base`.
    pub fn parse(
        kind: PipelineKind,
        text: &str,
        origin: &str,
        base: &Path,
    ) -> Result<Self, ManifestError> {
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

/// The `kind` manifest an org's pipelines run: its own or the shared one
/// under `dir` (`manifest_path`), else `builtin` (the repository's default,
/// compiled in). A broken manifest's error names the file relative to `dir`:
/// it reaches the caller in the load's or run's failure, and the server's
/// own paths stay in the server's log. The built-in test steps are refused
/// unless `test_steps` (`pipeline.test_steps`) allows them.
pub fn org_manifest(
    kind: PipelineKind,
    dir: &Path,
    org: &str,
    builtin: &str,
    test_steps: bool,
) -> Result<Manifest, String> {
    let path = manifest_path(dir, org, kind);
    if !path.exists() {
        let origin = format!("built-in pipelines/{}", kind.file_name());
        return Manifest::parse(kind, builtin, &origin, Path::new(".")).map_err(|e| e.to_string());
    }
    let shown = path
        .strip_prefix(dir)
        .unwrap_or(Path::new(kind.file_name()))
        .display()
        .to_string();
    let manifest = Manifest::load(kind, &path).map_err(|mut e| {
        tracing::warn!(%org, error = %e, "a pipeline manifest is broken");
        e.file = shown.clone();
        e.to_string()
    })?;
    if !test_steps {
        for (i, step) in manifest.steps.iter().enumerate() {
            if let ComponentSource::Builtin(name) = &step.component
                && super::builtin::TEST_STEPS.contains(&name.as_str())
            {
                return Err(ManifestError {
                    file: shown,
                    key: format!("steps[{i}].component"),
                    problem: format!(
                        "`{name}` is a test step; this server runs it only with pipeline.test_steps = true"
                    ),
                }
                .to_string());
            }
        }
    }
    Ok(manifest)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(
            PipelineKind::Load,
            text,
            "test.toml",
            Path::new("/manifests"),
        )
    }

    #[test]
    fn the_shipped_manifests_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
        let manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
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
        let daily = Manifest::load(PipelineKind::Daily, &dir.join("daily.toml")).unwrap();
        assert!(
            daily
                .steps
                .iter()
                .any(|s| s.component == ComponentSource::Builtin("sql_transform".into())),
            "the default daily run refreshes insights with SQL"
        );
    }

    #[test]
    fn each_pipeline_takes_only_its_own_capabilities_and_builtins() {
        let daily_step_in_load =
            parse("version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\n")
                .unwrap_err();
        assert_eq!(daily_step_in_load.key, "steps[0].component");
        assert!(
            daily_step_in_load
                .problem
                .contains("not one of the built-in load steps"),
            "{daily_step_in_load}"
        );
        let lake_sql_in_load = parse(
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ngrants = [\"log\", \"lake-sql\"]\n",
        )
        .unwrap_err();
        assert_eq!(lake_sql_in_load.key, "steps[0].grants[1]");
        assert!(
            lake_sql_in_load
                .problem
                .contains("`lake-sql` is not a capability of load steps"),
            "{lake_sql_in_load}"
        );
        let daily =
            |text: &str| Manifest::parse(PipelineKind::Daily, text, "daily.toml", Path::new("/m"));
        let append_in_daily = daily(
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\ngrants = [\"lake-append\"]\n",
        )
        .unwrap_err();
        assert!(
            append_in_daily.problem.contains("daily-run steps"),
            "{append_in_daily}"
        );
        let load_step_in_daily =
            daily("version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n")
                .unwrap_err();
        assert!(
            load_step_in_daily.problem.contains("sql_transform"),
            "the message lists the daily built-ins: {load_step_in_daily}"
        );
        let good = daily(
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\ngrants = [\"lake-sql\", \"log\"]\n",
        )
        .unwrap();
        assert_eq!(good.kind, PipelineKind::Daily);
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
