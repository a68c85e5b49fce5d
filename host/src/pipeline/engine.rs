//! The wasmtime side of the pipelines: the one place that runs `bindgen!`
//! (for the `step` world of loads and the `daily-step` world of daily runs,
//! which shares its `types` and `log` interfaces), and the knobs that keep a
//! step in its box.
//!
//! - **Compiled once per process.** One engine serves every server of the
//!   process. A component is compiled the first time a manifest names it
//!   (built-ins at startup) and kept as an `InstancePre`, so a run only
//!   instantiates. A `.wasm` file is compiled again when its size or
//!   modification time changes, so an operator can swap it without a restart.
//! - **A fresh `Store` per step run**: no state leaks from one load (or step)
//!   to the next.
//! - **Time limit by epoch interruption**: a thread ticks the engine's epoch
//!   every `TICK`; a store's deadline is its step's `time_limit_ms` in ticks,
//!   after which the guest traps with `Trap::Interrupt` wherever it is.
//! - **Memory limit by a `ResourceLimiter`** (like wasmtime's `StoreLimits`,
//!   but it remembers that it refused a growth, so the failure can say why).
//! - **Capabilities**: every WIT import is linked, but each one first checks
//!   the step's grants and answers `not-granted` instead of data.
//! - **WASI** is linked with an empty context: no files, no environment, no
//!   network, no inherited stdio; only clocks and randomness work.

use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use wasmtime::{
    Config, Engine, ResourceLimiter, Store, Trap,
    component::{Component, HasSelf, InstancePre, Linker, ResourceTable},
};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{
    ColumnInfo, DailyData, ErrorItem, LOAD_ERROR_TYPES, LoadData, MAX_REPORT_ITEMS,
    MAX_REPORT_TEXT_BYTES, PipelineKind, PipelineOutcome, RunContext, StepContext, StepError,
    builtin,
    manifest::{Capability, ComponentSource, Manifest, Step},
};

mod bindings {
    wasmtime::component::bindgen!({ path: "../wit", world: "step" });
}

mod daily_bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "daily-step",
        with: {
            "lakehost:pipeline/types": super::bindings::lakehost::pipeline::types,
            "lakehost:pipeline/log": super::bindings::lakehost::pipeline::log,
        },
    });
}

use bindings::lakehost::pipeline::{
    lake_append, lake_schema, log, staged_files, staged_sql,
    types::{self, CapabilityError},
};
use daily_bindings::lakehost::pipeline::lake_sql;

/// How often the epoch advances: the granularity of time limits.
const TICK: Duration = Duration::from_millis(10);

/// What one step run's store holds; `D` is the data side of its pipeline
/// (`dyn LoadData` or `dyn DailyData`).
struct StepState<D: ?Sized> {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StepLimits,
    grants: BTreeSet<Capability>,
    data: Arc<D>,
    step: String,
    /// The load id or the daily-run execution name, for log lines.
    job: String,
    /// What the step has logged so far, against `LOG_BUDGET_BYTES`.
    logged_bytes: usize,
}

/// What one run of a step may write to the server's log, and the longest
/// line kept: a step cannot fill the server's disk.
const LOG_BUDGET_BYTES: usize = 64 * 1024;
const LOG_LINE_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" [...]");
    }
    text
}

type LoadState = StepState<dyn LoadData>;
type DailyState = StepState<dyn DailyData>;

impl<D: ?Sized + Send + Sync> WasiView for StepState<D> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Refuses memory growth past the step's limit, and remembers that it did.
struct StepLimits {
    memory_bytes: usize,
    refused: bool,
}

impl ResourceLimiter for StepLimits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        100
    }

    fn memories(&self) -> usize {
        10
    }

    fn tables(&self) -> usize {
        100
    }
}

impl<D: ?Sized> StepState<D> {
    fn grant(&self, capability: Capability) -> Result<(), CapabilityError> {
        if self.grants.contains(&capability) {
            Ok(())
        } else {
            Err(CapabilityError::NotGranted(format!(
                "step {} was not granted {} in its manifest",
                self.step,
                capability.name()
            )))
        }
    }
}

fn wit_column(column: ColumnInfo) -> types::Column {
    types::Column {
        name: column.name,
        sql_type: column.sql_type,
        nullable: column.nullable,
    }
}

impl<D: ?Sized + Send> types::Host for StepState<D> {}

