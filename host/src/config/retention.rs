//! The `[retention]` section: how long what lakehost writes is kept, and how
//! often and how much the retention sweep (`retention/`) deletes at a time,
//! with their defaults and their checks. docs/operating.md "Retention" is
//! the table of every kind's lifetime.
//!
//! It holds settings only; the sweeps are `retention/`.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Seconds in a day.
const DAY_S: u64 = 24 * 3600;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// A query's result (its CSV, Arrow and Parquet files, or the forms its
    /// row keeps) is deleted this many days after the query ended
    /// (Athena's console keeps 7). Its pages and downloads then answer that
    /// it was deleted.
    pub results_days: u64,
    /// Query, load and daily-run rows are deleted this many days after they
    /// ended (at least `results_days`); an org's latest daily run is kept.
    pub jobs_days: u64,
    /// A lake data file no table lists, a result file no query keeps, is
    /// deleted once its last write is this old: longer than any write can
    /// take before its catalog commit (`query.time_limit_s`,
    /// `dailyrun.max_duration_s`).
    pub orphan_age_s: u64,
    /// How often the sweep runs (on one replica at a time: a lease).
    pub sweep_every_s: u64,
    /// How often the lake is listed for orphans and its bytes counted (a
    /// listing costs one request per thousand objects on S3).
    pub scan_every_s: u64,
    /// Rows or files deleted per store round trip.
    pub batch: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            results_days: 7,
            jobs_days: 90,
            orphan_age_s: DAY_S,
            sweep_every_s: 60,
            scan_every_s: 3600,
            batch: 500,
        }
    }
}

impl RetentionConfig {
    /// `results_days` in microseconds.
    pub fn results_micros(&self) -> i64 {
        days_micros(self.results_days)
    }

    /// `jobs_days` in microseconds.
    pub fn jobs_micros(&self) -> i64 {
        days_micros(self.jobs_days)
    }

    /// Checks the section; `longest_write_s` is the longest a write may run
    /// before its catalog commit.
    pub(super) fn validate(&self, longest_write_s: u64) -> Result<(), ConfigError> {
        for (key, value) in [
            ("retention.results_days", self.results_days),
            ("retention.jobs_days", self.jobs_days),
            ("retention.sweep_every_s", self.sweep_every_s),
            ("retention.scan_every_s", self.scan_every_s),
            ("retention.batch", self.batch),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.results_days > 36_500 || self.jobs_days > 36_500 {
            return Err(ConfigError::new(
                "retention.jobs_days",
                "must be at most 36500 (a century)",
            ));
        }
        if self.jobs_days < self.results_days {
            return Err(ConfigError::new(
                "retention.jobs_days",
                "must be at least retention.results_days (a result outlives no job)",
            ));
        }
        if self.orphan_age_s <= longest_write_s {
            return Err(ConfigError::new(
                "retention.orphan_age_s",
                format!(
                    "must be more than the longest write ({longest_write_s} s: \
                     query.time_limit_s, dailyrun.max_duration_s), or a live write's \
                     files would be deleted"
                ),
            ));
        }
        if self.batch > 10_000 {
            return Err(ConfigError::new("retention.batch", "must be at most 10000"));
        }
        Ok(())
    }
}

fn days_micros(days: u64) -> i64 {
    i64::try_from(days.saturating_mul(DAY_S).saturating_mul(1_000_000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_holds_and_each_bound_names_its_key() {
        RetentionConfig::default().validate(1800).unwrap();
        type Change = fn(&mut RetentionConfig);
        let cases: [(Change, &str); 5] = [
            (|c| c.results_days = 0, "retention.results_days"),
            (|c| c.jobs_days = 3, "retention.jobs_days"),
            (|c| c.orphan_age_s = 1800, "retention.orphan_age_s"),
            (|c| c.batch = 20_000, "retention.batch"),
            (|c| c.scan_every_s = 0, "retention.scan_every_s"),
        ];
        for (change, key) in cases {
            let mut config = RetentionConfig::default();
            change(&mut config);
            assert_eq!(config.validate(1800).unwrap_err().key, key);
        }
        assert_eq!(
            RetentionConfig::default().results_micros(),
            7 * 86_400_000_000
        );
    }
}
