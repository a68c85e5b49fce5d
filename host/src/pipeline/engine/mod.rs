//! The wasmtime side of the pipelines: the one place that runs `bindgen!`
//! (for the `step` world of loads and the `daily-step` world of daily runs,
//! which shares its `types` and `log` interfaces), and the engine that runs
//! one step of either world.
//!
//! - **One engine per process** ([`PipelineEngine::shared`]), serving every
//!   server of the process, with the thread that ticks its epoch.
//! - **Compiled once** (`components.rs`): a run only instantiates; a restart
//!   loads the compiled forms the last one kept, within a budget
//!   (`compiled_on_disk.rs`).
//! - **Pinned for a run**: a commit (and a daily run) takes every step's
//!   component before its first step, so a file swapped meanwhile changes
//!   only the runs that begin after it.
//! - **A box per run** (`sandbox.rs`): a fresh `Store`, a time limit by epoch
//!   interruption, a memory limit, an empty WASI context but for a stderr
//!   whose end is told with a trap (`stderr.rs`). Its instance comes
//!   from a pool of reused slots (`engine_config`): about 23 µs to
//!   instantiate, run and drop a step that ends at once.
//! - **Stopped wherever it is** (`interrupt.rs`): at its time limit or its
//!   run's stop, in its own code or in a capability call the host is running.
//! - **Capabilities** (`imports.rs`): every WIT import is linked, but each one
//!   first checks the step's grants and answers `not-granted` instead of data.
//! - **What comes back is held** (`verdict.rs`): report items, ErrorTypes and
//!   text are bounded before anyone reads them.
//!
//! Which steps run, in which order and where a run stops is not this
//! module's: `sequence.rs` decides it for every caller. Nothing else in the
//! host may run `bindgen!` or create a wasmtime `Engine`.

use std::{
    collections::HashMap,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use wasmtime::{
    Config, Engine,
    component::{Component, HasSelf, Linker},
};

use super::{
    DailyData, LOAD_ERROR_TYPES, LoadData, PipelineKind, PipelineOutcome, RunContext, RunControl,
    StepContext, StepError, StepJudgement, StepVerdict, Stopped, builtin,
    manifest::{ComponentSource, Manifest, Step},
    run_steps_blocking,
};

mod compiled_on_disk;
mod components;
mod imports;
mod instantiation;
mod interrupt;
mod sandbox;
mod stderr;
#[cfg(test)]
mod tests;
mod verdict;

use compiled_on_disk::{CompiledOnDisk, Readied};
use components::ComponentCache;
pub use components::{ComponentError, SharedCause};
use instantiation::instantiate_in_fresh_store;
use sandbox::{DailyState, LoadState, TICK};
use verdict::{log_step_ran, verdict};

// Every import may trap: a capability call ends its step when the step's
// time limit passes or its run is stopped while the host works on it.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "step",
        imports: { default: trappable },
    });
}

mod daily_bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "daily-step",
        imports: { default: trappable },
        with: {
            "lakehost:pipeline/types": super::bindings::lakehost::pipeline::types,
            "lakehost:pipeline/log": super::bindings::lakehost::pipeline::log,
        },
    });
}

use bindings::lakehost::pipeline::types;

/// Step instances at once in this process (all pipelines, all servers of
/// the process): the pool's slots, reserved (as virtual memory) when the
/// engine starts. A step beyond them fails to instantiate, as an internal
/// error of that step.
const POOLED_STEP_INSTANCES: u32 = 256;

