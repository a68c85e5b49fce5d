//! The `[dailyrun]` section: how long a daily run may take and how its
//! scheduler ticks, holds runs and catches up, with their defaults and their
//! checks.
//!
//! Each org's schedule is not here but in `[[orgs]] daily_run_schedule`
//! (`orgs.rs`); the scheduler itself is `dailyrun/`.

use serde::{Deserialize, Serialize};

use super::ConfigError;

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

impl DailyRunConfig {
    /// Checks the section.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("dailyrun.max_duration_s", self.max_duration_s),
            ("dailyrun.tick_ms", self.tick_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.lease_s < 3 {
            return Err(ConfigError::new(
                "dailyrun.lease_s",
                "must be at least 3 (holds are renewed every third of it)",
            ));
        }
        Ok(())
    }
}
