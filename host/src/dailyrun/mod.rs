//! The daily run (spec "Daily run flag", "Daily run execution", the DailyRun
//! API): the per-org flag that switches the scheduled nightly start on and
//! off, executions started by hand or by each org's schedule, and what a run
//! does (the steps of `daily.toml` through the WebAssembly pipeline host).
//! Knows no HTTP (the wire shapes of the flag and of executions are
//! `api/dailyrun_body.rs`'s): this file names executions, `service.rs` reads
//! and sets the flag and lists, starts and runs executions, `schedule.rs` decides
//! when a scheduled run is due, `transform.rs` is the data side of the
//! `lake-sql` capability, `dry_run.rs` runs a daily manifest over a scratch lake.

pub mod dry_run;
pub mod schedule;
pub mod service;
pub mod transform;

use chrono::{DateTime, Utc};

pub use service::{DailyRunService, StartResult};

/// The state machine's name for an org (in names and ARNs).
pub fn state_machine(org: &str) -> String {
    format!("DailyScheduledETL_{org}")
}

/// An execution's name: `DailyScheduledETL_<org>_<timestamp>`, the timestamp
/// UTC to the microsecond (`20261122T020000123456Z`).
pub fn execution_name(org: &str, at: DateTime<Utc>) -> String {
    format!("{}_{}", state_machine(org), at.format("%Y%m%dT%H%M%S%6fZ"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_names_carry_the_start_to_the_microsecond() {
        let at = DateTime::parse_from_rfc3339("2026-11-22T02:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            execution_name("demo", at),
            "DailyScheduledETL_demo_20261122T020000123456Z"
        );
    }
}
