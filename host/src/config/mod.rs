//! Configuration: the embedded default, a TOML file, and `LAKEHOST_*` overrides.
//!
//! Precedence, lowest first: the embedded default (DESIGN.md "Configuration keys"),
//! the file given with `--config`, then one environment variable per scalar key,
//! named `LAKEHOST_<SECTION>_<KEY>` (for example `LAKEHOST_SERVER_LISTEN`,
//! `LAKEHOST_STORAGE_DATA_DIR`, `LAKEHOST_IDP_ENABLED`).
//!
//! Loading is strict: an unknown key, a value of the wrong type or a value that
//! fails validation stops startup with an error naming the key. This module never
//! opens sockets or files other than the config file itself.
//!
//! This module owns the whole: the `Config` type, loading and the order in
//! which the sections are checked. Each section lives in its own file with its
//! defaults and its own checks (`server.rs`, `storage.rs`, `auth.rs`,
//! `orgs.rs`, `idp.rs`, `query.rs`, `uploads.rs`, `pipeline.rs`,
//! `dailyrun.rs`, `distributed.rs`, `retention.rs`); `names.rs` has the name shapes they share.

mod auth;
mod dailyrun;
mod distributed;
mod idp;
mod names;
mod orgs;
mod pipeline;
mod query;
mod retention;
mod server;
mod storage;
mod uploads;

use std::{collections::BTreeSet, path::Path};

use serde::{Deserialize, Serialize};

pub use self::{
    auth::{ASYMMETRIC_ALGORITHMS, AuthConfig, MAX_LEEWAY_S},
    dailyrun::DailyRunConfig,
    distributed::{DistributedConfig, MIN_SECRET_BYTES},
    idp::{IdpConfig, IdpPrincipal, ROLE_NAMES},
    orgs::OrgConfig,
    pipeline::{CAPABILITY_NAMES, ErrorMessagesShape, HAS_TEST_STEPS, PipelineConfig},
    query::{
        ArrowCompression, JobCaps, MAX_CSV_LINK_LIFETIME_S, MAX_REUSE_AGE_S, QueryConfig,
        SMALL_RESULT_BYTES,
    },
    retention::RetentionConfig,
    server::{LogFormat, ServerConfig},
    storage::StorageConfig,
    uploads::UploadsConfig,
};
use self::{
    idp::{demo_clients, demo_users},
    orgs::{default_orgs, validate_orgs},
};

/// Where a configuration error was found, and what is wrong, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("configuration error at `{key}`: {problem}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

/// The whole configuration, validated.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default = "default_orgs")]
    pub orgs: Vec<OrgConfig>,
    #[serde(default)]
    pub idp: IdpConfig,
    #[serde(default)]
    pub query: QueryConfig,
    #[serde(default)]
    pub uploads: UploadsConfig,
    #[serde(default)]
    pub pipeline: PipelineConfig,
    #[serde(default)]
    pub dailyrun: DailyRunConfig,
    #[serde(default)]
    pub distributed: DistributedConfig,
    #[serde(default)]
    pub retention: RetentionConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            auth: AuthConfig::default(),
            orgs: default_orgs(),
            idp: IdpConfig::default(),
            query: QueryConfig::default(),
            uploads: UploadsConfig::default(),
            pipeline: PipelineConfig::default(),
            dailyrun: DailyRunConfig::default(),
            distributed: DistributedConfig::default(),
            retention: RetentionConfig::default(),
        }
    }
}

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "LAKEHOST_CONFIG";
const ENV_PREFIX: &str = "LAKEHOST_";
/// The test suite's own variables (`LAKEHOST_TEST_LOG`, `..._DATABASE_URL`,
/// `..._PYTHON`, `..._FUZZ_SECONDS`, ...): no config key, so a server started
/// from the same shell skips them.
const TEST_ENV_PREFIX: &str = "LAKEHOST_TEST_";
const SECTIONS: &[&str] = &[
    "server",
    "storage",
    "auth",
    "idp",
    "query",
    "uploads",
    "pipeline",
    "dailyrun",
    "distributed",
    "retention",
];

impl Config {
    /// The `ErrorMessages` shape of `org`'s failed loads.
    pub fn error_messages_of(&self, org: &str) -> ErrorMessagesShape {
        self.orgs
            .iter()
            .find(|o| o.name == org)
            .and_then(|o| o.error_messages)
            .unwrap_or(self.pipeline.error_messages)
    }

