//! The `[storage]` section: the data folder, the catalog database and its
//! pool, the lake and the upload endpoint's listener, with their defaults
//! and their checks.
//!
//! It checks the URLs' schemes only; it never connects to anything.

use std::{net::SocketAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    /// Connections this replica opens to Postgres at most (`database_url`);
    /// size Postgres's `max_connections` for replicas x this, plus its own
    /// reserve. SQLite keeps a pool of its own size.
    pub max_connections: u32,
    pub lake_url: Option<String>,
    pub s3_listen: SocketAddr,
}

/// `storage.max_connections` by default.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;

/// The fewest connections a replica works with: a job's transaction and
/// another job's lease renewal at once.
const MIN_MAX_CONNECTIONS: u32 = 2;

/// More than any Postgres server accepts from one client without tuning.
const MAX_MAX_CONNECTIONS: u32 = 10_000;

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./lakehost-data"),
            database_url: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            lake_url: None,
            s3_listen: "127.0.0.1:9000".parse().expect("literal address"),
        }
    }
}

impl StorageConfig {
    /// Checks the schemes of `database_url` and `lake_url`, and the pool's
    /// size.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_MAX_CONNECTIONS..=MAX_MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(ConfigError::new(
                "storage.max_connections",
                format!("must be from {MIN_MAX_CONNECTIONS} to {MAX_MAX_CONNECTIONS}"),
            ));
        }
        if let Some(url) = &self.database_url {
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
        if let Some(url) = &self.lake_url {
            let ok = ["s3://", "file://"].iter().any(|p| url.starts_with(p));
            if !ok {
                return Err(ConfigError::new(
                    "storage.lake_url",
                    "must start with s3:// or file://",
                ));
            }
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
                "[storage]\ndatabase_url = \"mysql://x\"",
                "storage.database_url",
            ),
            ("[storage]\nmax_connections = 1", "storage.max_connections"),
            (
                "[storage]\nmax_connections = 10001",
                "storage.max_connections",
            ),
        ]);
    }

    #[test]
    fn the_pool_is_16_connections_unless_set() {
        let config = crate::config::Config::load(None, Vec::new()).unwrap();
        assert_eq!(config.storage.max_connections, 16);
        let config = crate::config::Config::load(
            None,
            [("LAKEHOST_STORAGE_MAX_CONNECTIONS".into(), "40".into())],
        )
        .unwrap();
        assert_eq!(config.storage.max_connections, 40);
    }
}