impl staged_files::Host for LoadState {
    fn list_files(&mut self) -> Result<Vec<types::StagedFile>, CapabilityError> {
        self.grant(Capability::StagedFiles)?;
        let files = self.data.list_files().map_err(CapabilityError::Failed)?;
        Ok(files
            .into_iter()
            .map(|f| types::StagedFile {
                file_key: f.file_key,
                size_bytes: f.size_bytes,
                uploaded: f.uploaded,
            })
            .collect())
    }

    fn parquet_columns(&mut self, file_key: String) -> Result<Vec<types::Column>, CapabilityError> {
        self.grant(Capability::StagedFiles)?;
        let columns = self
            .data
            .parquet_columns(&file_key)
            .map_err(CapabilityError::Failed)?;
        Ok(columns.into_iter().map(wit_column).collect())
    }
}

impl staged_sql::Host for LoadState {
    fn query(
        &mut self,
        sql: String,
        max_rows: u32,
    ) -> Result<Vec<Vec<Option<String>>>, CapabilityError> {
        self.grant(Capability::StagedSql)?;
        self.data
            .query(&sql, max_rows)
            .map_err(CapabilityError::Failed)
    }
}

impl lake_schema::Host for LoadState {
    fn table_columns(&mut self) -> Result<Option<Vec<types::Column>>, CapabilityError> {
        self.grant(Capability::LakeSchema)?;
        let columns = self.data.table_columns().map_err(CapabilityError::Failed)?;
        Ok(columns.map(|cs| cs.into_iter().map(wit_column).collect()))
    }
}

impl lake_append::Host for LoadState {
    fn append_staged(&mut self) -> Result<u64, CapabilityError> {
        self.grant(Capability::LakeAppend)?;
        self.data.append_staged().map_err(CapabilityError::Failed)
    }
}

impl lake_sql::Host for DailyState {
    fn query(
        &mut self,
        sql: String,
        max_rows: u32,
    ) -> Result<Vec<Vec<Option<String>>>, CapabilityError> {
        self.grant(Capability::LakeSql)?;
        self.data
            .query(&sql, max_rows)
            .map_err(CapabilityError::Failed)
    }

    fn refresh_table(&mut self, table: String, sql: String) -> Result<u64, CapabilityError> {
        self.grant(Capability::LakeSql)?;
        self.data
            .refresh_table(&table, &sql)
            .map_err(CapabilityError::Failed)
    }
}

impl<D: ?Sized + Send> log::Host for StepState<D> {
    fn write(&mut self, level: log::Level, message: String) {
        if !self.grants.contains(&Capability::Log) || self.logged_bytes >= LOG_BUDGET_BYTES {
            return;
        }
        let message = cut(message, LOG_LINE_BYTES);
        self.logged_bytes += message.len();
        let (step, job) = (&self.step, &self.job);
        if self.logged_bytes >= LOG_BUDGET_BYTES {
            tracing::warn!(%step, %job, "the step's log budget of {LOG_BUDGET_BYTES} bytes is spent; its further lines are dropped");
        }
        match level {
            log::Level::Debug => tracing::debug!(%step, %job, "{message}"),
            log::Level::Info => tracing::info!(%step, %job, "{message}"),
            log::Level::Warn => tracing::warn!(%step, %job, "{message}"),
            log::Level::Error => tracing::error!(%step, %job, "{message}"),
        }
    }
}

/// What identifies a compiled component: a built-in name, or a file with its
/// size and modification time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ComponentKey {
    Builtin(String),
    File(PathBuf, u64, Option<std::time::SystemTime>),
}

/// Compiled components of one world. Each key gets a cell that is filled
/// once: two servers asking for the same component at once compile it once.
struct ComponentCache<P> {
    cells: Mutex<HashMap<ComponentKey, Arc<CompiledCell<P>>>>,
}

/// A component compiled once (or the reason it does not compile).
type CompiledCell<P> = OnceLock<Result<P, String>>;

impl<P: Clone> ComponentCache<P> {
    fn new() -> Self {
        Self {
            cells: Mutex::new(HashMap::new()),
        }
    }

    fn get_or_compile(
        &self,
        key: ComponentKey,
        compile: impl FnOnce() -> Result<P, String>,
    ) -> Result<P, String> {
        let cell = self
            .cells
            .lock()
            .expect("component cache lock")
            .entry(key)
            .or_default()
            .clone();
        cell.get_or_init(compile).clone()
    }
}

