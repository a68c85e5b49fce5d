//! How a step is stopped from outside, wherever it is: when its time limit
//! passes, or when its run is stopped (the commit or daily run dropped, the
//! server stopping).
//!
//! - **In its own code**: every `TICK` the engine's epoch advances and the
//!   store's epoch callback looks at the clock and the run's stop token,
//!   trapping the guest with [`Interrupted`] once either says so.
//! - **In a capability call**: the host's work (SQL over the staged rows or
//!   the lake, a refresh) runs on the run's runtime raced against the same
//!   deadline and token; the one that comes first wins, and the work is
//!   dropped unfinished (DataFusion stops a query whose stream is dropped,
//!   and aborts the tasks it spawned), so a check_sum key that would run for
//!   an hour ends with the step's time limit like a step that loops.
//!
//! Either way the step ends with `Interrupted`, which `verdict.rs` reports
//! as the step's time limit or as stopped. It must never let a host call
//! outlive its step's deadline by more than one poll of its work.

use std::{future::Future, time::Instant};

use wasmtime::{Store, UpdateDeadline};

use super::sandbox::StepState;

/// Why a step was ended from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Interrupted {
    #[error("the step ran past its time limit")]
    TimeLimit,
    #[error("the step's run was stopped")]
    Stopped,
}

impl<D: ?Sized> StepState<D> {
    /// Why the step must end now, if it must.
    fn interruption(&self) -> Option<Interrupted> {
        if self.control.stop.is_cancelled() {
            Some(Interrupted::Stopped)
        } else if Instant::now() >= self.deadline {
            Some(Interrupted::TimeLimit)
        } else {
            None
        }
    }

    /// Runs a capability call's async work on the run's runtime until it
    /// ends, the step's deadline passes or its run is stopped, whichever
    /// comes first. Blocks the step's thread, as the guest waits anyway.
    pub(super) fn host_call<T>(&self, call: impl Future<Output = T>) -> Result<T, Interrupted> {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let stop = &self.control.stop;
        self.control.runtime.handle().block_on(async {
            tokio::select! {
                biased;
                _ = stop.cancelled() => Err(Interrupted::Stopped),
                _ = tokio::time::sleep_until(deadline) => Err(Interrupted::TimeLimit),
                answer = call => Ok(answer),
            }
        })
    }
}

/// Makes the store's guest trap with [`Interrupted`] at the first epoch
/// tick after its deadline passed or its run was stopped.
pub(super) fn interrupt_when_due<D: ?Sized + 'static>(store: &mut Store<StepState<D>>) {
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|context| match context.data().interruption() {
        Some(why) => Err(why.into()),
        None => Ok(UpdateDeadline::Continue(1)),
    });
}
