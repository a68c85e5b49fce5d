//! `lakehost pipeline dry-run`: a manifest's steps over local parquet files,
//! without a server, for plugin authors and operators trying a manifest.
//!
//! The files are staged as one load in a throwaway store and lake (a
//! temporary folder), so the steps see exactly what a commit would show them
//! for a new table; nothing outside that folder is touched. Each step's
//! outcome is reported in order; the run stops at the first failure.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use object_store::ObjectStoreExt as _;

use super::{
    object_key,
    staged::{StagedLoad, StagedTarget},
    staging_path,
};
use crate::{
    auth::ServiceClientScope,
    lake::Lake,
    pipeline::{
        PipelineEngine, PipelineKind, RunControl, StepContext, StepReport, manifest::Manifest,
        run_steps_blocking,
    },
    store::{
        Store,
        catalog::standard_databases,
        loads::{LoadFile, NewLoad},
        new_id,
    },
};

const ORG: &str = "dry-run";

/// What to try.
#[derive(Debug, Clone)]
pub struct DryRunRequest {
    pub manifest: PathBuf,
    pub table: String,
    pub check_sum: Vec<(String, String)>,
    pub load_as_service_client_id: Option<String>,
    pub partitions: Vec<String>,
    pub files: Vec<PathBuf>,
}

/// The reports of the steps that ran, and the rows the insert step wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunOutcome {
    pub steps: Vec<StepReport>,
    pub rows_appended: Option<u64>,
}

impl DryRunOutcome {
    pub fn passed(&self) -> bool {
        StepReport::all_passed(&self.steps)
    }
}

pub async fn dry_run(request: &DryRunRequest) -> anyhow::Result<DryRunOutcome> {
    let manifest = Manifest::load(PipelineKind::Load, &request.manifest)?;
    let scratch = tempfile::tempdir().context("a scratch folder")?;
    let store = Store::open_sqlite(&scratch.path().join("lakehost.db")).await?;
    store.ensure_standard_databases(ORG, None).await?;
    let lake = Lake::local(scratch.path())?;
    let now = chrono::Utc::now().timestamp_micros();
    let load = NewLoad {
        id: new_id(),
        org: ORG.into(),
        zone: None,
        owner_sub: "dry-run".into(),
        load_type: super::APPEND_ONLY.into(),
        table_name: request.table.clone(),
        load_as_service_client_id: request.load_as_service_client_id.clone(),
        partitions: request.partitions.clone(),
    };
    let record = store.insert_load(&load, now).await?;
    for (i, path) in request.files.iter().enumerate() {
        let bytes = tokio::fs::read(path)
            .await
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file_key = format!("file_{i}");
        let key = object_key(&load, &file_key);
        let size = bytes.len() as i64;
        lake.object_store()
            .put(&staging_path(&key), bytes.into())
            .await?;
        store
            .request_load_file(&LoadFile {
                load_id: load.id.clone(),
                file_key: file_key.clone(),
                object_key: key,
                requested_at: now,
                uploaded_at: None,
                size_bytes: None,
            })
            .await?;
        store.record_upload(&load.id, &file_key, size, now).await?;
    }
    let files = store.load_files(&load.id).await?;
    let database = standard_databases(ORG, None).lake;
    let data = Arc::new(StagedLoad::new(
        store.clone(),
        lake,
        StagedTarget {
            record,
            files,
            database,
        },
        ServiceClientScope::All,
        now,
    ));
    let context = StepContext {
        load_id: load.id.clone(),
        org: ORG.into(),
        zone: None,
        table_name: request.table.clone(),
        load_as_service_client_id: request.load_as_service_client_id.clone(),
        partitions: request.partitions.clone(),
        check_sum: request.check_sum.clone(),
        allowed_service_clients: Vec::new(),
        any_service_client: true,
    };
    let runner = data.clone();
    let steps = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<StepReport>> {
        let engine = PipelineEngine::shared()?;
        let control = RunControl::detached()?;
        let ran = run_steps_blocking(&manifest, |step| {
            engine.run_step(step, &context, runner.clone(), &control)
        });
        Ok(ran.reports())
    })
    .await??;
    let rows_appended = data.take_pending().map(|p| p.rows);
    store.close().await;
    Ok(DryRunOutcome {
        steps,
        rows_appended,
    })
}
