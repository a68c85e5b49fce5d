//! Load commits as durable jobs (spec "Load states": PROCESSING → SUCCESS or
//! FAIL). POST /load/{id}/commit only moves the load to PROCESSING; a worker
//! of any replica claims it with a lease, runs the org's pipeline manifest
//! over the staged files, and ends it in one transaction: SUCCESS together
//! with the new table and files in the catalog, or FAIL with the report.
//!
//! A crash at any moment leaves the load PROCESSING with no rows visible (the
//! files the insert step wrote are not in the catalog). The holder records
//! each step as it begins (`running_step`); when the lease of a dead holder
//! runs out, the worker that claims the load finds the step set and ends the
//! load FAIL naming it, without running it again: the step may be what
//! killed the replica, and must not kill the next one. A draining replica
//! instead hands its commits back (no holder, no step) when the drain ends,
//! and another worker runs them again from the start, at most
//! `pipeline.max_attempts` runs, then it fails with InternalError. The end
//! is conditional on holding the lease, so a load ends exactly once. Each
//! attempt names its files after itself (`<load>-a<attempt>-<n>.parquet`), so
//! an attempt that finds its lease taken deletes only its own files, never
//! the ones the next attempt recorded; the attempt that ends the load sweeps
//! the earlier ones'. Staged files are removed once the load ended. A commit
//! whose lease no longer holds stops, records nothing and deletes what it
//! wrote. Either way its running step stops at once, even inside a
//! capability call.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    delete_prefix,
    earlier_attempts::sweep_earlier_attempts,
    load_prefix, parts_prefix,
    shadow::Shadows,
    staged::{PendingAppend, StagedLoad, StagedTarget},
    staged_versions::StagedVersions,
    staging_path,
};
use crate::{
    auth::{AccessGrant, ServiceClientScope},
    clock::SharedClock,
    config::PipelineConfig,
    drain::Drain,
    engine::table_writer::delete_paths,
    lake::Lake,
    lease::Lease,
    observability::jobs,
    pipeline::{
        ErrorItem, PipelineEngine, PipelineKind, PipelineOutcome, Pipelines, RunControl,
        StepContext, StepMarker,
        deployed::{Deployments, Judged},
    },
    runtime::EngineRuntime,
    store::{
        Finished, Store,
        catalog::standard_databases,
        loads::{LoadEnd, LoadRecord, NewLoad},
    },
};

/// How often an idle worker looks for commits (a commit on this replica wakes
/// it at once).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Runs load commits.
pub struct LoadCommitter {
    store: Store,
    lake: Lake,
    engine: Arc<PipelineEngine>,
    /// Where the steps' SQL runs.
    runtime: Arc<EngineRuntime>,
    /// Which manifest each org's commits run, and what judged each load.
    deployments: Arc<Deployments>,
    /// The shadows running beside this replica's commits.
    shadows: Shadows,
    config: PipelineConfig,
    lease: Lease,
    holder: String,
    wake: Notify,
    /// This replica's drain: no claims while it drains, hand-backs at its end.
    drain: Drain,
}

impl std::fmt::Debug for LoadCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadCommitter")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

/// How a commit held under its lease came out.
enum Held {
    /// The pipeline ran to an end: record it.
    Ended(Box<(LoadEnd, Option<PendingAppend>)>),
    /// A renewal no longer held: another worker has it.
    Lost,
    /// The replica drains: give the commit back.
    HandedBack,
}

/// The FAIL message of a commit whose replica died during `step` (`""`:
/// before its first step).
fn died_during(step: &str) -> String {
    let during = if step.is_empty() {
        "before its first step".to_string()
    } else {
        format!("during step `{step}`")
    };
    format!(
        "the server running this commit stopped {during} (it was killed, ran out of memory or \
         crashed, or lost its metadata store for longer than its lease); the commit was not run \
         again, in case that was its cause, and none of its rows were written. Create a new \
         load to try again."
    )
}

