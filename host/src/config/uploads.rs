//! The `[uploads]` section: the bucket of the embedded S3-compatible endpoint,
//! the address callers reach it at, the largest file and how long staged files
//! are kept, with their defaults and their checks.
//!
//! It holds settings only; the endpoint is `s3/`.

use serde::{Deserialize, Serialize};
use url::Url;

use super::ConfigError;

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

impl UploadsConfig {
    /// Checks the section.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let valid_bucket = (3..=63).contains(&self.bucket.len())
            && self
                .bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !self.bucket.starts_with(['-', '.'])
            && !self.bucket.ends_with(['-', '.']);
        if !valid_bucket {
            return Err(ConfigError::new(
                "uploads.bucket",
                "must be an S3 bucket name: 3 to 63 lowercase letters, digits, `-` or `.`",
            ));
        }
        if let Some(url) = &self.public_url
            && (!matches!(url.scheme(), "http" | "https") || url.host().is_none())
        {
            return Err(ConfigError::new(
                "uploads.public_url",
                "must be an http(s) URL with a host",
            ));
        }
        for (key, value) in [
            ("uploads.max_file_bytes", self.max_file_bytes),
            ("uploads.staging_ttl_s", self.staging_ttl_s),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }
}
