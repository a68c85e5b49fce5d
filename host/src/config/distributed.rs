//! The `[distributed]` section: reads too big for one process run on
//! several lakehost processes (`cluster`, cargo feature
//! `distributed`). A replica with `enabled` serves a worker listener; one
//! that also names `workers` coordinates: its reads whose scan after pruning
//! passes `min_scan_bytes` or `min_scan_files` run on those workers.
//!
//! It holds settings only; the secret file is read at startup, not here
//! (this module opens no file but the config).

use std::{net::SocketAddr, path::PathBuf};

use serde::{Deserialize, Deserializer, Serialize};
use url::Url;

use super::{ConfigError, StorageConfig};

/// The shortest cluster secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributedConfig {
    /// Serve a worker listener, and coordinate when `workers` is set.
    pub enabled: bool,
    /// The worker listener: loopback by default, never public unless set.
    pub worker_listen: SocketAddr,
    /// The workers this replica sends stages to (`http://host:port`, their
    /// `worker_listen`); in the environment, one comma-separated string.
    #[serde(deserialize_with = "urls_from_list_or_string")]
    pub workers: Vec<String>,
    /// The secret every call between lakehost processes carries (at least
    /// 32 bytes; `LAKEHOST_DISTRIBUTED_SECRET` in the environment).
    pub secret: Option<String>,
    /// Or a file holding it (trailing white space ignored).
    pub secret_file: Option<PathBuf>,
    /// A read is distributed when its scan after pruning is at least this
    /// many bytes...
    pub min_scan_bytes: u64,
    /// ...or this many files.
    pub min_scan_files: u64,
    /// Bytes of parquet one task of a distributed scan reads.
    pub bytes_per_task: u64,
    /// At most this many tasks in one stage; 0: as many as there are workers.
    pub max_tasks_per_stage: usize,
}

impl Default for DistributedConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            worker_listen: SocketAddr::from(([127, 0, 0, 1], 50071)),
            workers: Vec::new(),
            secret: None,
            secret_file: None,
            min_scan_bytes: 1 << 30,
            min_scan_files: 512,
            bytes_per_task: 128 << 20,
            max_tasks_per_stage: 0,
        }
    }
}

/// Never prints the secret.
impl std::fmt::Debug for DistributedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedConfig")
            .field("enabled", &self.enabled)
            .field("worker_listen", &self.worker_listen)
            .field("workers", &self.workers)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_file", &self.secret_file)
            .field("min_scan_bytes", &self.min_scan_bytes)
            .field("min_scan_files", &self.min_scan_files)
            .field("bytes_per_task", &self.bytes_per_task)
            .field("max_tasks_per_stage", &self.max_tasks_per_stage)
            .finish()
    }
}

