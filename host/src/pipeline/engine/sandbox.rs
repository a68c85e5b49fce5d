//! A step's box: what one run's `Store` holds, the memory limit, the epoch
//! deadline of the time limit, and the grant check every import makes first.
//!
//! - **A fresh `Store` per step run**: no state leaks from one load (or step)
//!   to the next.
//! - **Time limit and stop**: the step's deadline is `time_limit_ms` after
//!   its store was made; `interrupt.rs` ends the step there (or when its run
//!   is stopped), in its own code or in a capability call.
//! - **Memory limit by a `ResourceLimiter`** (like wasmtime's `StoreLimits`,
//!   but it remembers that it refused a growth, so the failure can say why).
//! - **WASI** is linked with an empty context: no files, no environment, no
//!   network, no inherited stdio; only clocks and randomness work.
//!
//! It must never give a step a file, a socket, a variable of the server's
//! environment or a store another run used.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use wasmtime::{ResourceLimiter, Store, component::ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{
    PipelineEngine, interrupt::interrupt_when_due, stderr::StderrTail, types::CapabilityError,
};
use crate::pipeline::{
    DailyData, LoadData, RunControl,
    manifest::{Capability, Step},
};

/// How often the epoch advances: how soon after its deadline (or its run's
/// stop) a step running its own code ends.
pub(super) const TICK: Duration = Duration::from_millis(10);

/// What one step run's store holds; `D` is the data side of its pipeline
/// (`dyn LoadData` or `dyn DailyData`).
pub(super) struct StepState<D: ?Sized> {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limits: StepLimits,
    pub(super) grants: BTreeSet<Capability>,
    pub(super) data: Arc<D>,
    pub(super) step: String,
    /// The load id or the daily-run execution name, for log lines.
    pub(super) job: String,
    /// What the step has logged so far, against `LOG_BUDGET_BYTES`.
    pub(super) logged_bytes: usize,
    /// Where its capability calls run, and what stops its run.
    pub(super) control: RunControl,
    /// When its time limit passes.
    pub(super) deadline: Instant,
    /// The end of what it wrote to stderr: told with a trap.
    pub(super) stderr: StderrTail,
}

pub(super) type LoadState = StepState<dyn LoadData>;
pub(super) type DailyState = StepState<dyn DailyData>;

impl<D: ?Sized + Send + Sync> WasiView for StepState<D> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Refuses memory growth past the step's limit, and remembers that it did
/// and the most the step's memories were allowed to grow to.
pub(super) struct StepLimits {
    memory_bytes: usize,
    pub(super) refused: bool,
    pub(super) peak_bytes: usize,
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
        self.peak_bytes = self.peak_bytes.max(desired);
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
    pub(super) fn grant(&self, capability: Capability) -> Result<(), CapabilityError> {
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

impl PipelineEngine {
    /// A fresh store for one run of `step`, with its limits and grants.
    pub(super) fn sandbox<D: ?Sized + 'static>(
        &self,
        step: &Step,
        data: Arc<D>,
        job: &str,
        control: &RunControl,
    ) -> Store<StepState<D>> {
        let stderr = StderrTail::default();
        let state = StepState {
            wasi: WasiCtxBuilder::new().stderr(stderr.clone()).build(),
            table: ResourceTable::new(),
            limits: StepLimits {
                memory_bytes: usize::try_from(step.memory_limit_bytes).unwrap_or(usize::MAX),
                refused: false,
                peak_bytes: 0,
            },
            grants: step.grants.clone(),
            data,
            step: step.name.clone(),
            job: job.to_string(),
            logged_bytes: 0,
            control: control.clone(),
            deadline: Instant::now() + Duration::from_millis(step.time_limit_ms),
            stderr,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        interrupt_when_due(&mut store);
        store
    }
}
