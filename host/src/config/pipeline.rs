//! The `[pipeline]` section: where the load manifests are and how big a step's
//! component file may be, how many commits run and how they share the workers,
//! their leases and attempts, the shape of a failed load's `ErrorMessages`
//! and the budget of compiled steps kept on disk, with their defaults and
//! their checks.
//!
//! It holds settings only; manifests are read by `pipeline/`, commits run in
//! `load/`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Load commits: where the pipeline manifests are and how commits run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// The folder with `load.toml` and `orgs/<org>/load.toml`; without a
    /// `load.toml` there, the built-in default manifest is used. Manifests
    /// and the `.wasm` files they name are read only from inside it (with
    /// every symlink resolved; the folder itself may be one), and only when
    /// they are regular files.
    pub dir: PathBuf,
    /// The largest step component (`.wasm` file) a manifest may name, in
    /// bytes (default 64 MiB). A bigger file is refused by its size, never
    /// read: the commits that run it fail with InternalError naming the step,
    /// the file and this key, and the manifest watch logs it. The built-in
    /// steps are under 200 KiB each; a Python step (componentize-py)
    /// carries its interpreter, megabytes more.
    pub max_component_bytes: u64,
    /// Commits run at once by this replica; more wait PROCESSING.
    pub commit_workers: usize,
    /// Of those, at most this many for one org and for one caller; the next
    /// commit comes from the org committing the fewest (fair sharing).
    pub max_commits_per_org: usize,
    pub max_commits_per_caller: usize,
    /// How long a worker's claim on a commit lasts without renewal; a commit
    /// whose replica died ends FAIL after it, naming the step it was in
    /// (never run again, in case it was the cause).
    pub lease_s: u64,
    /// Runs of one commit (the first plus reruns after draining replicas
    /// handed it back) before it fails.
    pub max_attempts: u32,
    /// The shape of a failed load's `ErrorMessages` items; an org's
    /// `[[orgs]] error_messages` overrides it.
    pub error_messages: ErrorMessagesShape,
    /// Lets manifests name the built-in steps that misbehave on purpose
    /// (`loop_forever`, `grow_memory`, `ungranted_import`, `pause`,
    /// `daily_pause`): for tests and for trying limits, never in production.
    pub test_steps: bool,
    /// The capabilities an org's (or zone's) steps deployed over the API may
    /// be granted (docs/pipeline-deploy.md); every one by default. A
    /// version granting another is refused. The operator's own manifests in
    /// `dir` are not bound by it.
    pub org_grants: Vec<String>,
    /// The longest time limit and the largest memory limit a step of a
    /// version deployed over the API may ask for.
    pub max_step_time_limit_ms: u64,
    pub max_step_memory_bytes: u64,
    /// How often a replica looks for components stored through another one
    /// and compiles them in the background, in milliseconds.
    pub deploy_poll_ms: u64,
    /// The most the compiled steps kept in `<data_dir>/compiled-steps` may
    /// hold, in bytes (default 2 GiB); past it the least recently used are
    /// removed, each compiled again when next needed. 0 keeps none on disk:
    /// every start compiles every step.
    pub compiled_cache_bytes: u64,
}

/// The smallest budget of compiled steps other than 0: one compiled step
/// is megabytes, so less is a unit mistake.
const MIN_COMPILED_CACHE_BYTES: u64 = 1 << 20;

/// The capabilities steps can be granted, by their manifest names.
pub const CAPABILITY_NAMES: &[&str] = &[
    "staged-files",
    "staged-sql",
    "lake-schema",
    "lake-append",
    "lake-sql",
    "log",
];

/// How GET /load/{id} shows a FAIL's `ErrorMessages` (each item's full detail
/// is in `ErrorDetails` either way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorMessagesShape {
    /// The spec's shapes: CheckSumError's items are objects with ErrorType,
    /// ErrorMessage and CheckResult; every other ErrorType's are strings.
    #[default]
    Spec,
    /// Every item a string, CheckSumError's included (the Comotion SDK reads
    /// `ErrorMessages` as a list of strings).
    Strings,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./pipelines"),
            max_component_bytes: 64 * 1024 * 1024,
            commit_workers: 2,
            max_commits_per_org: 1,
            max_commits_per_caller: 1,
            lease_s: 30,
            max_attempts: 5,
            error_messages: ErrorMessagesShape::Spec,
            test_steps: false,
            org_grants: CAPABILITY_NAMES.iter().map(|&c| c.into()).collect(),
            max_step_time_limit_ms: 3_600_000,
            max_step_memory_bytes: 1024 * 1024 * 1024,
            deploy_poll_ms: 1_000,
            compiled_cache_bytes: 2 << 30,
        }
    }
}

