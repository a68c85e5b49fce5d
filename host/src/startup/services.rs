//! The services a replica runs and the work it does in the background: the
//! metadata store and the lake, the query, load and daily-run services, the
//! pipelines' engine and runtime, the retention sweep, the metrics recorder and a
//! distributed cluster's part, each started in its named step.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{
    bind::Bound,
    wire::{self, ClusterWorkerListener, cluster_worker_listener_of},
};
use crate::{
    api,
    clock::SharedClock,
    cluster::Cluster,
    config::Config,
    dailyrun::DailyRunService,
    drain::Drain,
    engine::distributed::Coordinator,
    lake::Lake,
    load::{LoadService, commit::LoadCommitter},
    pipeline::{
        PipelineEngine, Pipelines,
        deployed::{Deployments, start_background_compiles},
        files::PipelineFiles,
        manifest::watch,
    },
    query::QueryService,
    retention::{Sweeper, SweptParts},
    retired::RetiredFileSweeper,
    runtime::EngineRuntime,
    store::Store,
};

/// A replica's services, started; `workers` stops their background work.
pub(super) struct Services {
    pub store: Store,
    pub lake: Lake,
    pub drain: Drain,
    pub queries: Arc<QueryService>,
    pub loads: Arc<LoadService>,
    pub commits: Arc<LoadCommitter>,
    pub daily_runs: Arc<DailyRunService>,
    pub deployments: Arc<Deployments>,
    pub retired_files: Arc<RetiredFileSweeper>,
    pub retention: Arc<Sweeper>,
    pub cluster_worker: Option<ClusterWorkerListener>,
    pub upload_router: axum::Router,
    pub metrics_router: axum::Router,
    pub workers: CancellationToken,
}

impl Services {
    /// Opens the store and the lake and starts every service and its
    /// background work on `clock`.
    pub async fn start(config: &Config, bound: &Bound, clock: SharedClock) -> anyhow::Result<Self> {
        let store = open_store(config).await?;
        let lake = Lake::from_config(&config.storage)
            .context("opening the lake (storage.data_dir / storage.lake_url)")?;
        let drain = Drain::new();
        let workers = CancellationToken::new();
        let upload_endpoint = bound.upload_endpoint(config);
        let cluster = Cluster::from_config(config)?;
        let queries = query_service(
            config,
            &store,
            &lake,
            &clock,
            &drain,
            &upload_endpoint,
            &cluster,
        )
        .await?;
        let cluster_worker = match &cluster {
            Some(cluster) => {
                cluster.start(workers.clone());
                cluster_worker(config, cluster, &lake, &queries).await?
            }
            None => None,
        };
        let loads = LoadService::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            config.uploads.clone(),
            upload_endpoint,
        )
        .await
        .context("starting the load service")?;
        // One recorder per process; each server renders it with its own store.
        let metrics_handle = crate::observability::metrics::install();
        crate::observability::metrics::start_upkeep(metrics_handle.clone(), workers.clone());
        let metrics_router = api::metrics::router(metrics_handle, store.clone());
        queries.start(workers.clone());
        // A query planned on a dropped or replaced table's file list may run
        // for up to the query time limit; its files are kept that long.
        let retired_files = RetiredFileSweeper::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            Duration::from_secs(config.query.time_limit_s),
        );
        let retention = Sweeper::new(
            SweptParts {
                store: store.clone(),
                lake: lake.clone(),
                clock: clock.clone(),
                loads: loads.clone(),
                retired_files: retired_files.clone(),
            },
            config.retention.clone(),
        );
        retention.start(workers.clone());
        let pipelines = pipelines(config, (&store, &lake, &clock), &workers)?;
        let deployments = pipelines.deployments.clone();
        let commits = LoadCommitter::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            pipelines.clone(),
            config.pipeline.clone(),
            drain.clone(),
        );
        commits.start(workers.clone());
        let daily_runs = DailyRunService::new(
            store.clone(),
            lake.clone(),
            clock.clone(),
            pipelines,
            config,
            (workers.clone(), drain.clone()),
        );
        // Its first tick ends runs that a stopped server left RUNNING.
        daily_runs.start_scheduler();
        let upload_router = crate::s3::router(
            loads.clone(),
            lake.object_store(),
            crate::s3::results::ResultDownloads {
                links: queries.result_links(),
                store: lake.object_store(),
                clock,
            },
        );
        Ok(Self {
            store,
            lake,
            drain,
            queries,
            loads,
            commits,
            daily_runs,
            deployments,
            retired_files,
            retention,
            cluster_worker,
            upload_router,
            metrics_router,
            workers,
        })
    }
}

/// The query service, its reads distributed on `cluster` when there is one.
async fn query_service(
    config: &Config,
    store: &Store,
    lake: &Lake,
    clock: &SharedClock,
    drain: &Drain,
    upload_endpoint: &Url,
    cluster: &Option<Arc<Cluster>>,
) -> anyhow::Result<Arc<QueryService>> {
    QueryService::new(
        store.clone(),
        lake.clone(),
        clock.clone(),
        config.query.clone(),
        (upload_endpoint.clone(), config.uploads.bucket.clone()),
        drain.clone(),
        cluster
            .clone()
            .map(|cluster| cluster as Arc<dyn Coordinator>),
    )
    .await
    .context("starting the query service")
}

/// The worker listener of this replica's part in a cluster, bound on
/// `distributed.worker_listen`.
async fn cluster_worker(
    config: &Config,
    cluster: &Cluster,
    lake: &Lake,
    queries: &QueryService,
) -> anyhow::Result<Option<ClusterWorkerListener>> {
    let listener = wire::bind(
        Some(config.distributed.worker_listen),
        "distributed.worker_listen",
    )
    .await?;
    listener
        .map(|listener| cluster_worker_listener_of(listener, cluster, lake, queries, &config.query))
        .transpose()
}

/// The pipelines' engine (built-in steps compiled off the request path,
/// swapped-in components compiled by the manifest watch) and the runtime
/// their SQL runs on, apart from the one serving HTTP.
fn pipelines(
    config: &Config,
    (store, lake, clock): (&Store, &Lake, &SharedClock),
    workers: &CancellationToken,
) -> anyhow::Result<Pipelines> {
    let engine = PipelineEngine::shared().map_err(|e| anyhow::anyhow!(e))?;
    engine.keep_compiled_within(
        config.storage.data_dir.join("compiled-steps"),
        config.pipeline.compiled_cache_bytes,
    );
    {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = engine.precompile_builtins() {
                tracing::error!(error = %e, "a built-in pipeline step does not compile");
            }
        });
    }
    watch::start(
        engine.clone(),
        PipelineFiles::of(&config.pipeline),
        workers.clone(),
    );
    let deployments = Arc::new(Deployments::new(
        store.clone(),
        lake.clone(),
        engine.clone(),
        config.pipeline.clone(),
        clock.clone(),
    ));
    start_background_compiles(deployments.clone(), workers.clone());
    let runtime = EngineRuntime::new(config.pipeline.commit_workers + 1)
        .context("starting the pipelines' runtime")?;
    Ok(Pipelines {
        engine,
        runtime: Arc::new(runtime),
        deployments,
    })
}

/// Opens the configured metadata store and makes sure every configured org and
/// zone has its standard databases.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let store = Store::from_config(&config.storage)
        .await
        .context("opening the metadata store (storage.data_dir / storage.database_url)")?;
    for org in &config.orgs {
        store.ensure_standard_databases(&org.name, None).await?;
        for zone in &org.zones {
            store
                .ensure_standard_databases(&org.name, Some(zone))
                .await?;
        }
    }
    Ok(store)
}
