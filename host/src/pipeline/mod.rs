//! The pipelines (DESIGN.md "Load pipeline as WebAssembly components"): the
//! load pipeline of a commit and the daily run's pipeline. Manifests name
//! steps in order (`manifest/`, which also picks an org's manifest); each step
//! is a WASI component run by `engine/` in a fresh sandbox with a time limit,
//! a memory limit and only the capabilities its manifest entry grants;
//! `sequence.rs` runs a manifest's steps in order for every caller;
//! `files.rs` is the one door through which a manifest or a step's `.wasm`
//! file is read (inside `pipeline.dir`, regular files, bounded). This file
//! holds the vocabulary they share. Knows no HTTP.
//!
//! Steps carry the policy and the host does the data work: what a capability
//! answers comes from a [`LoadData`] of the load being committed, or from a
//! [`DailyData`] of the daily run, on the runtime and under the stop of the
//! run's [`RunControl`].

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::{
    array::{Array as _, RecordBatch},
    error::ArrowError,
    util::display::{ArrayFormatter, FormatOptions},
};
use tokio_util::sync::CancellationToken;

use crate::runtime::EngineRuntime;

pub mod builtin;
pub mod check;
pub mod deployed;
mod engine;
pub mod files;
pub mod manifest;
pub mod scaffold;
mod sequence;
pub mod wit_package;

pub use engine::{ComponentError, EngineStartError, PipelineEngine, SharedCause};
pub use sequence::{StepJudgement, StepReport, StepsRun, Stopped, run_steps, run_steps_blocking};

/// Which pipeline a manifest or a component belongs to: each is its own WIT
/// world with its own capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PipelineKind {
    /// A load commit's steps (world `step`, `load.toml`).
    Load,
    /// A daily run's steps (world `daily-step`, `daily.toml`).
    Daily,
}

impl PipelineKind {
    /// The manifest's file name, in `pipeline.dir` and in `orgs/<org>/`.
    pub fn file_name(self) -> &'static str {
        match self {
            PipelineKind::Load => "load.toml",
            PipelineKind::Daily => "daily.toml",
        }
    }

    /// The WIT world its steps target.
    pub fn world(self) -> &'static str {
        match self {
            PipelineKind::Load => "step",
            PipelineKind::Daily => "daily-step",
        }
    }

    /// Which pipeline's steps target `world`.
    pub fn of_world(world: &str) -> Option<Self> {
        [PipelineKind::Load, PipelineKind::Daily]
            .into_iter()
            .find(|kind| kind.world() == world)
    }

    /// Its name as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            PipelineKind::Load => "load",
            PipelineKind::Daily => "daily",
        }
    }

    /// What its steps are called in messages.
    pub fn steps_name(self) -> &'static str {
        match self {
            PipelineKind::Load => "load steps",
            PipelineKind::Daily => "daily-run steps",
        }
    }
}

/// What runs pipelines on a replica: the engine, the runtime their steps'
/// SQL runs on (apart from the one serving HTTP), and the deployments that
/// say which manifest each org runs.
#[derive(Clone)]
pub struct Pipelines {
    pub engine: Arc<PipelineEngine>,
    pub runtime: Arc<EngineRuntime>,
    pub deployments: Arc<deployed::Deployments>,
}

/// A column as steps see it: name, SQL type name, nullability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    pub sql_type: String,
    pub nullable: bool,
}

/// One staged file of the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFileInfo {
    pub file_key: String,
    pub size_bytes: u64,
    pub uploaded: bool,
}

/// Why the data work of a capability call failed: the step gets a `failed`
/// answer with this error's text. It holds the data side's own typed error,
/// cause and all, which the pipelines need only as text.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DataError(Box<dyn std::error::Error + Send + Sync>);

impl DataError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }
}

/// Rows as the WIT's SQL answers carry them: every value as text, NULL as none.
pub type TextRows = Vec<Vec<Option<String>>>;

/// The data work behind the capabilities, for one load. The engine awaits
/// each call on the run's runtime and drops it, unfinished, when the step's
/// time limit passes or its run is stopped: an implementation must leave
/// nothing visible when dropped. An `Err` is a `failed` answer to the step,
/// with the error's text.
#[async_trait]
pub trait LoadData: Send + Sync {
    fn list_files(&self) -> Result<Vec<StagedFileInfo>, DataError>;
    async fn parquet_columns(&self, file_key: &str) -> Result<Vec<ColumnInfo>, DataError>;
    /// Read-only SQL over the staged rows (table `staged`), at most `max_rows`.
    async fn query(&self, sql: &str, max_rows: u32) -> Result<TextRows, DataError>;
    async fn table_columns(&self) -> Result<Option<Vec<ColumnInfo>>, DataError>;
    /// Stages the rows for the lake table; returns the row count.
    async fn append_staged(&self) -> Result<u64, DataError>;
}

/// The data work behind the daily run's `lake-sql` capability, for one
/// execution; awaited and dropped as [`LoadData`]'s calls are.
#[async_trait]
pub trait DailyData: Send + Sync {
    /// One read-only SELECT over the org's databases, at most `max_rows`.
    async fn query(&self, sql: &str, max_rows: u32) -> Result<TextRows, DataError>;
    /// Replaces an insights table with the rows of `sql`; returns the row count.
    async fn refresh_table(&self, table: &str, sql: &str) -> Result<u64, DataError>;
}

