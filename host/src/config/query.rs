//! The `[query]` section: the query engine's admission control, fair sharing,
//! per-query limits, leases, CSV link lifetime, typed result copies and the
//! longest result page, with their defaults and their checks.
//!
//! It holds settings only; the engine that obeys them is `query/`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Results up to this size are also kept in memory by the writer, so the
/// replica that ran a query can serve its pages without reading the file.
/// It is also the most a result kept in the store's row may be
/// (`query.result_in_store_bytes`): the object store's buffered upload holds
/// far more before it sends anything, so a result this small has sent
/// nothing when it is kept in the row.
pub const SMALL_RESULT_BYTES: usize = 256 * 1024;

/// How many jobs of one org, and of one caller in it, a worker (a replica's
/// pool) runs at once: fair sharing between orgs and callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobCaps {
    pub per_org: i64,
    pub per_caller: i64,
}

impl JobCaps {
    /// No cap beyond the pool's own size.
    pub const NONE: JobCaps = JobCaps {
        per_org: i64::MAX,
        per_caller: i64::MAX,
    };
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
    /// Memory this replica keeps lake pages in after queries read them, for
    /// the next queries reading the same pages (`lake::ReadCache`); 0 keeps
    /// none.
    pub read_cache_bytes: u64,
    /// Partitions a query's plan is cut into, each run as its own stream;
    /// 0 chooses: the cores on a lake on disk; on S3, where each
    /// partition's scan waits on every range it asks for, twice the cores
    /// and at least 8 (`engine::session::partitions_for`).
    pub target_partitions: usize,
    /// A query still running after this long fails.
    pub time_limit_s: u64,
    /// How long a worker's claim on a query lasts without renewal; a query
    /// whose replica died ends FAILED after it (never run again, in case it
    /// was the cause).
    pub lease_s: u64,
    /// Runs of one query (the first plus reruns after draining replicas
    /// handed it back) before it fails.
    pub max_attempts: u32,
    /// Lifetime of the signed CSV links, at most 900 seconds (spec "Limits").
    pub csv_link_lifetime_s: u64,
    /// Result reuse on by default for these orgs: the oldest result, in
    /// seconds (at most a day), that a read of the org may answer with
    /// instead of running. A request's `Prefer: reuse=N` overrides it
    /// (`reuse=0` turns it off for that request).
    pub reuse_max_age_s: BTreeMap<String, u64>,
    /// Whether results are also served as an Arrow IPC stream beside the
    /// CSV, which the Arrow and Parquet downloads serve (with the engine's
    /// column types): read back from the CSV when first asked for, or
    /// written while the query runs when its columns do not read back
    /// (docs/api.md). Off, results are CSV and JSON pages only.
    pub typed_results: bool,
    /// How that Arrow copy's buffers are compressed (Arrow IPC's own body
    /// compression): `none`, `lz4` or `zstd`.
    pub typed_results_compression: ArrowCompression,
    /// Whether every read writes its Arrow copy while it runs, as before
    /// copies were read back from the CSV: for services whose callers
    /// download most results as Arrow or Parquet, who then never wait for a
    /// read-back, at the cost of every CSV read (docs/api.md).
    pub typed_results_while_running: bool,
    /// How the Arrow file of a query asked for with `Prefer:
    /// result-format=arrow` is compressed: that file is written while the
    /// query runs and is its caller's download, so the default is `lz4`,
    /// which compresses on the query's own time at a fraction of zstd's
    /// cost (docs/api.md "Arrow first").
    pub arrow_first_compression: ArrowCompression,
    /// A result whose CSV is at most this many bytes is kept in its job's
    /// row in the store instead of the lake (and its Arrow copy too, when
    /// that is as small): a small query then writes no file. A link to it
    /// writes the file on first request. At most 262144 (256 KiB); 0 keeps
    /// every result in the lake.
    pub result_in_store_bytes: usize,
    /// The longest JSON result page (`GET /query/{id}/result`, and the page
    /// of a `Prefer: wait` answer), in bytes; at least 65536. The spec caps
    /// a page at 1,000 rows but not their width. Pages are streamed, never
    /// held whole, so this bounds what one request reads and sends, not
    /// memory: a longer page answers 409 pointing at the whole-result
    /// downloads (CSV, Arrow), and a wait answer falls back to its 202.
    pub max_page_bytes: u64,
}