fn internal(message: String) -> LoadEnd {
    fail(
        "InternalError",
        &[ErrorItem {
            error_type: "INTERNAL_ERROR".into(),
            error_message: message,
            check_result: None,
        }],
    )
}

fn fail(error_type: &str, items: &[ErrorItem]) -> LoadEnd {
    LoadEnd::Fail {
        error_type: error_type.to_string(),
        error_messages_json: serde_json::to_string(items).expect("items serialise"),
    }
}

impl LoadCommitter {
    pub fn new(
        store: Store,
        lake: Lake,
        clock: SharedClock,
        pipelines: Pipelines,
        config: PipelineConfig,
        drain: Drain,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            lake,
            lease: Lease::new(clock, config.lease_s),
            engine: pipelines.engine,
            runtime: pipelines.runtime,
            deployments: pipelines.deployments,
            shadows: Shadows::default(),
            config,
            holder: format!("commit-{}", crate::store::new_id()),
            wake: Notify::new(),
            drain,
        })
    }

    /// Tells an idle worker that a commit is waiting.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn now(&self) -> i64 {
        self.lease.now()
    }

    /// Starts `pipeline.commit_workers` workers until `stop` is cancelled;
    /// they claim nothing once the replica drains.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        for _ in 0..self.config.commit_workers {
            let committer = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    if committer.drain.is_draining() {
                        return;
                    }
                    let claimed = tokio::select! {
                        _ = stop.cancelled() => return,
                        claimed = committer.run_one() => claimed,
                    };
                    match claimed {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => tracing::warn!(error = %e, "claiming a load commit failed"),
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        () = committer.drain.began() => return,
                        _ = committer.wake.notified() => {}
                        _ = tokio::time::sleep(POLL_INTERVAL) => {}
                    }
                }
            });
        }
    }

    /// Claims and runs one waiting commit; false when there was none.
    pub async fn run_one(&self) -> Result<bool, crate::store::Error> {
        let Some(record) = self
            .store
            .claim_load_commit(
                &self.holder,
                self.now(),
                self.lease.until(),
                self.config.caps(),
            )
            .await?
        else {
            return Ok(false);
        };
        self.run(record).await;
        Ok(true)
    }

    async fn run(&self, record: LoadRecord) {
        let id = record.load.id.clone();
        let _counted = self.drain.running_job();
        jobs::load_commit_claimed(&id, record.attempts, record.running_step.is_some());
        let (end, pending) = if let Some(step) = &record.running_step {
            (internal(died_during(step)), None)
        } else if record.attempts > i64::from(self.config.max_attempts) {
            let message = format!(
                "the commit was handed back by stopping servers {} times and is not tried again",
                record.attempts - 1
            );
            (internal(message), None)
        } else {
            match self.pipeline_with_lease(&record).await {
                Held::Ended(ended) => *ended,
                Held::Lost => {
                    tracing::warn!(load = %id, "commit lost its lease; its steps were stopped and another worker runs it");
                    self.shadows.forget(&id);
                    return;
                }
                Held::HandedBack => {
                    self.shadows.forget(&id);
                    match self.store.hand_back_load(&id, &self.holder).await {
                        Ok(true) => {
                            tracing::info!(load = %id, "commit handed back: the server drains")
                        }
                        Ok(false) => {
                            tracing::info!(load = %id, "commit ended elsewhere while the server drained")
                        }
                        Err(e) => {
                            tracing::warn!(load = %id, error = %e, "commit not handed back; it ends FAIL when its lease runs out")
                        }
                    }
                    return;
                }
            }
        };
        let written: Vec<String> = pending
            .as_ref()
            .map(|p| p.files.iter().map(|f| f.path.clone()).collect())
            .unwrap_or_default();
        match self
            .store
            .finish_load(&id, &self.holder, &end, self.now())
            .await
        {
            Ok(Finished::Recorded) => {
                match &end {
                    LoadEnd::Success { .. } => jobs::load_ended(&id, None),
                    LoadEnd::Fail { error_type, .. } => jobs::load_ended(&id, Some(error_type)),
                }
                if matches!(end, LoadEnd::Fail { .. }) {
                    delete_paths(self.lake.object_store().as_ref(), &written).await;
                }
                // A shadow reads the staged files: they go once it ended,
                // in its own task, so this worker takes the next commit.
                let (lake, load) = (self.lake.clone(), record.load.clone());
                let removed = async move { remove_staged(&lake, &load).await };
                self.shadows
                    .settle_then(self.deployments.clone(), &id, &end, removed)
                    .await;
                sweep_earlier_attempts(&self.lake, &record).await;
            }
            Ok(Finished::Lost) => {
                tracing::warn!(load = %id, "commit lost its lease; another worker runs it");
                self.shadows.forget(&id);
                delete_paths(self.lake.object_store().as_ref(), &written).await;
            }
            Err(e) => {
                // Left PROCESSING: the lease runs out and the commit is run again.
                tracing::error!(load = %id, error = %e, "recording the end of a commit failed");
                self.shadows.forget(&id);
                delete_paths(self.lake.object_store().as_ref(), &written).await;
            }
        }
    }

    /// Runs the pipeline while renewing the lease, after recording that the
    /// commit runs (no step yet); the pipeline is dropped (its step stopped)
    /// once a renewal no longer holds or the drain wants it back.
    async fn pipeline_with_lease(&self, record: &LoadRecord) -> Held {
        let id = &record.load.id;
        match self.store.mark_load_step(id, &self.holder, "").await {
            Ok(true) => {}
            Ok(false) => return Held::Lost,
            Err(e) => return Held::Ended(Box::new((internal(format!("store: {e}")), None))),
        }
        let held = self
            .lease
            .hold_while_held(id, self.pipeline(record), |until| {
                self.store.renew_load_lease(id, &self.holder, until)
            });
        tokio::select! {
            held = held => held.map(|ended| Held::Ended(Box::new(ended))).unwrap_or(Held::Lost),
            () = self.drain.handing_back() => Held::HandedBack,
        }
    }

    /// Records each step of `record`'s commit as it begins (from the step's
    /// thread), so that a death is known to be in that step.
    fn step_marker(&self, record: &LoadRecord) -> StepMarker {
        let runtime = tokio::runtime::Handle::current();
        let store = self.store.clone();
        let (id, holder) = (record.load.id.clone(), self.holder.clone());
        Arc::new(move |step: &str| {
            if let Err(e) = runtime.block_on(store.mark_load_step(&id, &holder, step)) {
                tracing::warn!(load = %id, step, error = %e, "the commit's step was not recorded");
            }
        })
    }

    async fn pipeline(&self, record: &LoadRecord) -> (LoadEnd, Option<PendingAppend>) {
        let load = &record.load;
        let grant: AccessGrant = match record
            .access_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
        {
            Ok(Some(grant)) => grant,
            Ok(None) => return (internal("the commit has no caller access".into()), None),
            Err(e) => return (internal(format!("stored access: {e}")), None),
        };
        let check_sum: Vec<(String, String)> = match record
            .check_sum_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
        {
            Ok(Some(pairs)) => pairs,
            Ok(None) => Vec::new(),
            Err(e) => return (internal(format!("stored check_sum: {e}")), None),
        };
        let Judged { manifest, by } = match self
            .deployments
            .manifest_for(PipelineKind::Load, &load.org, load.zone.as_deref())
            .await
        {
            Ok(judged) => judged,
            Err(e) => return (internal(format!("pipeline manifest: {e}")), None),
        };
        let files = match self.store.load_files(&load.id).await {
            Ok(files) => files,
            Err(e) => return (internal(format!("load files: {e}")), None),
        };
        let versions = StagedVersions::of(&self.lake, &files).await;
        let scope = grant.access().load_scope();
        let (allowed, any) = match &scope {
            ServiceClientScope::All => (Vec::new(), true),
            ServiceClientScope::Only(ids) => (ids.iter().map(|&id| i64::from(id)).collect(), false),
            ServiceClientScope::Nothing => (Vec::new(), false),
        };
        let context = StepContext {
            load_id: load.id.clone(),
            org: load.org.clone(),
            zone: load.zone.clone(),
            table_name: load.table_name.clone(),
            load_as_service_client_id: load.load_as_service_client_id.clone(),
            partitions: load.partitions.clone(),
            check_sum,
            allowed_service_clients: allowed,
            any_service_client: any,
        };
        let database = standard_databases(&load.org, load.zone.as_deref()).lake;
        let staged = |files, database, scope| {
            let target = StagedTarget {
                record: record.clone(),
                files,
                database,
            };
            Arc::new(StagedLoad::new(
                self.store.clone(),
                self.lake.clone(),
                target,
                scope,
                self.now(),
            ))
        };
        if let Some(plan) = self.shadows.plan(&self.deployments, load).await {
            let data = staged(files.clone(), database.clone(), scope.clone());
            let parts = (self.deployments.clone(), self.engine.clone());
            self.shadows.begin(parts, plan, context.clone(), data);
        }
        let data = staged(files, database, scope);
        // Dropping this work (lease lost, server stopping) stops the running step.
        let stop = CancellationToken::new();
        let _stop_when_dropped = stop.clone().drop_guard();
        let control =
            RunControl::new(self.runtime.clone(), stop).with_step_marker(self.step_marker(record));
        let engine = self.engine.clone();
        let runner = data.clone();
        let ran = tokio::task::spawn_blocking(move || {
            engine.run_pipeline_judged(&manifest, &context, runner, &control)
        })
        .await;
        let outcome = match ran {
            Ok((outcome, steps)) => {
                if let Err(e) = self.deployments.record_load(&load.id, &by, &steps).await {
                    tracing::warn!(load = %load.id, error = %e, "what judged the load was not recorded");
                }
                Ok(outcome)
            }
            Err(e) => Err(e),
        };
        let pending = data.take_pending();
        // The steps validated the files as they were when the commit began;
        // an upload that started before and finished during the commit must
        // not slip rows past them.
        if pending.is_some()
            && matches!(outcome, Ok(Ok(PipelineOutcome::Passed)))
            && let Some(key) = versions.first_replaced(&self.lake).await
        {
            let message = format!(
                "file {key} was replaced while the commit ran (an upload finished after the \
                 commit began); nothing was written"
            );
            return (internal(message), pending);
        }
        // A file that read as no parquet is the load's fault, whichever
        // step met it and however it said so.
        if !matches!(outcome, Ok(Ok(PipelineOutcome::Passed)))
            && let Some(why) = data.invalid_parquet()
        {
            let item = ErrorItem {
                error_type: "INVALID_PARQUET".into(),
                error_message: format!(
                    "A staged file is not a valid parquet file: its rows could not be read ({why})."
                ),
                check_result: None,
            };
            return (fail("ParquetValidation", &[item]), pending);
        }
        let end = match outcome {
            Err(e) => internal(format!("the pipeline thread failed: {e}")),
            Ok(Err(step_error)) => fail("InternalError", &[step_error.item()]),
            Ok(Ok(PipelineOutcome::Failed {
                error_type, items, ..
            })) => fail(&error_type, &items),
            Ok(Ok(PipelineOutcome::Passed)) => match &pending {
                Some(pending) => LoadEnd::Success {
                    new_table: pending.new_table.clone(),
                    table_id: pending.table_id.clone(),
                    files: pending.files.clone(),
                },
                None => internal(
                    "the pipeline passed without a step that appends the rows (lake-append)".into(),
                ),
            },
        };
        (end, pending)
    }
}

/// Removes a ended commit's staged files (its uploads and their parts).
async fn remove_staged(lake: &Lake, load: &NewLoad) {
    for prefix in [staging_path(&load_prefix(load)), parts_prefix(&load.id)] {
        if let Err(e) = delete_prefix(lake, &prefix).await {
            tracing::warn!(load = %load.id, error = %e, "staged files not removed");
        }
    }
}