/// Compiles and runs steps. One per process ([`PipelineEngine::shared`]).
pub struct PipelineEngine {
    engine: Engine,
    load_linker: Linker<LoadState>,
    daily_linker: Linker<DailyState>,
    load_steps: ComponentCache<bindings::StepPre<LoadState>>,
    daily_steps: ComponentCache<daily_bindings::DailyStepPre<DailyState>>,
}

impl std::fmt::Debug for PipelineEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PipelineEngine")
    }
}

/// A step's verdict: `None` to go on, or the ErrorType and items of a failure.
pub type StepVerdict = Option<(String, Vec<ErrorItem>)>;

impl PipelineEngine {
    /// The process's engine, created on first use (with its epoch thread).
    pub fn shared() -> Result<Arc<Self>, String> {
        static SHARED: OnceLock<Result<Arc<PipelineEngine>, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                Self::new()
                    .map(Arc::new)
                    .map_err(|e| format!("starting the WebAssembly engine: {e:#}"))
            })
            .clone()
    }

    fn new() -> wasmtime::Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        // Time limits: the guest checks the epoch at loop heads and calls.
        config.epoch_interruption(true);
        let engine = Engine::new(&config)?;
        let mut load_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut load_linker)?;
        bindings::Step::add_to_linker::<LoadState, HasSelf<LoadState>>(&mut load_linker, |s| s)?;
        let mut daily_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut daily_linker)?;
        daily_bindings::DailyStep::add_to_linker::<DailyState, HasSelf<DailyState>>(
            &mut daily_linker,
            |s| s,
        )?;
        {
            let engine = engine.clone();
            std::thread::Builder::new()
                .name("pipeline-epoch".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| wasmtime::Error::msg(format!("epoch thread: {e}")))?;
        }
        Ok(Self {
            engine,
            load_linker,
            daily_linker,
            load_steps: ComponentCache::new(),
            daily_steps: ComponentCache::new(),
        })
    }

    /// Compiles every built-in component now, so no run waits for it.
    pub fn precompile_builtins(&self) -> Result<(), String> {
        for (name, kind) in builtin::names() {
            let source = ComponentSource::Builtin(name.to_string());
            match kind {
                PipelineKind::Load => self.load_step(&source).map(drop)?,
                PipelineKind::Daily => self.daily_step(&source).map(drop)?,
            }
        }
        Ok(())
    }

    /// The compiled component of `source` for a `kind` pipeline, through
    /// `linker`; `finish` checks its exports against the world.
    fn prepared<T: 'static, P: Clone>(
        &self,
        kind: PipelineKind,
        source: &ComponentSource,
        cache: &ComponentCache<P>,
        linker: &Linker<T>,
        finish: impl FnOnce(InstancePre<T>) -> wasmtime::Result<P>,
    ) -> Result<P, String> {
        let key = match source {
            ComponentSource::Builtin(name) => ComponentKey::Builtin(name.clone()),
            ComponentSource::File(path) => {
                // Messages name the file, not the server's directories.
                let shown = path.file_name().unwrap_or_default().to_string_lossy();
                let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
                ComponentKey::File(path.clone(), meta.len(), meta.modified().ok())
            }
        };
        cache.get_or_compile(key, || {
            let component = match source {
                ComponentSource::Builtin(name) => match builtin::component(name) {
                    Some((builtin_kind, bytes)) if builtin_kind == kind => {
                        Component::new(&self.engine, bytes)
                    }
                    Some(_) => {
                        return Err(format!(
                            "built-in {name} is not one of the {}",
                            kind.steps_name()
                        ));
                    }
                    None => return Err(format!("no built-in component {name}")),
                },
                ComponentSource::File(path) => std::fs::read(path)
                    .map_err(wasmtime::Error::from)
                    .and_then(|bytes| Component::new(&self.engine, bytes)),
            }
            .map_err(|e| format!("not a usable component: {e:#}"))?;
            let instance_pre = linker
                .instantiate_pre(&component)
                .map_err(|e| format!("imports do not match the {} world: {e:#}", world(kind)))?;
            finish(instance_pre)
                .map_err(|e| format!("exports do not match the {} world: {e:#}", world(kind)))
        })
    }

    fn load_step(&self, source: &ComponentSource) -> Result<bindings::StepPre<LoadState>, String> {
        self.prepared(
            PipelineKind::Load,
            source,
            &self.load_steps,
            &self.load_linker,
            bindings::StepPre::new,
        )
    }

    fn daily_step(
        &self,
        source: &ComponentSource,
    ) -> Result<daily_bindings::DailyStepPre<DailyState>, String> {
        self.prepared(
            PipelineKind::Daily,
            source,
            &self.daily_steps,
            &self.daily_linker,
            daily_bindings::DailyStepPre::new,
        )
    }

    /// A fresh store for one run of `step`, with its limits and grants.
    fn sandbox<D: ?Sized>(&self, step: &Step, data: Arc<D>, job: &str) -> Store<StepState<D>> {
        let state = StepState {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limits: StepLimits {
                memory_bytes: usize::try_from(step.memory_limit_bytes).unwrap_or(usize::MAX),
                refused: false,
            },
            grants: step.grants.clone(),
            data,
            step: step.name.clone(),
            job: job.to_string(),
            logged_bytes: 0,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        let ticks = step.time_limit_ms.div_ceil(TICK.as_millis() as u64).max(1);
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        store
    }

    /// Runs one load step in a fresh store. Blocks: call it from a blocking thread.
    pub fn run_step(
        &self,
        step: &Step,
        context: &StepContext,
        data: Arc<dyn LoadData>,
    ) -> Result<StepVerdict, StepError> {
        let pre = self
            .load_step(&step.component)
            .map_err(|message| StepError::Component {
                step: step.name.clone(),
                message,
            })?;
        let mut store = self.sandbox(step, data, &context.load_id);
        let context = types::LoadContext {
            load_id: context.load_id.clone(),
            org: context.org.clone(),
            zone: context.zone.clone(),
            table_name: context.table_name.clone(),
            load_as_service_client_id: context.load_as_service_client_id.clone(),
            partitions: context.partitions.clone(),
            check_sum: context.check_sum.clone(),
            allowed_service_clients: context.allowed_service_clients.clone(),
            any_service_client: context.any_service_client,
        };
        let called = pre
            .instantiate(&mut store)
            .and_then(|instance| instance.call_run(&mut store, &context, &step.config_json));
        verdict(step, &store, called, Some(LOAD_ERROR_TYPES))
    }

    /// Runs one daily-run step in a fresh store. Blocks: call it from a
    /// blocking thread.
    pub fn run_daily_step(
        &self,
        step: &Step,
        context: &RunContext,
        data: Arc<dyn DailyData>,
    ) -> Result<StepVerdict, StepError> {
        let pre = self
            .daily_step(&step.component)
            .map_err(|message| StepError::Component {
                step: step.name.clone(),
                message,
            })?;
        let mut store = self.sandbox(step, data, &context.execution_name);
        let context = types::RunContext {
            execution_name: context.execution_name.clone(),
            org: context.org.clone(),
            lake_database: context.lake_database.clone(),
            insights_database: context.insights_database.clone(),
            scheduled: context.scheduled,
        };
        let called = pre
            .instantiate(&mut store)
            .and_then(|instance| instance.call_run(&mut store, &context, &step.config_json));
        verdict(step, &store, called, None)
    }

    /// Runs the manifest's steps in order until one fails the load.
    pub fn run_pipeline(
        &self,
        manifest: &Manifest,
        context: &StepContext,
        data: Arc<dyn LoadData>,
    ) -> Result<PipelineOutcome, StepError> {
        for step in &manifest.steps {
            if let Some((error_type, items)) = self.run_step(step, context, data.clone())? {
                return Ok(PipelineOutcome::Failed {
                    step: step.name.clone(),
                    error_type,
                    items,
                });
            }
        }
        Ok(PipelineOutcome::Passed)
    }
}

