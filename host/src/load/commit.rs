//! Load commits as durable jobs (spec "Load states": PROCESSING → SUCCESS or
//! FAIL). POST /load/{id}/commit only moves the load to PROCESSING; a worker
//! of any replica claims it with a lease, runs the org's pipeline manifest
//! over the staged files, and ends it in one transaction: SUCCESS together
//! with the new table and files in the catalog, or FAIL with the report.
//!
//! A crash at any moment leaves the load PROCESSING with no rows visible (the
//! files the insert step wrote are not in the catalog); when the lease runs
//! out another worker runs the commit again from the start and ends it
//! exactly once, since the end is conditional on holding the lease. Each
//! attempt names its files after itself (`<load>-a<attempt>-<n>.parquet`), so
//! an attempt that finds its lease taken deletes only its own files, never
//! the ones the next attempt recorded. After `pipeline.max_attempts` runs it
//! fails with InternalError. Staged files are removed once the load ended.
//! A commit whose lease no longer holds stops, records nothing and deletes
//! what it wrote; a commit's work dropped (the server stopping) leaves the
//! load to be run again (its files are swept as orphans). Either way its
//! running step stops at once, even inside a capability call.

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    delete_prefix, load_prefix, parts_prefix,
    staged::{PendingAppend, StagedLoad, StagedTarget},
    staging_path,
};
use crate::{
    auth::{AccessGrant, ServiceClientScope},
    clock::SharedClock,
    config::PipelineConfig,
    engine::{runtime::EngineRuntime, table_writer::delete_paths},
    lake::Lake,
    lease::Lease,
    observability::jobs,
    pipeline::{
        ErrorItem, PipelineEngine, PipelineKind, PipelineOutcome, RunControl, StepContext,
        manifest::org_manifest,
    },
    store::{
        Finished, Store,
        catalog::standard_databases,
        loads::{LoadEnd, LoadFile, LoadRecord},
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
    config: PipelineConfig,
    lease: Lease,
    holder: String,
    wake: Notify,
}

impl std::fmt::Debug for LoadCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadCommitter")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
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
        (engine, runtime): (Arc<PipelineEngine>, Arc<EngineRuntime>),
        config: PipelineConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            lake,
            lease: Lease::new(clock, config.lease_s),
            engine,
            runtime,
            config,
            holder: format!("commit-{}", crate::store::new_id()),
            wake: Notify::new(),
        })
    }

    /// Tells an idle worker that a commit is waiting.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn now(&self) -> i64 {
        self.lease.now()
    }

    /// Starts `pipeline.commit_workers` workers until `stop` is cancelled.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        for _ in 0..self.config.commit_workers {
            let committer = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
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
        jobs::load_commit_claimed(&id, record.attempts);
        let (end, pending) = if record.attempts > i64::from(self.config.max_attempts) {
            let message = format!(
                "the commit was interrupted {} times and is not tried again",
                record.attempts - 1
            );
            (internal(message), None)
        } else {
            match self.pipeline_with_lease(&record).await {
                Some(ended) => ended,
                None => {
                    tracing::warn!(load = %id, "commit lost its lease; its steps were stopped and another worker runs it");
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
                for prefix in [staging_path(&load_prefix(&record.load)), parts_prefix(&id)] {
                    if let Err(e) = delete_prefix(&self.lake, &prefix).await {
                        tracing::warn!(load = %id, error = %e, "staged files not removed");
                    }
                }
                self.sweep_earlier_attempts(&record).await;
            }
            Ok(Finished::Lost) => {
                tracing::warn!(load = %id, "commit lost its lease; another worker runs it");
                delete_paths(self.lake.object_store().as_ref(), &written).await;
            }
            Err(e) => {
                // Left PROCESSING: the lease runs out and the commit is run again.
                tracing::error!(load = %id, error = %e, "recording the end of a commit failed");
                delete_paths(self.lake.object_store().as_ref(), &written).await;
            }
        }
    }

    /// Deletes the files earlier attempts of an ended commit wrote and never
    /// recorded (`<load>-a<k>-<n>.parquet`, k below this attempt's): an
    /// attempt that died, or lost its lease, in its insert left them in the
    /// table's folder. Only a commit run more than once lists the folder.
    async fn sweep_earlier_attempts(&self, record: &LoadRecord) {
        if record.attempts <= 1 {
            return;
        }
        let load = &record.load;
        let database = standard_databases(&load.org, load.zone.as_deref()).lake;
        let folder = ObjectPath::from(format!("{database}/{}", load.table_name));
        let any_attempt = format!("{}-a", load.id);
        let this_attempt = format!("{}-a{}-", load.id, record.attempts);
        let store = self.lake.object_store();
        let mut earlier = Vec::new();
        let mut listing = store.list(Some(&folder));
        while let Some(meta) = listing.next().await {
            match meta {
                Ok(meta) => {
                    let name = meta.location.filename().unwrap_or_default();
                    if name.starts_with(&any_attempt) && !name.starts_with(&this_attempt) {
                        earlier.push(meta.location.to_string());
                    }
                }
                Err(e) => {
                    tracing::warn!(load = %load.id, error = %e, "earlier attempts' files not listed");
                    return;
                }
            }
        }
        delete_paths(store.as_ref(), &earlier).await;
    }

    /// Runs the pipeline while renewing the lease; `None` (the pipeline
    /// dropped, its step stopped) once a renewal no longer holds.
    async fn pipeline_with_lease(
        &self,
        record: &LoadRecord,
    ) -> Option<(LoadEnd, Option<PendingAppend>)> {
        let id = &record.load.id;
        self.lease
            .hold_while_held(id, self.pipeline(record), |until| {
                self.store.renew_load_lease(id, &self.holder, until)
            })
            .await
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
        let manifest = match org_manifest(
            PipelineKind::Load,
            &self.config.dir,
            &load.org,
            self.config.test_steps,
        ) {
            Ok(manifest) => manifest,
            Err(e) => return (internal(format!("pipeline manifest: {e}")), None),
        };
        let files = match self.store.load_files(&load.id).await {
            Ok(files) => files,
            Err(e) => return (internal(format!("load files: {e}")), None),
        };
        let versions = staged_versions(&self.lake, &files).await;
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
        let data = Arc::new(StagedLoad::new(
            self.store.clone(),
            self.lake.clone(),
            StagedTarget {
                record: record.clone(),
                files,
                database,
            },
            scope,
            self.now(),
        ));
        // Dropping this work (lease lost, server stopping) stops the running step.
        let stop = CancellationToken::new();
        let _stop_when_dropped = stop.clone().drop_guard();
        let control = RunControl::new(self.runtime.clone(), stop);
        let engine = self.engine.clone();
        let runner = data.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            engine.run_pipeline(&manifest, &context, runner, &control)
        })
        .await;
        let pending = data.take_pending();
        // The steps validated the files as they were when the commit began;
        // an upload that started before and finished during the commit must
        // not slip rows past them.
        if pending.is_some()
            && matches!(outcome, Ok(Ok(PipelineOutcome::Passed)))
            && let Some(key) = first_replaced(&self.lake, &versions).await
        {
            let message = format!(
                "file {key} was replaced while the commit ran (an upload finished after the \
                 commit began); nothing was written"
            );
            return (internal(message), pending);
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

/// Each uploaded file's staged object and its version (size, ETag, time),
/// `None` where it is gone.
type StagedVersions = Vec<(String, ObjectPath, Option<ObjectVersion>)>;
type ObjectVersion = (u64, Option<String>, i64);

async fn version_of(lake: &Lake, path: &ObjectPath) -> Option<ObjectVersion> {
    let meta = lake.object_store().head(path).await.ok()?;
    Some((meta.size, meta.e_tag, meta.last_modified.timestamp_micros()))
}

async fn staged_versions(lake: &Lake, files: &[LoadFile]) -> StagedVersions {
    let mut versions = Vec::with_capacity(files.len());
    for file in files.iter().filter(|f| f.uploaded_at.is_some()) {
        let path = staging_path(&file.object_key);
        let version = version_of(lake, &path).await;
        versions.push((file.file_key.clone(), path, version));
    }
    versions
}

/// The first file whose staged object is no longer the version `before` saw.
async fn first_replaced(lake: &Lake, before: &StagedVersions) -> Option<String> {
    for (key, path, version) in before {
        if &version_of(lake, path).await != version {
            return Some(key.clone());
        }
    }
    None
}