    /// Loads the configuration: the embedded default, then `file` if given, then
    /// the `LAKEHOST_*` variables of `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(path.display().to_string(), format!("cannot read: {e}"))
                })?;
                text.parse::<toml::Table>().map_err(|e| {
                    ConfigError::new(path.display().to_string(), format!("not valid TOML: {e}"))
                })?
            }
            None => toml::Table::new(),
        };
        apply_env_overrides(&mut table, env)?;
        let config = Self::from_table(table)?;
        config.validate()?;
        Ok(config)
    }

    /// Parses a TOML document (used by tests and by `load`), then validates it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let table = text
            .parse::<toml::Table>()
            .map_err(|e| ConfigError::new("<toml>", format!("not valid TOML: {e}")))?;
        let config = Self::from_table(table)?;
        config.validate()?;
        Ok(config)
    }

    fn from_table(table: toml::Table) -> Result<Self, ConfigError> {
        // A document that names its own orgs does not get the demo org's
        // clients and users unless it names them too.
        let names_orgs = table.contains_key("orgs");
        let idp_keys: BTreeSet<String> = table
            .get("idp")
            .and_then(toml::Value::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        let mut config: Self = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let path = e.path().to_string();
                let key = if path == "." { "<root>".into() } else { path };
                ConfigError::new(key, e.into_inner().message().trim().to_string())
            })?;
        // The demo principals hold their roles on the configured API clients
        // (`auth.api_client = "dash_api"` for SDK deployments).
        if !idp_keys.contains("clients") {
            config.idp.clients = match names_orgs {
                true => Vec::new(),
                false => demo_clients(&config.auth),
            };
        }
        if !idp_keys.contains("users") {
            config.idp.users = match names_orgs {
                true => Vec::new(),
                false => demo_users(&config.auth),
            };
        }
        Ok(config)
    }

    /// Checks every value that the type alone does not, naming the key. The
    /// first wrong key is the error, so the order of the checks is part of
    /// the behaviour: keep it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.query.validate()?;
        self.validate_wire()?;
        self.uploads.validate()?;
        self.pipeline.validate()?;
        self.dailyrun.validate()?;
        self.server.validate_dailyrun_prefix()?;
        self.storage.validate()?;
        self.distributed.validate(&self.storage)?;
        self.retention
            .validate(self.query.time_limit_s.max(self.dailyrun.max_duration_s))?;
        self.auth.validate(&self.idp)?;
        validate_orgs(&self.orgs, &self.server.default_org)?;
        self.idp
            .validate(&self.orgs, &self.auth, self.server.listen)
    }

    /// What the wire protocols (Flight SQL, Postgres) need of the query
    /// section: the typed copies their rows are sent from, and an idle
    /// timeout that outlasts a query (a statement is silent until its query
    /// ends).
    fn validate_wire(&self) -> Result<(), ConfigError> {
        let wire = [
            ("server.flight_listen", self.server.flight_listen),
            ("server.pg_listen", self.server.pg_listen),
        ];
        for (key, listen) in wire {
            if listen.is_some() && !self.query.typed_results {
                return Err(ConfigError::new(
                    key,
                    "needs query.typed_results = true (rows are sent from a result's typed copy)",
                ));
            }
        }
        if wire.iter().any(|(_, listen)| listen.is_some())
            && self.server.wire_idle_timeout_s <= self.query.time_limit_s
        {
            return Err(ConfigError::new(
                "server.wire_idle_timeout_s",
                "must be more than query.time_limit_s (a statement waits silently for its query)",
            ));
        }
        Ok(())
    }

    /// Whether `org` is configured and has the zone `zone`.
    pub fn has_zone(&self, org: &str, zone: &str) -> bool {
        self.org(org)
            .is_some_and(|o| o.zones.iter().any(|z| z == zone))
    }

    pub fn org(&self, name: &str) -> Option<&OrgConfig> {
        self.orgs.iter().find(|o| o.name == name)
    }
}

/// Applies `LAKEHOST_<SECTION>_<KEY>=value` to the table. The value is read as a
/// TOML value when it is one (`5`, `true`, `"x"`), else as a plain string.
fn apply_env_overrides(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| {
            name.starts_with(ENV_PREFIX)
                && name != CONFIG_FILE_ENV
                && !name.starts_with(TEST_ENV_PREFIX)
        })
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let rest = name[ENV_PREFIX.len()..].to_ascii_lowercase();
        let Some((section, key)) = rest.split_once('_') else {
            return Err(ConfigError::new(
                name,
                "expected LAKEHOST_<SECTION>_<KEY>, e.g. LAKEHOST_SERVER_LISTEN",
            ));
        };
        if !SECTIONS.contains(&section) || key.is_empty() {
            return Err(ConfigError::new(
                format!("{name} ({section}.{key})"),
                format!("unknown key; sections are {}", SECTIONS.join(", ")),
            ));
        }
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .filter(|v| !v.is_table() && !v.is_array())
            .unwrap_or(toml::Value::String(raw));
        let section_table = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(section_table) = section_table.as_table_mut() else {
            return Err(ConfigError::new(section, "must be a table"));
        };
        section_table.insert(key.to_string(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
