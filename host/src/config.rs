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

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use url::Url;

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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub region_domain: String,
    pub default_org: String,
    /// Gateway timeout: a request still running after this many seconds gets 504.
    pub request_timeout_s: u64,
    /// Request bodies above this size get 413.
    pub max_body_bytes: u64,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Extra path prefix under which the DailyRun API is also served.
    pub dailyrun_prefix: String,
    /// Open connections per listener (API, upload endpoint); past it new
    /// connections are closed at once. Lowered to fit the open-file limit.
    pub max_connections: usize,
    /// A client must finish the TLS handshake, and each request's headers,
    /// within this many seconds.
    pub header_read_timeout_s: u64,
    /// A connection on which nothing moved for this many seconds is closed;
    /// more than `request_timeout_s`, since a request may work that long silently.
    pub idle_timeout_s: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("literal address"),
            region_domain: "localhost".into(),
            default_org: "demo".into(),
            request_timeout_s: 30,
            max_body_bytes: 10 * 1024 * 1024,
            tls_cert: None,
            tls_key: None,
            dailyrun_prefix: "/superset".into(),
            max_connections: 4096,
            header_read_timeout_s: 10,
            idle_timeout_s: 60,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    pub lake_url: Option<String>,
    pub s3_listen: SocketAddr,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./lakehost-data"),
            database_url: None,
            lake_url: None,
            s3_listen: "127.0.0.1:9000".parse().expect("literal address"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Base address of the identity provider; issuer = `{auth_url}/realms/<org>`.
    /// When unset, the server's own address (the embedded provider) is used.
    pub auth_url: Option<Url>,
    /// Audience of the Org and DailyRun APIs; zones use `{api_client}_<zone>`.
    pub api_client: String,
    /// The public command-line clients of the PKCE flow: the spec's `svc_cli`
    /// and the Comotion SDK's `comotion_cli` by default.
    pub cli_clients: Vec<String>,
    /// Signature algorithms accepted on access tokens; asymmetric ones only.
    pub allowed_algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, at most 30 seconds.
    pub leeway_s: u64,
    /// An access token whose `exp` is further ahead than this is refused:
    /// a stolen token must not stay good for years.
    pub max_token_lifetime_s: u64,
    /// An unknown `kid` triggers at most one JWKS refetch per realm in this window.
    pub jwks_refetch_cooldown_s: u64,
    /// A realm's keys are refetched when older than this, whatever the kids.
    pub jwks_max_age_s: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            auth_url: None,
            api_client: "svc_api".into(),
            cli_clients: vec!["svc_cli".into(), "comotion_cli".into()],
            allowed_algorithms: vec!["RS256".into()],
            leeway_s: 30,
            max_token_lifetime_s: 86_400,
            jwks_refetch_cooldown_s: 30,
            jwks_max_age_s: 900,
        }
    }
}

/// The query engine's limits: how many queries run at once on this replica,
/// and what one query may use.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Queries run at once by this replica; more wait QUEUED (admission control).
    pub workers: usize,
    /// Of those, at most this many for one org and for one caller; the next
    /// queued query comes from the org running the fewest (fair sharing).
    pub max_running_per_org: usize,
    pub max_running_per_caller: usize,
    /// Memory one query may hold; sorts, joins and aggregations spill beyond it.
    pub memory_limit_bytes: u64,
    /// A query still running after this long fails.
    pub time_limit_s: u64,
    /// How long a worker's claim on a query lasts without renewal; a crashed
    /// replica's queries are taken over after it.
    pub lease_s: u64,
    /// Runs of one query (the first plus takeovers after its replica died)
    /// before it fails. 2: a query whose run ended with its process is tried
    /// once more, since the death may have had another cause, and never into
    /// a second death.
    pub max_attempts: u32,
    /// Lifetime of the signed CSV links, at most 900 seconds (spec "Limits").
    pub csv_link_lifetime_s: u64,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            workers: 4,
            max_running_per_org: 3,
            max_running_per_caller: 2,
            memory_limit_bytes: 1 << 30,
            time_limit_s: 1800,
            lease_s: 30,
            max_attempts: 2,
            csv_link_lifetime_s: 900,
        }
    }
}