/// What a run's steps get from whoever runs them besides the data: the
/// runtime their capability calls' SQL runs on (kept alive while a step may
/// use it, and apart from the one serving HTTP), and the token that stops
/// the run: a step running when it is cancelled ends at once, in its own
/// code or in a capability call. A load commit also has each step's name
/// told before it begins (recorded, so a death is known to be in that step).
#[derive(Clone)]
pub struct RunControl {
    runtime: Arc<EngineRuntime>,
    stop: CancellationToken,
    step_marker: Option<StepMarker>,
}

/// Told a step's name before the step begins; runs on the step's thread.
pub type StepMarker = Arc<dyn Fn(&str) + Send + Sync>;

impl RunControl {
    pub fn new(runtime: Arc<EngineRuntime>, stop: CancellationToken) -> Self {
        Self {
            runtime,
            stop,
            step_marker: None,
        }
    }

    /// Tells `marker` each step's name before the step begins.
    pub fn with_step_marker(mut self, marker: StepMarker) -> Self {
        self.step_marker = Some(marker);
        self
    }

    /// Called before `step` begins.
    pub(crate) fn entering(&self, step: &str) {
        if let Some(marker) = &self.step_marker {
            marker(step);
        }
    }

    /// A runtime of its own and a stop nobody cancels: for a run that nothing
    /// outside it stops (the dry run, tests).
    pub fn detached() -> std::io::Result<Self> {
        Ok(Self::new(
            Arc::new(EngineRuntime::new(1)?),
            CancellationToken::new(),
        ))
    }
}

/// What a daily-run step knows about its run (the WIT `run-context`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunContext {
    pub execution_name: String,
    pub org: String,
    pub lake_database: String,
    pub insights_database: String,
    pub scheduled: bool,
}

/// What a step knows about its load (the WIT `load-context`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepContext {
    pub load_id: String,
    pub org: String,
    pub zone: Option<String>,
    pub table_name: String,
    pub load_as_service_client_id: Option<String>,
    pub partitions: Vec<String>,
    /// check_sum entries: expression and expected value as JSON text.
    pub check_sum: Vec<(String, String)>,
    pub allowed_service_clients: Vec<i64>,
    pub any_service_client: bool,
}

/// One item of a FAIL report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorItem {
    #[serde(rename = "ErrorType")]
    pub error_type: String,
    #[serde(rename = "ErrorMessage")]
    pub error_message: String,
    #[serde(rename = "CheckResult", skip_serializing_if = "Option::is_none")]
    pub check_result: Option<String>,
}

/// A step's verdict: `None` to go on, or the ErrorType and items of a failure.
pub type StepVerdict = Option<(String, Vec<ErrorItem>)>;

/// How a pipeline run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineOutcome {
    /// Every step passed.
    Passed,
    /// A step failed the load: the spec's ErrorType and the items.
    Failed {
        step: String,
        error_type: String,
        items: Vec<ErrorItem>,
    },
}

/// A step that could not give a verdict: the load fails with InternalError.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("step {step} ran past its time limit of {limit_ms} ms")]
    TimeLimit { step: String, limit_ms: u64 },
    #[error("step {step} was stopped: its run was cancelled or the server is stopping")]
    Stopped { step: String },
    #[error("step {step} needed more than its memory limit of {limit_bytes} bytes")]
    MemoryLimit { step: String, limit_bytes: u64 },
    /// A trap (a Rust panic, an uncaught Python exception, ...), with what
    /// the step wrote to stderr before it (`""` or `"; it wrote: ..."`).
    #[error("step {step} trapped: {source:#}{output}")]
    Trapped {
        step: String,
        #[source]
        source: SharedCause,
        output: String,
    },
    #[error("step {step} reported an internal error: {message}")]
    Reported { step: String, message: String },
    /// Its component (`builtin:<name>`, or a file by its name alone).
    #[error("step {step} ({component}) could not be loaded: {source}")]
    Component {
        step: String,
        component: String,
        #[source]
        source: ComponentError,
    },
    #[error(
        "step {step} failed the load with ErrorType {error_type:?}, which is not one of the spec's"
    )]
    UnknownErrorType { step: String, error_type: String },
}

pub use crate::store::loads::LOAD_ERROR_TYPES;

/// The most items of a step's FAIL report kept (one more says how many
/// were left out), and the longest message or type kept of each.
pub const MAX_REPORT_ITEMS: usize = 100;
pub const MAX_REPORT_TEXT_BYTES: usize = 4096;

impl StepError {
    /// The step it is about.
    pub fn step(&self) -> &str {
        match self {
            StepError::TimeLimit { step, .. }
            | StepError::Stopped { step }
            | StepError::MemoryLimit { step, .. }
            | StepError::Trapped { step, .. }
            | StepError::Reported { step, .. }
            | StepError::Component { step, .. }
            | StepError::UnknownErrorType { step, .. } => step,
        }
    }

    /// The single ErrorMessages item of an InternalError.
    pub fn item(&self) -> ErrorItem {
        ErrorItem {
            error_type: "INTERNAL_ERROR".into(),
            error_message: self.to_string(),
            check_result: None,
        }
    }
}

/// `batches` as [`TextRows`].
pub(crate) fn rows_as_text(batches: &[RecordBatch]) -> Result<TextRows, ArrowError> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).map(|f| (c, f)))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|(column, f)| (!column.is_null(row)).then(|| f.value(row).to_string()))
                    .collect(),
            );
        }
    }
    Ok(rows)
}
