//! The `[storage]` section: the data folder, the catalog database, the lake
//! and the upload endpoint's listener, with their defaults and their checks.
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

impl StorageConfig {
    /// Checks the schemes of `database_url` and `lake_url`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
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
        assert_refused_at(&[(
            "[storage]\ndatabase_url = \"mysql://x\"",
            "storage.database_url",
        )]);
    }
}