/// The upload side of loads: the bucket the embedded S3-compatible endpoint
/// (`storage.s3_listen`) serves, how callers reach it, and how long staged
/// files of loads that never commit are kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UploadsConfig {
    /// The bucket name in upload descriptors.
    pub bucket: String,
    /// The address callers use for the upload endpoint, when it is not
    /// `http://<s3_listen>` (behind a proxy or TLS terminator).
    pub public_url: Option<Url>,
    /// The largest file one upload may carry (S3's own single-PUT limit: 5 GiB).
    pub max_file_bytes: u64,
    /// Staged files of a load that stays OPEN this long without a new
    /// descriptor or upload are removed.
    pub staging_ttl_s: u64,
}

impl Default for UploadsConfig {
    fn default() -> Self {
        Self {
            bucket: "lakehost-uploads".into(),
            public_url: None,
            max_file_bytes: 5 * 1024 * 1024 * 1024,
            staging_ttl_s: 24 * 3600,
        }
    }
}

/// Load commits: where the pipeline manifests are and how commits run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// The folder with `load.toml` and `orgs/<org>/load.toml`; without a
    /// `load.toml` there, the built-in default manifest is used.
    pub dir: PathBuf,
    /// Commits run at once by this replica; more wait PROCESSING.
    pub commit_workers: usize,
    /// Of those, at most this many for one org and for one caller; the next
    /// commit comes from the org committing the fewest (fair sharing).
    pub max_commits_per_org: usize,
    pub max_commits_per_caller: usize,
    /// How long a worker's claim on a commit lasts without renewal; a crashed
    /// replica's commits are taken over after it.
    pub lease_s: u64,
    /// Runs of one commit (the first plus takeovers after its replica died)
    /// before it fails; 2, as for queries.
    pub max_attempts: u32,
    /// The shape of a failed load's `ErrorMessages` items; an org's
    /// `[[orgs]] error_messages` overrides it.
    pub error_messages: ErrorMessagesShape,
    /// Lets manifests name the built-in steps that misbehave on purpose
    /// (`loop_forever`, `grow_memory`, `ungranted_import`, `pause`,
    /// `daily_pause`): for tests and for trying limits, never in production.
    pub test_steps: bool,
}

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
            commit_workers: 2,
            max_commits_per_org: 1,
            max_commits_per_caller: 1,
            lease_s: 30,
            max_attempts: 2,
            error_messages: ErrorMessagesShape::Spec,
            test_steps: false,
        }
    }
}

/// The daily run: how long a run may take and how the scheduler works. Its
/// steps come from `daily.toml` in `pipeline.dir`; each org's schedule is its
/// `daily_run_schedule`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DailyRunConfig {
    /// A run still going after this long ends TIMED_OUT.
    pub max_duration_s: u64,
    /// How often the scheduler looks for due runs, overdue runs and runs
    /// whose server stopped.
    pub tick_ms: u64,
    /// How long a server's hold on a run lasts without renewal; a run whose
    /// server stopped ends ABORTED after it.
    pub lease_s: u64,
    /// A scheduled time missed (the server was down) still starts a run when
    /// the server is back within this long.
    pub catch_up_s: u64,
}

impl Default for DailyRunConfig {
    fn default() -> Self {
        Self {
            max_duration_s: 4 * 3600,
            tick_ms: 5000,
            lease_s: 30,
            catch_up_s: 3600,
        }
    }
}

/// Longest lifetime of a signed CSV link (spec "Limits": at most 15 minutes).
pub const MAX_CSV_LINK_LIFETIME_S: u64 = 900;

/// Longest clock skew the validator may tolerate (issue: "at most 30 s leeway").
pub const MAX_LEEWAY_S: u64 = 30;

/// Algorithms a resource server may accept: asymmetric signatures only, never
/// `none` or HMAC (RFC 8725 section 3.1).
pub const ASYMMETRIC_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgConfig {
    pub name: String,
    #[serde(default)]
    pub zones: Vec<String>,
    #[serde(default = "default_daily_run_schedule")]
    pub daily_run_schedule: String,
    /// This org's `pipeline.error_messages`, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_messages: Option<ErrorMessagesShape>,
}

