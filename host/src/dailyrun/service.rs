//! Starting and running daily-run executions.
//!
//! - **Start.** A manual start (POST /dailyRun/start_execution, whatever the
//!   flag) and a scheduled one (the org's `daily_run_schedule` when its flag
//!   is true) both insert a RUNNING execution; the store refuses a second
//!   RUNNING one per org and a second one per schedule slot, so with any
//!   number of replicas and requests one wins. The replica that inserted it
//!   runs it and holds it with a lease it renews.
//! - **Run.** The steps of the org's `daily.toml` (or the default one) in
//!   order, each in its own sandbox on a blocking thread. A step that fails,
//!   traps or runs past its limits ends the run FAILED with the reason in
//!   `error`/`cause`; every step passing ends it SUCCEEDED. A run whose hold
//!   no longer holds (ended TIMED_OUT or ABORTED meanwhile) or whose server
//!   stops is dropped, and its running step stopped wherever it is.
//! - **Tick.** Every `dailyrun.tick_ms` (and once at startup) the scheduler
//!   ends RUNNING executions past `dailyrun.max_duration_s` TIMED_OUT and
//!   those whose server stopped renewing its hold (`dailyrun.lease_s`)
//!   ABORTED, then starts the scheduled runs that are due. A run that was
//!   RUNNING when its server died is therefore ended ABORTED (not resumed:
//!   its refreshes are not idempotent with respect to the data read) once
//!   its hold lapses, at the next start of any replica or tick.
//! - **Drain.** A draining replica starts no scheduled run; a run it still
//!   runs when the drain ends is stopped and ended ABORTED at once (for the
//!   same reason it is not handed over), so the next start need not wait for
//!   its hold to lapse.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use croner::Cron;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{schedule::due_slot, transform::LakeTransform};
use crate::{
    clock::SharedClock,
    config::{Config, DailyRunConfig},
    drain::Drain,
    lake::Lake,
    lease::Lease,
    observability::jobs,
    periodic::spawn_every,
    pipeline::{
        PipelineEngine, PipelineKind, Pipelines, RunContext, RunControl, Stopped,
        deployed::{DeployError, Deployments},
        run_steps,
    },
    runtime::EngineRuntime,
    store::{
        self, Finished, Store,
        catalog::standard_databases,
        dailyrun::{DailyRun, NewDailyRun, RunEnd, RunStatus, StartOutcome},
    },
};

/// What a manual start came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartResult {
    Started(DailyRun),
    /// The org's RUNNING execution, which refused the start.
    AlreadyRunning(DailyRun),
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error("an execution named like the new one exists already")]
    NameTaken,
}

/// Starts, runs and watches the daily runs of this server's orgs.
pub struct DailyRunService {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    engine: Arc<PipelineEngine>,
    /// Where the steps' SQL runs.
    runtime: Arc<EngineRuntime>,
    config: DailyRunConfig,
    lease: Lease,
    /// Which manifest each org's runs run.
    deployments: Arc<Deployments>,
    schedules: Vec<(String, Cron)>,
    memory_limit: usize,
    /// Who holds the runs this server started.
    holder: String,
    /// Cancelled when the server stops: its runs are abandoned then (and end
    /// ABORTED once their hold lapses), like a crash.
    stop: CancellationToken,
    /// This replica's drain: no scheduled starts while it drains; runs
    /// still going at its end are ended ABORTED.
    drain: Drain,
}