/// Whether this build holds the test steps (`pipeline.test_steps` needs
/// them): the test suite's builds, with the `test-steps` feature.
pub const HAS_TEST_STEPS: bool = cfg!(any(test, feature = "test-steps"));

impl PipelineConfig {
    /// The fair-sharing caps of the commit workers.
    pub fn caps(&self) -> super::JobCaps {
        super::JobCaps {
            per_org: i64::try_from(self.max_commits_per_org).unwrap_or(i64::MAX),
            per_caller: i64::try_from(self.max_commits_per_caller).unwrap_or(i64::MAX),
        }
    }

    /// Checks the section.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("pipeline.commit_workers", self.commit_workers as u64),
            (
                "pipeline.max_commits_per_org",
                self.max_commits_per_org as u64,
            ),
            (
                "pipeline.max_commits_per_caller",
                self.max_commits_per_caller as u64,
            ),
            ("pipeline.max_attempts", u64::from(self.max_attempts)),
            ("pipeline.max_component_bytes", self.max_component_bytes),
            (
                "pipeline.max_step_time_limit_ms",
                self.max_step_time_limit_ms,
            ),
            ("pipeline.max_step_memory_bytes", self.max_step_memory_bytes),
            ("pipeline.deploy_poll_ms", self.deploy_poll_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.test_steps && !HAS_TEST_STEPS {
            return Err(ConfigError::new(
                "pipeline.test_steps",
                "this build holds no test steps (they are built with the `test-steps` feature)",
            ));
        }
        if let Some(unknown) = self
            .org_grants
            .iter()
            .find(|grant| !CAPABILITY_NAMES.contains(&grant.as_str()))
        {
            return Err(ConfigError::new(
                "pipeline.org_grants",
                format!(
                    "`{unknown}` is no capability; they are {}",
                    CAPABILITY_NAMES.join(", ")
                ),
            ));
        }
        if (1..MIN_COMPILED_CACHE_BYTES).contains(&self.compiled_cache_bytes) {
            return Err(ConfigError::new(
                "pipeline.compiled_cache_bytes",
                format!(
                    "must be 0 (no compiled steps kept) or at least {MIN_COMPILED_CACHE_BYTES} (1 MiB)"
                ),
            ));
        }
        if self.lease_s < 3 {
            return Err(ConfigError::new(
                "pipeline.lease_s",
                "must be at least 3 (leases are renewed every third of it)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_refused_at;

    #[test]
    fn bad_values_name_the_key() {
        assert_refused_at(&[
            (
                "[pipeline]\nmax_commits_per_caller = 0",
                "pipeline.max_commits_per_caller",
            ),
            (
                "[pipeline]\nmax_component_bytes = 0",
                "pipeline.max_component_bytes",
            ),
            (
                "[pipeline]\ncompiled_cache_bytes = 4096",
                "pipeline.compiled_cache_bytes",
            ),
        ]);
    }

    #[test]
    fn the_compiled_steps_budget_defaults_to_2_gib_and_0_keeps_none() {
        let config = crate::config::Config::from_toml("").unwrap();
        assert_eq!(config.pipeline.compiled_cache_bytes, 2 << 30);
        for bytes in [0, 1 << 20] {
            let toml = format!("[pipeline]\ncompiled_cache_bytes = {bytes}");
            let config = crate::config::Config::from_toml(&toml).unwrap();
            assert_eq!(config.pipeline.compiled_cache_bytes, bytes);
        }
    }

    #[test]
    fn the_component_cap_defaults_to_64_mib_and_is_read_from_the_file() {
        let config = crate::config::Config::from_toml("").unwrap();
        assert_eq!(config.pipeline.max_component_bytes, 64 * 1024 * 1024);
        let config =
            crate::config::Config::from_toml("[pipeline]\nmax_component_bytes = 1048576").unwrap();
        assert_eq!(config.pipeline.max_component_bytes, 1_048_576);
    }
}