fn default_daily_run_schedule() -> String {
    "0 2 * * *".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdpConfig {
    pub enabled: bool,
    pub access_token_lifetime_s: u64,
    pub refresh_token_lifetime_s: u64,
    /// A realm's signing key is replaced by a new one after this many hours; the
    /// old key stays in the JWKS until tokens it signed have expired.
    pub key_rotation_hours: u64,
    pub clients: Vec<IdpPrincipal>,
    pub users: Vec<IdpPrincipal>,
    /// Serve client secrets shorter than 32 bytes and passwords shorter than
    /// 12 (the demo principals' well-known ones among them) on a listener
    /// beyond loopback. Off: such a server refuses to start.
    pub allow_weak_secrets: bool,
}

impl Default for IdpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            access_token_lifetime_s: 300,
            refresh_token_lifetime_s: 30 * 24 * 3600,
            key_rotation_hours: 30 * 24,
            clients: demo_clients(&AuthConfig::default()),
            users: demo_users(&AuthConfig::default()),
            allow_weak_secrets: false,
        }
    }
}

/// An application client (`client_id` + `client_secret`) or a user (`username` +
/// `password`) of the embedded identity provider, with the claims its tokens carry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdpPrincipal {
    pub org: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    pub service_clients: Vec<u32>,
    /// Roles per API client, e.g. `{ svc_api = ["ZoneAdmin"], svc_api_lab = [...] }`.
    pub roles: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl IdpPrincipal {
    /// The login name: `client_id` for clients, `username` for users.
    pub fn login(&self) -> &str {
        self.client_id
            .as_deref()
            .or(self.username.as_deref())
            .unwrap_or_default()
    }
}

fn default_orgs() -> Vec<OrgConfig> {
    vec![OrgConfig {
        name: "demo".into(),
        zones: vec!["lab".into()],
        daily_run_schedule: default_daily_run_schedule(),
        error_messages: None,
    }]
}

/// The demo principals' roles: on the Org API's client and the `lab` zone's,
/// whatever `auth.api_client` names them.
fn demo_roles(auth: &AuthConfig, role: &str) -> BTreeMap<String, Vec<String>> {
    BTreeMap::from([
        (auth.api_client.clone(), vec![role.to_string()]),
        (auth.zone_client("lab"), vec![role.to_string()]),
    ])
}

/// Every scope of the demo org and its `lab` zone.
fn all_demo_scopes() -> Vec<String> {
    [
        "query:read",
        "query:write",
        "load:read",
        "load:write",
        "lab:query:read",
        "lab:query:write",
        "lab:load:read",
        "lab:load:write",
        "dailyrun:enabled:read",
        "dailyrun:enabled:write",
        "dailyrun:execution:read",
        "dailyrun:execution:write",
    ]
    .map(String::from)
    .to_vec()
}

/// The embedded default's application clients: one per role, fixed development
/// secrets (`<client_id>-secret`). Never use these outside a laptop.
fn demo_clients(auth: &AuthConfig) -> Vec<IdpPrincipal> {
    let client = |id: &str, role: &str, service_clients: Vec<u32>| IdpPrincipal {
        org: "demo".into(),
        client_id: Some(id.into()),
        client_secret: Some(format!("{id}-secret")),
        username: None,
        password: None,
        service_clients,
        roles: demo_roles(auth, role),
        scopes: all_demo_scopes(),
    };
    vec![
        client("demo-admin", "ZoneAdmin", vec![0]),
        client("demo-all-analyst", "AllServiceClientAnalyst", vec![0]),
        client("demo-own-analyst", "OwnServiceClientAnalyst", vec![1, 2]),
        client("demo-own-consumer", "OwnServiceClientConsumer", vec![1]),
        client("demo-public", "PublicConsumer", vec![3]),
    ]
}

/// The embedded default's one user for the PKCE login flow.
fn demo_users(auth: &AuthConfig) -> Vec<IdpPrincipal> {
    vec![IdpPrincipal {
        org: "demo".into(),
        client_id: None,
        client_secret: None,
        username: Some("demo".into()),
        password: Some("demo".into()),
        service_clients: vec![1, 2],
        roles: demo_roles(auth, "OwnServiceClientAnalyst"),
        scopes: all_demo_scopes(),
    }]
}

/// Off loopback, the shortest client secret and password the embedded
/// provider serves (unless `idp.allow_weak_secrets`).
const MIN_EXPOSED_CLIENT_SECRET: usize = 32;
const MIN_EXPOSED_PASSWORD: usize = 12;