impl std::fmt::Debug for DailyRunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DailyRunService")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl DailyRunService {
    /// `config` must have been validated (its schedules parse).
    pub fn new(
        store: Store,
        lake: Lake,
        clock: SharedClock,
        pipelines: Pipelines,
        config: &Config,
        (stop, drain): (CancellationToken, Drain),
    ) -> Arc<Self> {
        let schedules = config
            .orgs
            .iter()
            .filter_map(|org| {
                let cron = org.daily_run_schedule.parse::<Cron>().ok()?;
                Some((org.name.clone(), cron))
            })
            .collect();
        Arc::new(Self {
            store,
            lake,
            lease: Lease::new(clock.clone(), config.dailyrun.lease_s),
            clock,
            engine: pipelines.engine,
            runtime: pipelines.runtime,
            deployments: pipelines.deployments,
            config: config.dailyrun.clone(),
            schedules,
            memory_limit: usize::try_from(config.query.memory_limit_bytes).unwrap_or(usize::MAX),
            holder: format!("dailyrun-{}", store::new_id()),
            stop,
            drain,
        })
    }

    fn now(&self) -> i64 {
        self.lease.now()
    }

    /// The org's flag; `None` until it was first set.
    pub async fn flag(&self, org: &str) -> Result<Option<bool>, store::Error> {
        self.store.daily_run_flag(org).await
    }

    /// Switches the org's scheduled runs on or off.
    pub async fn set_flag(&self, org: &str, enabled: bool) -> Result<(), store::Error> {
        let now = self.clock.now().timestamp_micros();
        self.store.set_daily_run_flag(org, enabled, now).await
    }

    /// The org's executions, newest first: at most `limit`, only SUCCEEDED
    /// ones when `succeeded_only`.
    pub async fn executions(
        &self,
        org: &str,
        limit: u32,
        succeeded_only: bool,
    ) -> Result<Vec<DailyRun>, store::Error> {
        self.store.daily_runs(org, limit, succeeded_only).await
    }

    /// POST /dailyRun/start_execution: starts a run now unless one is RUNNING.
    /// A name is the start to the microsecond; when a run that has already
    /// ended holds it (two starts in one microsecond, or a clock that stands
    /// still), the start moves on a microsecond, a few times at most.
    pub async fn start_manual(self: &Arc<Self>, org: &str) -> Result<StartResult, StartError> {
        const NAME_ATTEMPTS: i64 = 16;
        let now = self.clock.now();
        for step in 0..NAME_ATTEMPTS {
            let at = now + chrono::Duration::microseconds(step);
            match self.start(org, at, None).await? {
                StartOutcome::Started(run) => return Ok(StartResult::Started(run)),
                StartOutcome::AlreadyRunning(run) => return Ok(StartResult::AlreadyRunning(run)),
                StartOutcome::Taken => continue,
            }
        }
        Err(StartError::NameTaken)
    }

    /// Inserts a RUNNING execution and, when that won, runs it in the background.
    async fn start(
        self: &Arc<Self>,
        org: &str,
        at: DateTime<Utc>,
        scheduled_for: Option<i64>,
    ) -> Result<StartOutcome, store::Error> {
        let name = super::execution_name(org, at);
        let started_at = at.timestamp_micros();
        let max_duration = i64::try_from(self.config.max_duration_s)
            .unwrap_or(i64::MAX / 2_000_000)
            .saturating_mul(1_000_000);
        let outcome = self
            .store
            .start_daily_run(&NewDailyRun {
                name: &name,
                org,
                scheduled_for,
                started_at,
                deadline_at: started_at.saturating_add(max_duration),
                holder: &self.holder,
                lease_until: self.lease.until(),
            })
            .await?;
        if let StartOutcome::Started(run) = &outcome {
            jobs::daily_run_started(&run.name, scheduled_for.is_some());
            let service = self.clone();
            let run = run.clone();
            let counted = self.drain.running_job();
            // In the starting request's span, if any: the run's lines carry its id.
            tokio::spawn(
                async move {
                    let _counted = counted;
                    tokio::select! {
                        _ = service.stop.cancelled() => {}
                        _ = service.run(&run) => {}
                        () = service.drain.handing_back() => service.abort_for_drain(&run).await,
                    }
                }
                .in_current_span(),
            );
        }
        Ok(outcome)
    }

    /// Runs the scheduler until the server stops: a tick now, then every `tick_ms`.
    pub fn start_scheduler(self: &Arc<Self>) {
        let service = self.clone();
        let every = Duration::from_millis(self.config.tick_ms);
        spawn_every(every, self.stop.clone(), move || {
            let service = service.clone();
            async move {
                if let Err(e) = service.tick().await {
                    tracing::warn!(error = %e, "daily-run scheduler tick failed");
                }
            }
        });
    }

    /// One pass of the scheduler: end overdue and orphaned runs, then start
    /// the scheduled runs that are due.
    pub async fn tick(self: &Arc<Self>) -> Result<(), store::Error> {
        for run in self.store.end_stale_daily_runs(self.now()).await? {
            jobs::daily_run_ended(&run.name, run.status, None);
        }
        let now = self.clock.now();
        let catch_up = chrono::Duration::seconds(
            i64::try_from(self.config.catch_up_s).unwrap_or(i64::MAX / 1000),
        );
        for (org, schedule) in &self.schedules {
            if self.drain.is_draining() {
                break;
            }
            let Some(slot) = due_slot(schedule, now, catch_up) else {
                continue;
            };
            if self.store.daily_run_flag(org).await? != Some(true) {
                continue;
            }
            match self.start(org, now, Some(slot.timestamp_micros())).await? {
                StartOutcome::Started(_) | StartOutcome::Taken => {}
                StartOutcome::AlreadyRunning(running) => tracing::debug!(
                    execution = %running.name,
                    "scheduled daily run waits for the running one"
                ),
            }
        }
        Ok(())
    }

    /// Runs an execution's steps while renewing its hold, then records the
    /// end; stops them as soon as the hold no longer holds.
    async fn run(&self, run: &DailyRun) {
        let held = self
            .lease
            .hold_while_held(&run.name, self.steps(run), |until| {
                self.store.renew_daily_run(&run.name, &self.holder, until)
            })
            .await;
        let Some(end) = held else {
            tracing::warn!(
                execution = %run.name,
                "daily run ended elsewhere (timed out or aborted); its steps were stopped"
            );
            return;
        };
        match self
            .store
            .finish_daily_run(&run.name, &self.holder, &end, self.now())
            .await
        {
            Ok(Finished::Recorded) => {
                jobs::daily_run_ended(&run.name, end.status, end.cause.as_deref())
            }
            Ok(Finished::Lost) => tracing::warn!(
                execution = %run.name,
                "daily run had already ended (timed out or aborted)"
            ),
            Err(e) => tracing::error!(
                execution = %run.name,
                error = %e,
                "recording the end of a daily run failed; it ends ABORTED when its hold lapses"
            ),
        }
    }

    /// Ends ABORTED a run the drain stopped (its steps were dropped).
    async fn abort_for_drain(&self, run: &DailyRun) {
        let end = RunEnd {
            status: RunStatus::Aborted,
            error: Some("Aborted".into()),
            cause: Some("the server running it was stopped (drained) before the run ended".into()),
        };
        match self
            .store
            .finish_daily_run(&run.name, &self.holder, &end, self.now())
            .await
        {
            Ok(_) => {
                tracing::warn!(execution = %run.name, "daily run ended ABORTED: the server drains")
            }
            Err(e) => tracing::error!(
                execution = %run.name,
                error = %e,
                "recording a drained daily run failed; it ends ABORTED when its hold lapses"
            ),
        }
    }

    /// The run's steps in order; how the run ends.
    async fn steps(&self, run: &DailyRun) -> RunEnd {
        let failed = |error: &str, cause: String| RunEnd {
            status: RunStatus::Failed,
            error: Some(error.to_string()),
            cause: Some(cause),
        };
        let manifest = match self
            .deployments
            .manifest_for(PipelineKind::Daily, &run.org, None)
            .await
        {
            Ok(judged) => judged.manifest,
            Err(e @ DeployError::Files(_)) => return failed("ManifestError", e.to_string()),
            Err(e) => return failed("InternalError", format!("the run's pipeline: {e}")),
        };
        // Every component is taken before the first step: the run keeps
        // them to its end, whatever replaces their files meanwhile.
        let pinned = {
            let (engine, manifest) = (self.engine.clone(), manifest.clone());
            match tokio::task::spawn_blocking(move || engine.pin_daily_steps(&manifest)).await {
                Ok(Ok(pinned)) => Arc::new(pinned),
                Ok(Err(e)) => return failed("InternalError", e.to_string()),
                Err(e) => return failed("InternalError", format!("pinning the steps: {e}")),
            }
        };
        let databases = standard_databases(&run.org, None);
        let context = RunContext {
            execution_name: run.name.clone(),
            org: run.org.clone(),
            lake_database: databases.lake,
            insights_database: databases.insights,
            scheduled: run.scheduled_for.is_some(),
        };
        let data = Arc::new(LakeTransform {
            store: self.store.clone(),
            lake: self.lake.clone(),
            clock: self.clock.clone(),
            org: run.org.clone(),
            lake_database: context.lake_database.clone(),
            insights_database: context.insights_database.clone(),
            execution: run.name.clone(),
            holder: self.holder.clone(),
            memory_limit: self.memory_limit,
        });
        // Dropping this work (hold lost, server stopping) stops the running step.
        let stop = CancellationToken::new();
        let _stop_when_dropped = stop.clone().drop_guard();
        let control = RunControl::new(self.runtime.clone(), stop);
        let ran = run_steps(
            &manifest,
            // Stop between steps once the run was ended by someone else.
            move || async move {
                match self
                    .store
                    .renew_daily_run(&run.name, &self.holder, self.lease.until())
                    .await
                {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(failed("Ended", "the run ended before its last step".into())),
                    Err(e) => Err(failed("InternalError", format!("store: {e}"))),
                }
            },
            |step| {
                let (engine, pinned) = (self.engine.clone(), pinned.clone());
                let (step, context, data) = (step.clone(), context.clone(), data.clone());
                let control = control.clone();
                async move {
                    let name = step.name.clone();
                    tokio::task::spawn_blocking(move || {
                        engine.run_pinned_daily_step(&pinned, &step, &context, data, &control)
                    })
                    .await
                    .map_err(|e| {
                        failed("InternalError", format!("step {name}: thread failed: {e}"))
                    })
                }
            },
        )
        .await;
        match ran.stopped {
            None => RunEnd {
                status: RunStatus::Succeeded,
                error: None,
                cause: None,
            },
            Some(Stopped::Failed {
                step,
                error_type,
                items,
            }) => {
                let messages: Vec<&str> = items.iter().map(|i| i.error_message.as_str()).collect();
                failed(&error_type, format!("step {step}: {}", messages.join("; ")))
            }
            Some(Stopped::Error(step_error)) => failed("InternalError", step_error.to_string()),
            Some(Stopped::Halted(end)) => end,
        }
    }
}