/// Arrow IPC body compression of the typed result copies. Readers decompress
/// by themselves (pyarrow and everything on Arrow C++, arrow-rs, Java, Go,
/// polars); a few small readers (arrow-js) read `none` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrowCompression {
    None,
    Lz4,
    #[default]
    Zstd,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            workers: 4,
            max_running_per_org: 3,
            max_running_per_caller: 2,
            memory_limit_bytes: 1 << 30,
            read_cache_bytes: 256 << 20,
            target_partitions: 0,
            time_limit_s: 1800,
            lease_s: 30,
            max_attempts: 5,
            csv_link_lifetime_s: 900,
            reuse_max_age_s: BTreeMap::new(),
            typed_results: true,
            typed_results_compression: ArrowCompression::default(),
            typed_results_while_running: false,
            arrow_first_compression: ArrowCompression::Lz4,
            result_in_store_bytes: 64 * 1024,
            max_page_bytes: 64 << 20,
        }
    }
}

/// The oldest result a read may reuse: one day.
pub const MAX_REUSE_AGE_S: u64 = 24 * 60 * 60;

/// The smallest `query.max_page_bytes`: below it, ordinary pages of a few
/// narrow columns would be refused.
pub const MIN_MAX_PAGE_BYTES: u64 = 64 * 1024;

/// Longest lifetime of a signed CSV link (spec "Limits": at most 15 minutes).
pub const MAX_CSV_LINK_LIFETIME_S: u64 = 900;

/// Most partitions a query's plan may be cut into: each is a stream with its
/// own buffers, and a repartition makes partitions x partitions channels.
pub const MAX_TARGET_PARTITIONS: usize = 256;

impl QueryConfig {
    /// The fair-sharing caps of the query workers.
    pub fn caps(&self) -> JobCaps {
        JobCaps {
            per_org: i64::try_from(self.max_running_per_org).unwrap_or(i64::MAX),
            per_caller: i64::try_from(self.max_running_per_caller).unwrap_or(i64::MAX),
        }
    }

    /// Checks the section.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one = [
            ("query.workers", self.workers as u64),
            ("query.max_running_per_org", self.max_running_per_org as u64),
            (
                "query.max_running_per_caller",
                self.max_running_per_caller as u64,
            ),
            ("query.memory_limit_bytes", self.memory_limit_bytes),
            ("query.time_limit_s", self.time_limit_s),
            ("query.lease_s", self.lease_s),
            ("query.max_attempts", u64::from(self.max_attempts)),
            ("query.csv_link_lifetime_s", self.csv_link_lifetime_s),
        ];
        for (key, value) in at_least_one {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.lease_s < 3 {
            return Err(ConfigError::new(
                "query.lease_s",
                "must be at least 3 (leases are renewed every third of it)",
            ));
        }
        if let Some((org, _)) = self
            .reuse_max_age_s
            .iter()
            .find(|(_, age)| **age > MAX_REUSE_AGE_S)
        {
            return Err(ConfigError::new(
                format!("query.reuse_max_age_s.{org}"),
                format!("must be at most {MAX_REUSE_AGE_S} (a day)"),
            ));
        }
        if self.target_partitions > MAX_TARGET_PARTITIONS {
            return Err(ConfigError::new(
                "query.target_partitions",
                format!("must be at most {MAX_TARGET_PARTITIONS} (0 chooses)"),
            ));
        }
        if self.result_in_store_bytes > SMALL_RESULT_BYTES {
            return Err(ConfigError::new(
                "query.result_in_store_bytes",
                format!("must be at most {SMALL_RESULT_BYTES} (256 KiB; 0 keeps none)"),
            ));
        }
        if self.max_page_bytes < MIN_MAX_PAGE_BYTES {
            return Err(ConfigError::new(
                "query.max_page_bytes",
                format!("must be at least {MIN_MAX_PAGE_BYTES} (64 KiB)"),
            ));
        }
        if self.csv_link_lifetime_s > MAX_CSV_LINK_LIFETIME_S {
            return Err(ConfigError::new(
                "query.csv_link_lifetime_s",
                format!("must be at most {MAX_CSV_LINK_LIFETIME_S} (15 minutes)"),
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
            // Also the retired-file sweeper's grace: 0 would delete files
            // under running queries.
            ("[query]\ntime_limit_s = 0", "query.time_limit_s"),
            (
                "[query]\nmax_running_per_org = 0",
                "query.max_running_per_org",
            ),
            (
                "[query]\ntarget_partitions = 257",
                "query.target_partitions",
            ),
            (
                "[query]\nresult_in_store_bytes = 262145",
                "query.result_in_store_bytes",
            ),
            ("[query]\nmax_page_bytes = 65535", "query.max_page_bytes"),
        ]);
    }
}