/// What a pooled linear memory keeps mapped after its instance ends, reset
/// by `memset` instead of returned to the kernel and faulted in again: the
/// built-in steps (64 KiB stacks) fit in it whole.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// The engine's settings: components, epoch interruption for the time
/// limits, and (`pooled`) instances from a pool of slots that are reused,
/// which makes a step's instantiate + run + drop about 3 times cheaper
/// (bench/README.md "Step overhead").
fn engine_config(pooled: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    // Time limits: the guest checks the epoch at loop heads and calls.
    config.epoch_interruption(true);
    if pooled {
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        pool.total_component_instances(POOLED_STEP_INSTANCES)
            .total_memories(POOLED_STEP_INSTANCES)
            .total_tables(POOLED_STEP_INSTANCES * 4)
            .total_core_instances(POOLED_STEP_INSTANCES * 8)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// A daily manifest's components, taken when its run began
/// ([`PipelineEngine::pin_daily_steps`]).
pub struct PinnedDailySteps(HashMap<String, daily_bindings::DailyStepPre<DailyState>>);

/// Each step's component of `manifest`, by step name, through `load`; the
/// first that cannot be had is the run's error, before any step ran.
fn pin<P>(
    manifest: &Manifest,
    load: impl Fn(&ComponentSource) -> Result<P, ComponentError>,
) -> Result<HashMap<String, P>, StepError> {
    manifest
        .steps
        .iter()
        .map(|step| {
            load(&step.component)
                .map(|pre| (step.name.clone(), pre))
                .map_err(|source| unloadable(step, source))
        })
        .collect()
}

/// A step of a run that is not among its pinned ones (a manifest other
/// than the one pinned): an error of the host, never a step run unpinned.
fn not_pinned(step: &Step) -> StepError {
    unloadable(step, ComponentError::NotPinned)
}

/// Why `step`'s component could not be had, naming it.
fn unloadable(step: &Step, source: ComponentError) -> StepError {
    StepError::Component {
        step: step.name.clone(),
        component: step.component.to_string(),
        source,
    }
}

/// The process's WebAssembly engine did not start (kept: every later ask
/// gets the same answer).
#[derive(Debug, Clone, thiserror::Error)]
#[error("starting the WebAssembly engine: {0:#}")]
pub struct EngineStartError(#[source] SharedCause);

/// Compiles and runs steps. One per process ([`PipelineEngine::shared`]).
pub struct PipelineEngine {
    engine: Engine,
    load_linker: Linker<LoadState>,
    daily_linker: Linker<DailyState>,
    load_steps: ComponentCache<bindings::StepPre<LoadState>>,
    daily_steps: ComponentCache<daily_bindings::DailyStepPre<DailyState>>,
    /// Where compiled forms outlive the process, within a budget (set by
    /// the first server or tool: `keep_compiled_*` in `compiled_on_disk.rs`).
    compiled_on_disk: OnceLock<CompiledOnDisk>,
    /// Components compiled, and loaded compiled from disk, by this process.
    compiled: AtomicUsize,
    loaded: AtomicUsize,
}

impl std::fmt::Debug for PipelineEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PipelineEngine")
    }
}

impl PipelineEngine {
    /// The process's engine, created on first use (with its epoch thread).
    pub fn shared() -> Result<Arc<Self>, EngineStartError> {
        static SHARED: OnceLock<Result<Arc<PipelineEngine>, EngineStartError>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                Self::new()
                    .map(Arc::new)
                    .map_err(|e| EngineStartError(SharedCause::of_wasmtime(e)))
            })
            .clone()
    }

    fn new() -> wasmtime::Result<Self> {
        let engine = match Engine::new(&engine_config(true)) {
            Ok(engine) => engine,
            Err(e) => {
                tracing::warn!(
                    error = %format!("{e:#}"),
                    "no pool of step instances (a virtual memory limit?): steps are instantiated on demand, about 3 times slower"
                );
                Engine::new(&engine_config(false))?
            }
        };
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
            compiled_on_disk: OnceLock::new(),
            compiled: AtomicUsize::new(0),
            loaded: AtomicUsize::new(0),
        })
    }

    /// `wasm` compiled for this engine: from the folder of compiled forms
    /// when it holds this one, else compiled now (and kept there).
    fn compile(&self, wasm: &[u8]) -> wasmtime::Result<Component> {
        let (component, readied) = match self.compiled_on_disk.get() {
            Some(on_disk) => on_disk.component(&self.engine, wasm)?,
            None => (Component::new(&self.engine, wasm)?, Readied::Compiled),
        };
        match readied {
            Readied::Compiled => &self.compiled,
            Readied::Loaded => &self.loaded,
        }
        .fetch_add(1, Ordering::Relaxed);
        Ok(component)
    }

    /// Whether `source` is a usable step of a `kind` pipeline: it compiles,
    /// and its imports and exports match the pipeline's world.
    pub fn check_step(
        &self,
        kind: PipelineKind,
        source: &ComponentSource,
    ) -> Result<(), ComponentError> {
        match kind {
            PipelineKind::Load => self.load_step(source).map(drop),
            PipelineKind::Daily => self.daily_step(source).map(drop),
        }
    }

    /// Compiles every built-in component now (or loads it compiled from
    /// disk), so no run waits for it; logs how many of each and how long.
    pub fn precompile_builtins(&self) -> Result<(), ComponentError> {
        let began = Instant::now();
        let before = (
            self.compiled.load(Ordering::Relaxed),
            self.loaded.load(Ordering::Relaxed),
        );
        for (name, kind) in builtin::names() {
            self.check_step(kind, &ComponentSource::Builtin(name.to_string()))?;
        }
        tracing::info!(
            compiled = self.compiled.load(Ordering::Relaxed) - before.0,
            loaded_compiled = self.loaded.load(Ordering::Relaxed) - before.1,
            ms = began.elapsed().as_millis() as u64,
            "built-in pipeline steps ready"
        );
        Ok(())
    }

    /// Runs one load step in a fresh store, its capability calls on
    /// `control`'s runtime. Blocks: call it from a blocking thread.
    pub fn run_step(
        &self,
        step: &Step,
        context: &StepContext,
        data: Arc<dyn LoadData>,
        control: &RunControl,
    ) -> Result<StepVerdict, StepError> {
        let pre = self
            .load_step(&step.component)
            .map_err(|source| unloadable(step, source))?;
        self.run_load_pre(&pre, step, context, data, control)
    }

    fn run_load_pre(
        &self,
        pre: &bindings::StepPre<LoadState>,
        step: &Step,
        context: &StepContext,
        data: Arc<dyn LoadData>,
        control: &RunControl,
    ) -> Result<StepVerdict, StepError> {
        let sandbox = || self.sandbox(step, data.clone(), &context.load_id, control);
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
        let began = Instant::now();
        let (mut store, instance) =
            instantiate_in_fresh_store(sandbox, |store| pre.instantiate(store));
        let called = instance
            .and_then(|instance| instance.call_run(&mut store, &context, &step.config_json));
        let verdict = verdict(step, &store, called, Some(LOAD_ERROR_TYPES));
        log_step_ran(&store, began, &verdict);
        verdict
    }

    /// Runs one daily-run step in a fresh store, its capability calls on
    /// `control`'s runtime. Blocks: call it from a blocking thread.
    pub fn run_daily_step(
        &self,
        step: &Step,
        context: &RunContext,
        data: Arc<dyn DailyData>,
        control: &RunControl,
    ) -> Result<StepVerdict, StepError> {
        let pre = self
            .daily_step(&step.component)
            .map_err(|source| unloadable(step, source))?;
        self.run_daily_pre(&pre, step, context, data, control)
    }

    /// Every step's component of a daily manifest, compiled (or found
    /// compiled), for a run that begins: it keeps them to its end, whatever
    /// replaces their files meanwhile. Blocks when one must be compiled.
    pub fn pin_daily_steps(&self, manifest: &Manifest) -> Result<PinnedDailySteps, StepError> {
        pin(manifest, |source| self.daily_step(source)).map(PinnedDailySteps)
    }

    /// Runs one daily-run step with the component pinned for its run.
    /// Blocks: call it from a blocking thread.
    pub fn run_pinned_daily_step(
        &self,
        pinned: &PinnedDailySteps,
        step: &Step,
        context: &RunContext,
        data: Arc<dyn DailyData>,
        control: &RunControl,
    ) -> Result<StepVerdict, StepError> {
        let pre = pinned.0.get(&step.name).ok_or_else(|| not_pinned(step))?;
        self.run_daily_pre(pre, step, context, data, control)
    }

    fn run_daily_pre(
        &self,
        pre: &daily_bindings::DailyStepPre<DailyState>,
        step: &Step,
        context: &RunContext,
        data: Arc<dyn DailyData>,
        control: &RunControl,
    ) -> Result<StepVerdict, StepError> {
        let sandbox = || self.sandbox(step, data.clone(), &context.execution_name, control);
        let context = types::RunContext {
            execution_name: context.execution_name.clone(),
            org: context.org.clone(),
            lake_database: context.lake_database.clone(),
            insights_database: context.insights_database.clone(),
            scheduled: context.scheduled,
        };
        let began = Instant::now();
        let (mut store, instance) =
            instantiate_in_fresh_store(sandbox, |store| pre.instantiate(store));
        let called = instance
            .and_then(|instance| instance.call_run(&mut store, &context, &step.config_json));
        let verdict = verdict(step, &store, called, None);
        log_step_ran(&store, began, &verdict);
        verdict
    }

    /// Runs the manifest's steps in order until one fails the load. Blocks:
    /// call it from a blocking thread.
    pub fn run_pipeline(
        &self,
        manifest: &Manifest,
        context: &StepContext,
        data: Arc<dyn LoadData>,
        control: &RunControl,
    ) -> Result<PipelineOutcome, StepError> {
        self.run_pipeline_judged(manifest, context, data, control).0
    }

    /// [`run_pipeline`](Self::run_pipeline), and each step as it judged it.
    pub fn run_pipeline_judged(
        &self,
        manifest: &Manifest,
        context: &StepContext,
        data: Arc<dyn LoadData>,
        control: &RunControl,
    ) -> (Result<PipelineOutcome, StepError>, Vec<StepJudgement>) {
        // Every component is taken before the first step runs: the commit
        // keeps them to its end, whatever replaces their files meanwhile.
        let pinned = match pin(manifest, |source| self.load_step(source)) {
            Ok(pinned) => pinned,
            Err(error) => {
                // No step ran: the one whose component could not be had
                // says why.
                let judged = manifest
                    .steps
                    .iter()
                    .map(|step| StepJudgement {
                        name: step.name.clone(),
                        outcome: if error.step() == step.name {
                            "error"
                        } else {
                            "not run"
                        }
                        .into(),
                        ms: None,
                        message: (error.step() == step.name).then(|| error.to_string()),
                    })
                    .collect();
                return (Err(error), judged);
            }
        };
        let ran = run_steps_blocking(manifest, |step| {
            control.entering(&step.name);
            let pre = pinned.get(&step.name).ok_or_else(|| not_pinned(step))?;
            self.run_load_pre(pre, step, context, data.clone(), control)
        });
        let judged = ran.judgements(manifest);
        (Self::outcome(ran.stopped), judged)
    }

    fn outcome(
        stopped: Option<Stopped<std::convert::Infallible>>,
    ) -> Result<PipelineOutcome, StepError> {
        match stopped {
            None => Ok(PipelineOutcome::Passed),
            Some(Stopped::Failed {
                step,
                error_type,
                items,
            }) => Ok(PipelineOutcome::Failed {
                step,
                error_type,
                items,
            }),
            Some(Stopped::Error(error)) => Err(error),
            Some(Stopped::Halted(never)) => match never {},
        }
    }
}
