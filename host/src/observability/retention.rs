//! What the retention sweep (`retention/`) reports: what it removed, by
//! kind, how long its rounds take, and the bytes each kind of storage holds
//! (`lakehost_storage_bytes`), so an operator sees what grows.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

const SWEPT: &str = "lakehost_swept_total";
const SWEEP_DURATION: &str = "lakehost_sweep_duration_seconds";
const STORAGE_BYTES: &str = "lakehost_storage_bytes";
const SWEEP_FAILURES: &str = "lakehost_sweep_failures_total";

/// What a sweep removes: the `kind` label of `lakehost_swept_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Swept {
    /// Query results (their files and the forms rows keep).
    Results,
    /// Query job rows.
    Queries,
    /// Load rows (with their files' rows).
    Loads,
    /// Daily-run rows.
    DailyRuns,
    /// Loads left OPEN whose staged uploads were removed.
    Staging,
    /// Idempotency keys past their 24 hours.
    IdempotencyKeys,
    /// Data files a DROP or a daily refresh retired.
    RetiredFiles,
    /// Lake data files no table lists (a write that died before its commit).
    OrphanFiles,
    /// Result files no query keeps.
    OrphanResults,
    /// Staged uploads of loads that no longer wait for them.
    OrphanStaged,
    /// Half-written files of a killed process on a local-disk lake.
    InterruptedWrites,
    /// The embedded identity provider's expired login codes.
    IdentityProvider,
    /// Compiled pipeline steps past `pipeline.compiled_cache_bytes`.
    CompiledSteps,
}

impl Swept {
    pub fn as_str(self) -> &'static str {
        match self {
            Swept::Results => "results",
            Swept::Queries => "queries",
            Swept::Loads => "loads",
            Swept::DailyRuns => "daily_runs",
            Swept::Staging => "staging",
            Swept::IdempotencyKeys => "idempotency_keys",
            Swept::RetiredFiles => "retired_files",
            Swept::OrphanFiles => "orphan_files",
            Swept::OrphanResults => "orphan_results",
            Swept::OrphanStaged => "orphan_staged",
            Swept::InterruptedWrites => "interrupted_writes",
            Swept::IdentityProvider => "identity_provider",
            Swept::CompiledSteps => "compiled_steps",
        }
    }
}

/// Where stored bytes are: the `kind` label of `lakehost_storage_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stored {
    /// Lake tables' data files.
    Lake,
    /// Query results in the lake.
    Results,
    /// Small query results kept in job rows.
    ResultsInStore,
    /// Uploads staged for loads not committed yet.
    Staged,
    /// Pipeline components deployed over the API.
    Pipeline,
}

impl Stored {
    pub const ALL: [Stored; 5] = [
        Stored::Lake,
        Stored::Results,
        Stored::ResultsInStore,
        Stored::Staged,
        Stored::Pipeline,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stored::Lake => "lake",
            Stored::Results => "results",
            Stored::ResultsInStore => "results_in_store",
            Stored::Staged => "staged",
            Stored::Pipeline => "pipeline",
        }
    }
}

pub(super) fn describe() {
    describe_counter!(SWEPT, "Things the retention sweep removed, by kind.");
    describe_counter!(SWEEP_FAILURES, "Retention sweeps that failed, by kind.");
    describe_histogram!(
        SWEEP_DURATION,
        Unit::Seconds,
        "Time of one retention round on the replica holding the sweep lease."
    );
    describe_gauge!(
        STORAGE_BYTES,
        Unit::Bytes,
        "Bytes stored, by kind, as the last scan counted them."
    );
}

/// `count` things of `kind` removed.
pub fn swept(kind: Swept, count: u64) {
    if count > 0 {
        counter!(SWEPT, "kind" => kind.as_str()).increment(count);
    }
}

/// A sweep of `kind` failed (logged by the caller).
pub fn sweep_failed(kind: Swept) {
    counter!(SWEEP_FAILURES, "kind" => kind.as_str()).increment(1);
}

/// One round of the sweep took `elapsed`.
pub fn sweep_round(elapsed: Duration) {
    histogram!(SWEEP_DURATION).record(elapsed.as_secs_f64());
}

/// `kind` holds `bytes` now.
pub fn storage_bytes(kind: Stored, bytes: u64) {
    gauge!(STORAGE_BYTES, "kind" => kind.as_str()).set(bytes as f64);
}