/// `["http://a:1", "http://b:2"]` in a file, `"http://a:1,http://b:2"` in
/// the environment (where no key takes a list).
fn urls_from_list_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<String>),
        String(String),
    }
    Ok(match ListOrString::deserialize(d)? {
        ListOrString::List(urls) => urls,
        ListOrString::String(text) => text
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

impl DistributedConfig {
    /// The worker URLs, parsed (validated first: they parse).
    pub fn worker_urls(&self) -> Vec<Url> {
        self.workers
            .iter()
            .filter_map(|url| Url::parse(url).ok())
            .collect()
    }

    pub(super) fn validate(&self, storage: &StorageConfig) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if !cfg!(feature = "distributed") {
            return Err(ConfigError::new(
                "distributed.enabled",
                "this lakehost was built without distributed queries (the cargo feature `distributed`)",
            ));
        }
        if !storage
            .lake_url
            .as_deref()
            .is_some_and(|url| url.starts_with("s3://"))
        {
            return Err(ConfigError::new(
                "distributed.enabled",
                "a lake on local disk cannot be distributed; set storage.lake_url to s3://... \
                 (every process must read the same lake)",
            ));
        }
        for url in &self.workers {
            let parsed = Url::parse(url)
                .ok()
                .filter(|u| u.scheme() == "http" && u.host().is_some() && u.port().is_some());
            if parsed.is_none() {
                return Err(ConfigError::new(
                    "distributed.workers",
                    format!("{url:?} is not http://host:port"),
                ));
            }
        }
        match (&self.secret, &self.secret_file) {
            (None, None) => {
                return Err(ConfigError::new(
                    "distributed.secret",
                    "set distributed.secret (LAKEHOST_DISTRIBUTED_SECRET) or distributed.secret_file: \
                     workers accept plans only from holders of the cluster secret",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "distributed.secret_file",
                    "set distributed.secret or distributed.secret_file, not both",
                ));
            }
            (Some(secret), None) if secret.len() < MIN_SECRET_BYTES => {
                return Err(ConfigError::new(
                    "distributed.secret",
                    format!("must be at least {MIN_SECRET_BYTES} bytes"),
                ));
            }
            _ => {}
        }
        let positive = [
            ("distributed.min_scan_bytes", self.min_scan_bytes),
            ("distributed.min_scan_files", self.min_scan_files),
            ("distributed.bytes_per_task", self.bytes_per_task),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, tests::assert_refused_at};

    const S3: &str = "[storage]\nlake_url = \"s3://lake/prefix\"\n";
    const SECRET: &str = "secret = \"0123456789abcdef0123456789abcdef\"\n";

    #[test]
    fn off_by_default_and_loopback() {
        let config = Config::from_toml("").unwrap();
        assert!(!config.distributed.enabled);
        assert!(config.distributed.worker_listen.ip().is_loopback());
    }

    #[test]
    fn workers_from_a_list_or_a_comma_separated_string() {
        for workers in [
            "[\"http://10.0.0.1:50071\", \"http://10.0.0.2:50071\"]",
            "\"http://10.0.0.1:50071, http://10.0.0.2:50071\"",
        ] {
            let text = format!("{S3}[distributed]\nenabled = true\n{SECRET}workers = {workers}\n");
            let config = Config::from_toml(&text);
            if cfg!(feature = "distributed") {
                let urls = config.unwrap().distributed.worker_urls();
                assert_eq!(urls.len(), 2, "{workers}");
                assert_eq!(urls[1].as_str(), "http://10.0.0.2:50071/");
            } else {
                assert_eq!(config.unwrap_err().key, "distributed.enabled");
            }
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        if !cfg!(feature = "distributed") {
            assert_refused_at(&[("[distributed]\nenabled = true\n", "distributed.enabled")]);
            return;
        }
        let on = |rest: &str| format!("{S3}[distributed]\nenabled = true\n{rest}");
        assert_refused_at(&[
            (
                &format!("[distributed]\nenabled = true\n{SECRET}"),
                "distributed.enabled",
            ),
            (
                &format!(
                    "[storage]\nlake_url = \"file:///tmp/lake\"\n[distributed]\nenabled = true\n{SECRET}"
                ),
                "distributed.enabled",
            ),
            (&on(""), "distributed.secret"),
            (&on("secret = \"short\"\n"), "distributed.secret"),
            (
                &on(&format!("{SECRET}secret_file = \"/etc/secret\"\n")),
                "distributed.secret_file",
            ),
            (
                &on(&format!("{SECRET}workers = [\"10.0.0.1:50071\"]\n")),
                "distributed.workers",
            ),
            (
                &on(&format!("{SECRET}workers = [\"https://w:50071\"]\n")),
                "distributed.workers",
            ),
            (
                &on(&format!("{SECRET}min_scan_bytes = 0\n")),
                "distributed.min_scan_bytes",
            ),
            (
                &on(&format!("{SECRET}bytes_per_task = 0\n")),
                "distributed.bytes_per_task",
            ),
            (&on(&format!("{SECRET}nodes = 3\n")), "distributed.nodes"),
        ]);
    }
}