fn world(kind: PipelineKind) -> &'static str {
    match kind {
        PipelineKind::Load => "step",
        PipelineKind::Daily => "daily-step",
    }
}

/// What a step's call came to: its verdict, or why it gave none (time limit,
/// memory limit, trap, an error it reported). A FAIL must name one of
/// `error_types` (when given); its report is kept to `MAX_REPORT_ITEMS`
/// items of at most `MAX_REPORT_TEXT_BYTES` each.
fn verdict<D: ?Sized>(
    step: &Step,
    store: &Store<StepState<D>>,
    called: wasmtime::Result<Result<types::Outcome, String>>,
    error_types: Option<&[&str]>,
) -> Result<StepVerdict, StepError> {
    match called {
        Ok(Ok(types::Outcome::Pass)) => Ok(None),
        Ok(Ok(types::Outcome::Fail(failure))) => {
            if error_types.is_some_and(|known| !known.contains(&failure.error_type.as_str())) {
                return Err(StepError::UnknownErrorType {
                    step: step.name.clone(),
                    error_type: cut(failure.error_type, 64),
                });
            }
            let total = failure.items.len();
            let mut items: Vec<ErrorItem> = failure
                .items
                .into_iter()
                .take(MAX_REPORT_ITEMS)
                .map(|i| ErrorItem {
                    error_type: cut(i.error_type, 64),
                    error_message: cut(i.error_message, MAX_REPORT_TEXT_BYTES),
                    check_result: i.check_result.map(|c| cut(c, 16)),
                })
                .collect();
            if total > MAX_REPORT_ITEMS {
                items.push(ErrorItem {
                    error_type: "TRUNCATED".into(),
                    error_message: format!(
                        "step {} reported {total} items; the first {MAX_REPORT_ITEMS} are shown",
                        step.name
                    ),
                    check_result: None,
                });
            }
            Ok(Some((failure.error_type, items)))
        }
        Ok(Err(message)) => Err(StepError::Reported {
            step: step.name.clone(),
            message,
        }),
        Err(error) => {
            if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                Err(StepError::TimeLimit {
                    step: step.name.clone(),
                    limit_ms: step.time_limit_ms,
                })
            } else if store.data().limits.refused {
                Err(StepError::MemoryLimit {
                    step: step.name.clone(),
                    limit_bytes: step.memory_limit_bytes,
                })
            } else {
                Err(StepError::Trapped {
                    step: step.name.clone(),
                    message: format!("{error:#}"),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The engine against the real built-in components, with a fixed
    //! `LoadData` standing in for a load (the data side has its own tests).

    use super::*;
    use crate::pipeline::{StagedFileInfo, manifest::Manifest};

    /// A load of two uploaded files whose columns and SQL answers are given.
    struct FixedLoad {
        files: Vec<StagedFileInfo>,
        columns: Result<Vec<ColumnInfo>, String>,
        answer: Vec<Vec<Option<String>>>,
        appended: Mutex<u32>,
    }

    impl FixedLoad {
        fn new() -> Self {
            Self {
                files: vec![StagedFileInfo {
                    file_key: "part_1".into(),
                    size_bytes: 10,
                    uploaded: true,
                }],
                columns: Ok(vec![
                    column("trip_id", "bigint"),
                    column("service_client_id", "bigint"),
                ]),
                answer: vec![vec![Some("100".into())]],
                appended: Mutex::new(0),
            }
        }
    }

    fn column(name: &str, sql_type: &str) -> ColumnInfo {
        ColumnInfo {
            name: name.into(),
            sql_type: sql_type.into(),
            nullable: true,
        }
    }

    impl LoadData for FixedLoad {
        fn list_files(&self) -> Result<Vec<StagedFileInfo>, String> {
            Ok(self.files.clone())
        }
        fn parquet_columns(&self, _file_key: &str) -> Result<Vec<ColumnInfo>, String> {
            self.columns.clone()
        }
        fn query(&self, _sql: &str, _max_rows: u32) -> Result<Vec<Vec<Option<String>>>, String> {
            Ok(self.answer.clone())
        }
        fn table_columns(&self) -> Result<Option<Vec<ColumnInfo>>, String> {
            Ok(None)
        }
        fn append_staged(&self) -> Result<u64, String> {
            *self.appended.lock().unwrap() += 1;
            Ok(100)
        }
    }

    fn step(component: &str, grants: &[&str], extra: &str) -> Step {
        let grants = grants
            .iter()
            .map(|g| format!("\"{g}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "version = 1\n[[steps]]\nname = \"s\"\ncomponent = \"builtin:{component}\"\ngrants = [{grants}]\n{extra}"
        );
        Manifest::parse(
            PipelineKind::Load,
            &text,
            "test.toml",
            std::path::Path::new("."),
        )
        .unwrap()
        .steps
        .remove(0)
    }

    fn engine() -> Arc<PipelineEngine> {
        PipelineEngine::shared().expect("engine")
    }

    fn context() -> StepContext {
        StepContext {
            load_id: "l1".into(),
            table_name: "trips".into(),
            check_sum: vec![("count(*)".into(), "100".into())],
            any_service_client: true,
            ..StepContext::default()
        }
    }

    #[test]
    fn a_step_that_loops_forever_is_stopped_by_its_time_limit() {
        let result = engine().run_step(
            &step("loop_forever", &[], "time_limit_ms = 200\n"),
            &context(),
            Arc::new(FixedLoad::new()),
        );
        assert_eq!(
            result,
            Err(StepError::TimeLimit {
                step: "s".into(),
                limit_ms: 200
            })
        );
    }

    #[test]
    fn a_step_that_grows_without_bound_is_stopped_by_its_memory_limit() {
        let result = engine().run_step(
            &step("grow_memory", &[], "memory_limit_bytes = 33554432\n"),
            &context(),
            Arc::new(FixedLoad::new()),
        );
        assert_eq!(
            result,
            Err(StepError::MemoryLimit {
                step: "s".into(),
                limit_bytes: 32 << 20
            })
        );
    }

    /// A step writing 64 lines of a megabyte each leaves at most its log
    /// budget in the server's log.
    #[test]
    fn a_step_flooding_the_log_is_held_to_its_budget() {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let verdict = tracing::subscriber::with_default(subscriber, || {
            engine().run_step(
                &step(
                    "misbehave",
                    &["log"],
                    "[steps.config]\nhow = \"flood_logs\"\n",
                ),
                &context(),
                Arc::new(FixedLoad::new()),
            )
        });
        assert!(matches!(verdict, Ok(None)), "{verdict:?}");
        let logged = captured.0.lock().unwrap().len();
        assert!(
            (LOG_BUDGET_BYTES..LOG_BUDGET_BYTES + 8 * 1024).contains(&logged),
            "{logged} bytes logged"
        );
    }

    #[test]
    fn an_ungranted_import_answers_an_error_and_no_data() {
        let load = Arc::new(FixedLoad::new());
        let (_, items) = engine()
            .run_step(&step("ungranted_import", &[], ""), &context(), load.clone())
            .unwrap()
            .expect("the test step always reports");
        for item in &items {
            assert!(
                item.error_message.contains("not granted"),
                "{}",
                item.error_message
            );
        }
        assert_eq!(*load.appended.lock().unwrap(), 0, "append never ran");

        // Granted, the same calls reach the data.
        let (_, items) = engine()
            .run_step(
                &step(
                    "ungranted_import",
                    &["staged-files", "staged-sql", "lake-schema", "lake-append"],
                    "",
                ),
                &context(),
                load.clone(),
            )
            .unwrap()
            .unwrap();
        assert!(
            items.iter().all(|i| i.error_message.contains(": data ")),
            "{items:?}"
        );
        assert_eq!(*load.appended.lock().unwrap(), 1);
    }

    #[test]
    fn validate_parquet_reports_missing_files_and_bad_columns() {
        let validate = |load: FixedLoad| {
            engine().run_step(
                &step("validate_parquet", &["staged-files"], ""),
                &context(),
                Arc::new(load),
            )
        };
        let mut load = FixedLoad::new();
        load.files[0].uploaded = false;
        let (error_type, items) = validate(load).unwrap().unwrap();
        assert_eq!(error_type, "NoFilesUploaded");
        assert!(items.iter().all(|i| i.error_type == "MISSING_FILE"));

        let mut load = FixedLoad::new();
        load.columns = Ok(vec![column("Trip-Id", "bigint")]);
        let (error_type, items) = validate(load).unwrap().unwrap();
        assert_eq!(error_type, "ParquetValidation");
        assert_eq!(items[0].error_type, "INVALID_PARQUET");

        let mut load = FixedLoad::new();
        load.columns = Err("not a parquet file".into());
        let (error_type, _) = validate(load).unwrap().unwrap();
        assert_eq!(error_type, "ParquetValidation");

        assert_eq!(validate(FixedLoad::new()), Ok(None));
    }

    #[test]
    fn verify_checksums_names_the_aggregate_and_both_values() {
        let mut context = context();
        context.check_sum = vec![("count(*)".into(), "99".into())];
        let (error_type, items) = engine()
            .run_step(
                &step("verify_checksums", &["staged-sql"], ""),
                &context,
                Arc::new(FixedLoad::new()),
            )
            .unwrap()
            .unwrap();
        assert_eq!(error_type, "CheckSumError");
        assert_eq!(
            items,
            [ErrorItem {
                error_type: "CHECKSUM_MISMATCH".into(),
                error_message: "Checksum mismatch for count(*): expected 99, actual 100".into(),
                check_result: Some("FAIL".into()),
            }]
        );
    }

    #[test]
    fn the_default_pipeline_passes_a_good_load_and_appends_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
        let manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
        let load = Arc::new(FixedLoad::new());
        let outcome = engine()
            .run_pipeline(&manifest, &context(), load.clone())
            .unwrap();
        assert_eq!(outcome, PipelineOutcome::Passed);
        assert_eq!(*load.appended.lock().unwrap(), 1);
    }
}