/// The five roles of the spec, as they appear in `resource_access.<client>.roles`.
pub const ROLE_NAMES: &[&str] = &[
    "PublicConsumer",
    "OwnServiceClientConsumer",
    "OwnServiceClientAnalyst",
    "AllServiceClientAnalyst",
    "ZoneAdmin",
];

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
        }
    }
}

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "LAKEHOST_CONFIG";
const ENV_PREFIX: &str = "LAKEHOST_";
const SECTIONS: &[&str] = &[
    "server", "storage", "auth", "idp", "query", "uploads", "pipeline", "dailyrun",
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

    fn validate_uploads(&self) -> Result<(), ConfigError> {
        let u = &self.uploads;
        let valid_bucket = (3..=63).contains(&u.bucket.len())
            && u.bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !u.bucket.starts_with(['-', '.'])
            && !u.bucket.ends_with(['-', '.']);
        if !valid_bucket {
            return Err(ConfigError::new(
                "uploads.bucket",
                "must be an S3 bucket name: 3 to 63 lowercase letters, digits, `-` or `.`",
            ));
        }
        if let Some(url) = &u.public_url
            && (!matches!(url.scheme(), "http" | "https") || url.host().is_none())
        {
            return Err(ConfigError::new(
                "uploads.public_url",
                "must be an http(s) URL with a host",
            ));
        }
        for (key, value) in [
            ("uploads.max_file_bytes", u.max_file_bytes),
            ("uploads.staging_ttl_s", u.staging_ttl_s),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }

    fn validate_query(&self) -> Result<(), ConfigError> {
        let q = &self.query;
        let at_least_one = [
            ("query.workers", q.workers as u64),
            ("query.max_running_per_org", q.max_running_per_org as u64),
            (
                "query.max_running_per_caller",
                q.max_running_per_caller as u64,
            ),
            ("query.memory_limit_bytes", q.memory_limit_bytes),
            ("query.time_limit_s", q.time_limit_s),
            ("query.lease_s", q.lease_s),
            ("query.max_attempts", u64::from(q.max_attempts)),
            ("query.csv_link_lifetime_s", q.csv_link_lifetime_s),
        ];
        for (key, value) in at_least_one {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if q.lease_s < 3 {
            return Err(ConfigError::new(
                "query.lease_s",
                "must be at least 3 (leases are renewed every third of it)",
            ));
        }
        if q.csv_link_lifetime_s > MAX_CSV_LINK_LIFETIME_S {
            return Err(ConfigError::new(
                "query.csv_link_lifetime_s",
                format!("must be at most {MAX_CSV_LINK_LIFETIME_S} (15 minutes)"),
            ));
        }
        Ok(())
    }

    /// Checks every value that the type alone does not, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        check_hostname("server.region_domain", &s.region_domain)?;
        for (key, value) in [
            ("server.request_timeout_s", s.request_timeout_s),
            ("server.max_body_bytes", s.max_body_bytes),
            ("server.max_connections", s.max_connections as u64),
            ("server.header_read_timeout_s", s.header_read_timeout_s),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if s.idle_timeout_s <= s.request_timeout_s {
            return Err(ConfigError::new(
                "server.idle_timeout_s",
                "must be more than server.request_timeout_s (a request may work that long without sending a byte)",
            ));
        }
        match (&s.tls_cert, &s.tls_key) {
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "server.tls_key",
                    "must be set when server.tls_cert is",
                ));
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "server.tls_cert",
                    "must be set when server.tls_key is",
                ));
            }
            _ => {}
        }
        self.validate_query()?;
        self.validate_uploads()?;
        let p = &self.pipeline;
        for (key, value) in [
            ("pipeline.commit_workers", p.commit_workers as u64),
            ("pipeline.max_commits_per_org", p.max_commits_per_org as u64),
            (
                "pipeline.max_commits_per_caller",
                p.max_commits_per_caller as u64,
            ),
            ("pipeline.max_attempts", u64::from(p.max_attempts)),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if p.lease_s < 3 {
            return Err(ConfigError::new(
                "pipeline.lease_s",
                "must be at least 3 (leases are renewed every third of it)",
            ));
        }
        let d = &self.dailyrun;
        for (key, value) in [
            ("dailyrun.max_duration_s", d.max_duration_s),
            ("dailyrun.tick_ms", d.tick_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if d.lease_s < 3 {
            return Err(ConfigError::new(
                "dailyrun.lease_s",
                "must be at least 3 (holds are renewed every third of it)",
            ));
        }
        if !s.dailyrun_prefix.starts_with('/')
            || s.dailyrun_prefix.ends_with('/')
            || s.dailyrun_prefix.contains("//")
        {
            return Err(ConfigError::new(
                "server.dailyrun_prefix",
                "must start with `/` and not end with `/`, e.g. \"/superset\"",
            ));
        }

        if let Some(url) = &self.storage.database_url {
            let ok = ["postgres://", "postgresql://", "sqlite:"]
                .iter()
                .any(|p| url.starts_with(p));
            if !ok {
                return Err(ConfigError::new(
                    "storage.database_url",
                    "must start with postgres://, postgresql:// or sqlite:",
                ));
            }
        }
        if let Some(url) = &self.storage.lake_url {
            let ok = ["s3://", "file://"].iter().any(|p| url.starts_with(p));
            if !ok {
                return Err(ConfigError::new(
                    "storage.lake_url",
                    "must start with s3:// or file://",
                ));
            }
        }

        let a = &self.auth;
        if let Some(url) = &a.auth_url
            && (!matches!(url.scheme(), "http" | "https") || url.host().is_none())
        {
            return Err(ConfigError::new(
                "auth.auth_url",
                "must be an http(s) URL with a host",
            ));
        }
        check_client_name("auth.api_client", &a.api_client)?;
        if a.cli_clients.is_empty() {
            return Err(ConfigError::new(
                "auth.cli_clients",
                "must name at least one client (the PKCE login needs one)",
            ));
        }
        for (i, client) in a.cli_clients.iter().enumerate() {
            check_client_name(&format!("auth.cli_clients[{i}]"), client)?;
        }
        if a.allowed_algorithms.is_empty() {
            return Err(ConfigError::new(
                "auth.allowed_algorithms",
                "must name at least one algorithm",
            ));
        }
        for (i, alg) in a.allowed_algorithms.iter().enumerate() {
            if !ASYMMETRIC_ALGORITHMS.contains(&alg.as_str()) {
                return Err(ConfigError::new(
                    format!("auth.allowed_algorithms[{i}]"),
                    format!(
                        "`{alg}` is not allowed; choose from {}",
                        ASYMMETRIC_ALGORITHMS.join(", ")
                    ),
                ));
            }
        }
        if a.leeway_s > MAX_LEEWAY_S {
            return Err(ConfigError::new(
                "auth.leeway_s",
                format!("must be at most {MAX_LEEWAY_S}"),
            ));
        }
        if a.max_token_lifetime_s < self.idp.access_token_lifetime_s {
            return Err(ConfigError::new(
                "auth.max_token_lifetime_s",
                "must be at least idp.access_token_lifetime_s (the embedded provider's tokens)",
            ));
        }

        if self.orgs.is_empty() {
            return Err(ConfigError::new("orgs", "at least one org is required"));
        }
        let mut org_names = BTreeSet::new();
        for (i, org) in self.orgs.iter().enumerate() {
            check_label(&format!("orgs[{i}].name"), &org.name)?;
            if !org_names.insert(org.name.as_str()) {
                return Err(ConfigError::new(
                    format!("orgs[{i}].name"),
                    format!("org `{}` is configured twice", org.name),
                ));
            }
            let mut zones = BTreeSet::new();
            for (j, zone) in org.zones.iter().enumerate() {
                check_label(&format!("orgs[{i}].zones[{j}]"), zone)?;
                if !zones.insert(zone.as_str()) {
                    return Err(ConfigError::new(
                        format!("orgs[{i}].zones[{j}]"),
                        format!("zone `{zone}` is listed twice"),
                    ));
                }
            }
            org.daily_run_schedule
                .parse::<croner::Cron>()
                .map_err(|e| {
                    ConfigError::new(
                        format!("orgs[{i}].daily_run_schedule"),
                        format!("not a valid cron expression: {e}"),
                    )
                })?;
        }
        if !org_names.contains(s.default_org.as_str()) {
            return Err(ConfigError::new(
                "server.default_org",
                format!("`{}` is not one of the configured orgs", s.default_org),
            ));
        }

        let idp = &self.idp;
        for (key, value) in [
            ("idp.access_token_lifetime_s", idp.access_token_lifetime_s),
            ("idp.refresh_token_lifetime_s", idp.refresh_token_lifetime_s),
            ("idp.key_rotation_hours", idp.key_rotation_hours),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        self.validate_principals("idp.clients", &idp.clients, true)?;
        self.validate_principals("idp.users", &idp.users, false)?;
        self.validate_exposed_secrets()
    }

    /// Beyond loopback, the embedded provider's secrets must not be
    /// guessable: the demo principals' well-known ones are for a laptop.
    fn validate_exposed_secrets(&self) -> Result<(), ConfigError> {
        let idp = &self.idp;
        if !idp.enabled || idp.allow_weak_secrets || self.server.listen.ip().is_loopback() {
            return Ok(());
        }
        let sections = [
            (
                "idp.clients",
                &idp.clients,
                "client_secret",
                MIN_EXPOSED_CLIENT_SECRET,
            ),
            ("idp.users", &idp.users, "password", MIN_EXPOSED_PASSWORD),
        ];
        for (section, principals, key, min) in sections {
            for (i, p) in principals.iter().enumerate() {
                let secret = p.client_secret.as_deref().or(p.password.as_deref());
                if secret.unwrap_or_default().len() < min {
                    return Err(ConfigError::new(
                        format!("{section}[{i}].{key}"),
                        format!(
                            "must be at least {min} bytes when server.listen ({}) is not a loopback \
                             address (the demo principals' secrets are well known); \
                             set idp.allow_weak_secrets = true to serve it anyway",
                            self.server.listen
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_principals(
        &self,
        section: &str,
        principals: &[IdpPrincipal],
        are_clients: bool,
    ) -> Result<(), ConfigError> {
        let mut logins = BTreeSet::new();
        for (i, p) in principals.iter().enumerate() {
            let at = |key: &str| format!("{section}[{i}].{key}");
            let Some(org) = self.org(&p.org) else {
                return Err(ConfigError::new(
                    at("org"),
                    format!("`{}` is not one of the configured orgs", p.org),
                ));
            };
            let (id_key, secret_key, id, secret, wrong) = if are_clients {
                (
                    "client_id",
                    "client_secret",
                    &p.client_id,
                    &p.client_secret,
                    [
                        ("username", p.username.is_some()),
                        ("password", p.password.is_some()),
                    ],
                )
            } else {
                (
                    "username",
                    "password",
                    &p.username,
                    &p.password,
                    [
                        ("client_id", p.client_id.is_some()),
                        ("client_secret", p.client_secret.is_some()),
                    ],
                )
            };
            if let Some((key, _)) = wrong.iter().find(|(_, present)| *present) {
                return Err(ConfigError::new(
                    at(key),
                    format!("not a key of {section} (use {id_key} and {secret_key})"),
                ));
            }
            let id = id
                .as_deref()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| ConfigError::new(at(id_key), "is required"))?;
            if secret.as_deref().is_none_or(str::is_empty) {
                return Err(ConfigError::new(at(secret_key), "is required"));
            }
            if !logins.insert((p.org.as_str(), id)) {
                return Err(ConfigError::new(
                    at(id_key),
                    format!("`{id}` is configured twice in org `{}`", p.org),
                ));
            }
            for (client, roles) in &p.roles {
                let known_client = *client == self.auth.api_client
                    || org
                        .zones
                        .iter()
                        .any(|z| *client == self.auth.zone_client(z));
                if !known_client {
                    return Err(ConfigError::new(
                        format!("{section}[{i}].roles.{client}"),
                        format!(
                            "`{client}` is neither `{}` nor a zone client of org `{}`",
                            self.auth.api_client, org.name
                        ),
                    ));
                }
                for (j, role) in roles.iter().enumerate() {
                    if !ROLE_NAMES.contains(&role.as_str()) {
                        return Err(ConfigError::new(
                            format!("{section}[{i}].roles.{client}[{j}]"),
                            format!("unknown role `{role}`; roles are {}", ROLE_NAMES.join(", ")),
                        ));
                    }
                }
            }
            for (j, scope) in p.scopes.iter().enumerate() {
                if scope.is_empty() || scope.chars().any(|c| c.is_whitespace()) {
                    return Err(ConfigError::new(
                        at(&format!("scopes[{j}]")),
                        "a scope is one word without spaces",
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn org(&self, name: &str) -> Option<&OrgConfig> {
        self.orgs.iter().find(|o| o.name == name)
    }
}

impl QueryConfig {
    /// The fair-sharing caps of the query workers.
    pub fn caps(&self) -> crate::store::JobCaps {
        crate::store::JobCaps {
            per_org: i64::try_from(self.max_running_per_org).unwrap_or(i64::MAX),
            per_caller: i64::try_from(self.max_running_per_caller).unwrap_or(i64::MAX),
        }
    }
}

impl PipelineConfig {
    /// The fair-sharing caps of the commit workers.
    pub fn caps(&self) -> crate::store::JobCaps {
        crate::store::JobCaps {
            per_org: i64::try_from(self.max_commits_per_org).unwrap_or(i64::MAX),
            per_caller: i64::try_from(self.max_commits_per_caller).unwrap_or(i64::MAX),
        }
    }
}

impl AuthConfig {
    /// The audience and role-holder client of a zone's API: `{api_client}_<zone>`.
    pub fn zone_client(&self, zone: &str) -> String {
        format!("{}_{zone}", self.api_client)
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
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && name != CONFIG_FILE_ENV)
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

fn check_label(key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!("`{value}` is not a DNS label (lowercase letters, digits, inner hyphens)"),
        ))
    }
}

fn check_hostname(key: &str, value: &str) -> Result<(), ConfigError> {
    if value.is_empty() {
        return Err(ConfigError::new(key, "must not be empty"));
    }
    for label in value.split('.') {
        check_label(key, label).map_err(|_| {
            ConfigError::new(key, format!("`{value}` is not a lowercase host name"))
        })?;
    }
    Ok(())
}

fn check_client_name(key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(key, "must be letters, digits, `_` or `-`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn embedded_default_is_valid_and_matches_design() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.server.default_org, "demo");
        assert_eq!(config.orgs[0].zones, vec!["lab"]);
        assert_eq!(config.storage.s3_listen.to_string(), "127.0.0.1:9000");
        let roles: BTreeSet<_> = config
            .idp
            .clients
            .iter()
            .flat_map(|c| c.roles["svc_api"].clone())
            .collect();
        assert_eq!(roles.len(), 5, "a demo client for every role");
    }

    #[test]
    fn demo_principals_hold_their_roles_on_the_configured_api_client() {
        let config = Config::load(None, env(&[("LAKEHOST_AUTH_API_CLIENT", "dash_api")])).unwrap();
        for principal in config.idp.clients.iter().chain(&config.idp.users) {
            let clients: Vec<&String> = principal.roles.keys().collect();
            assert_eq!(clients, ["dash_api", "dash_api_lab"], "{principal:?}");
        }
        assert_eq!(config.auth.cli_clients, ["svc_cli", "comotion_cli"]);
        let refused = Config::from_toml("[auth]\ncli_clients = []").unwrap_err();
        assert_eq!(refused.key, "auth.cli_clients");
    }

    #[test]
    fn weak_secrets_serve_only_loopback_unless_allowed() {
        let on = |listen: &str, extra: &[(&str, &str)]| {
            let mut vars = vec![("LAKEHOST_SERVER_LISTEN", listen)];
            vars.extend_from_slice(extra);
            Config::load(None, env(&vars))
        };
        assert!(on("127.0.0.1:8080", &[]).is_ok());
        assert!(on("[::1]:8080", &[]).is_ok());
        let refused = on("0.0.0.0:8080", &[]).unwrap_err();
        assert_eq!(refused.key, "idp.clients[0].client_secret");
        assert!(refused.problem.contains("at least 32 bytes"), "{refused:?}");
        assert!(
            on(
                "0.0.0.0:8080",
                &[("LAKEHOST_IDP_ALLOW_WEAK_SECRETS", "true")]
            )
            .is_ok()
        );
        assert!(on("0.0.0.0:8080", &[("LAKEHOST_IDP_ENABLED", "false")]).is_ok());
        let strong = "[server]\nlisten = \"10.0.0.1:8080\"\ndefault_org = \"acme\"\n[[orgs]]\nname = \"acme\"\n\
                      [[idp.clients]]\norg = \"acme\"\nclient_id = \"etl\"\n\
                      client_secret = \"0123456789abcdef0123456789abcdef\"\nservice_clients = [0]\n\
                      roles = { svc_api = [\"ZoneAdmin\"] }\n";
        assert!(Config::from_toml(strong).is_ok());
        let weak_user = format!(
            "{strong}[[idp.users]]\norg = \"acme\"\nusername = \"ann\"\npassword = \"short\"\n\
             service_clients = [0]\nroles = {{ svc_api = [\"ZoneAdmin\"] }}\n"
        );
        assert_eq!(
            Config::from_toml(&weak_user).unwrap_err().key,
            "idp.users[0].password"
        );
    }

    #[test]
    fn env_overrides_single_keys_with_typed_values() {
        let config = Config::load(
            None,
            env(&[
                ("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0"),
                ("LAKEHOST_SERVER_REQUEST_TIMEOUT_S", "5"),
                ("LAKEHOST_IDP_ENABLED", "false"),
                ("LAKEHOST_STORAGE_DATA_DIR", "/tmp/x"),
                ("OTHER", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(config.server.listen.port(), 0);
        assert_eq!(config.server.request_timeout_s, 5);
        assert!(!config.idp.enabled);
        assert_eq!(config.storage.data_dir, PathBuf::from("/tmp/x"));
    }

    #[test]
    fn unknown_env_key_names_the_key() {
        let err = Config::load(None, env(&[("LAKEHOST_SERVER_LISTN", "x")])).unwrap_err();
        assert_eq!(err.key, "server.listn");
        assert!(err.problem.contains("unknown field `listn`"), "{err}");
        let err = Config::load(None, env(&[("LAKEHOST_NOPE_X", "1")])).unwrap_err();
        assert!(err.key.contains("LAKEHOST_NOPE_X"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            ("[server]\nlisten = \"nowhere\"", "server.listen"),
            (
                "[server]\nrequest_timeout_s = \"slow\"",
                "server.request_timeout_s",
            ),
            (
                "[server]\nrequest_timeout_s = 0",
                "server.request_timeout_s",
            ),
            ("[server]\ndefault_org = \"acme\"", "server.default_org"),
            ("[server]\ntls_cert = \"c.pem\"", "server.tls_key"),
            ("[server]\nfoo = 1", "server.foo"),
            (
                "[[orgs]]\nname = \"demo\"\ncolor = \"red\"",
                "orgs[0].color",
            ),
            (
                "[auth]\nallowed_algorithms = [\"HS256\"]",
                "auth.allowed_algorithms[0]",
            ),
            ("[auth]\nleeway_s = 31", "auth.leeway_s"),
            (
                "[auth]\nmax_token_lifetime_s = 299",
                "auth.max_token_lifetime_s",
            ),
            // Also the retired-file sweeper's grace: 0 would delete files
            // under running queries.
            ("[query]\ntime_limit_s = 0", "query.time_limit_s"),
            (
                "[query]\nmax_running_per_org = 0",
                "query.max_running_per_org",
            ),
            (
                "[pipeline]\nmax_commits_per_caller = 0",
                "pipeline.max_commits_per_caller",
            ),
            (
                "[storage]\ndatabase_url = \"mysql://x\"",
                "storage.database_url",
            ),
            ("[[orgs]]\nname = \"Bad_Org\"", "orgs[0].name"),
            (
                "[[orgs]]\nname = \"demo\"\ndaily_run_schedule = \"every day\"",
                "orgs[0].daily_run_schedule",
            ),
            (
                "[[orgs]]\nname = \"demo\"\n[[idp.clients]]\norg = \"demo\"\nclient_id = \"a\"\nclient_secret = \"b\"\nservice_clients = [1]\nroles = { svc_api = [\"King\"] }",
                "idp.clients[0].roles.svc_api[0]",
            ),
            (
                "[[orgs]]\nname = \"demo\"\n[[idp.clients]]\norg = \"demo\"\nclient_id = \"a\"\nclient_secret = \"b\"\nservice_clients = [1]\nroles = { svc_api_moon = [\"ZoneAdmin\"] }",
                "idp.clients[0].roles.svc_api_moon",
            ),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text).unwrap_err();
            assert_eq!(err.key, key, "for {text:?}: {err}");
        }
    }

    #[test]
    fn a_file_with_its_own_orgs_has_no_demo_principals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[server]\ndefault_org = \"acme\"\n[[orgs]]\nname = \"acme\"\n",
        )
        .unwrap();
        let config = Config::load(Some(&path), env(&[])).unwrap();
        assert!(config.idp.clients.is_empty());
        assert!(config.idp.users.is_empty());
    }
}
