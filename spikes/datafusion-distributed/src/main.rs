//! Spike of datafusion-distributed 4.0.0 (DataFusion 55.2, tonic 0.14.9).
//!
//! Subcommands:
//!   spike-dd worker <port>            one Worker over tonic on 127.0.0.1:<port>
//!   spike-dd coord [experiments...]   spawns two `worker` child processes, runs TPC-H
//!                                     Q1/Q3/Q12 local vs distributed, then the experiments
//!                                     (bench, auth, cancel, kill, codec; default: all)
//!
//! Env: SPIKE_SECRET (shared secret, default "s3cr3t"), SPIKE_DATA (default /tmp/spike-tpch),
//!      SPIKE_PORTS (default 50071,50072), SPIKE_RUNS (default 2).

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::config::ConfigOptions;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileScanConfig, ParquetFileReaderFactory, ParquetSource,
    parquet::DefaultParquetFileReaderFactory,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionStateBuilder;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_distributed::grpc::{
    BoxCloneSyncChannel, DefaultChannelResolver, GetTaskProgressRequest, ObservabilityServiceClient,
    create_worker_client,
};
use datafusion_distributed::{
    ChannelResolver, DistributedCodec, DistributedExt, DistributedMetricsFormat,
    NetworkBoundaryExt, SessionStateBuilderExt, Worker, WorkerChannel, WorkerPlanRewriteEvent,
    WorkerPlanRewriteEventResponse, WorkerQueryContext, WorkerResolver, display_plan_ascii,
    rewrite_distributed_plan_with_metrics,
};
use futures::StreamExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Server;
use tower::ServiceExt;
use url::Url;

type BoxErr = Box<dyn std::error::Error + Send + Sync>;

const Q1: &str = "select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty, \
 sum(l_extendedprice) as sum_base_price, sum(l_extendedprice * (1 - l_discount)) as sum_disc_price, \
 sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge, avg(l_quantity) as avg_qty, \
 avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc, count(*) as count_order \
 from lineitem where l_shipdate <= date '1998-12-01' - interval '90' day \
 group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus";

const Q3: &str = "select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, \
 o_orderdate, o_shippriority from customer, orders, lineitem \
 where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey \
 and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15' \
 group by l_orderkey, o_orderdate, o_shippriority order by revenue desc, o_orderdate limit 10";

const Q12: &str = "select l_shipmode, \
 sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count, \
 sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) as low_line_count \
 from orders, lineitem where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP') \
 and l_commitdate < l_receiptdate and l_shipdate < l_commitdate \
 and l_receiptdate >= date '1994-01-01' and l_receiptdate < date '1994-01-01' + interval '1' year \
 group by l_shipmode order by l_shipmode";

/// A deliberately slow query (~27M-row self join + md5, ~10 s here) for the cancel and kill tests.
/// (sha256 returns Binary; length(sha256(..)) failed with "Encountered non UTF-8 data".)
fn slow_sql() -> String {
    std::env::var("SPIKE_SLOW_SQL").unwrap_or_else(|_| {
        "select l1.l_orderkey % 1000 as k, count(*) as n, \
         sum(length(md5(concat(l1.l_comment, l2.l_comment)))) as h \
         from lineitem l1 join lineitem l2 on l1.l_orderkey = l2.l_orderkey \
         group by 1 order by 1 limit 5"
            .to_string()
    })
}

fn secret() -> String {
    std::env::var("SPIKE_SECRET").unwrap_or_else(|_| "s3cr3t".to_string())
}

// ---------------------------------------------------------------------------------------------
// (1) Auth: a ChannelResolver that adds `authorization: Bearer <secret>` to every request.
// ---------------------------------------------------------------------------------------------

/// Wraps the crate's DefaultChannelResolver (it caches one tonic Channel per URL) and layers
/// a header onto the `BoxCloneSyncChannel` (a tower BoxCloneSyncService over http::Request<Body>).
#[derive(Clone)]
struct SecretChannelResolver {
    inner: DefaultChannelResolver,
    header: Option<http::HeaderValue>,
}

impl SecretChannelResolver {
    fn new(secret: Option<&str>) -> Self {
        Self {
            inner: DefaultChannelResolver::default(),
            header: secret.map(|s| http::HeaderValue::from_str(&format!("Bearer {s}")).unwrap()),
        }
    }
}

#[async_trait]
impl ChannelResolver for SecretChannelResolver {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        let channel: BoxCloneSyncChannel = self.inner.get_channel(url).await?;
        let Some(header) = self.header.clone() else {
            return Ok(create_worker_client(channel));
        };
        let channel = channel.map_request(move |mut req: http::Request<tonic::body::Body>| {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, header.clone());
            req
        });
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
    }
}

/// Server side: a tonic interceptor. It sees only the request metadata (HTTP/2 headers),
/// before the streaming body (the SetPlanRequest) is decoded.
#[derive(Clone)]
struct CheckSecret {
    expected: String,
    rejected: Arc<AtomicUsize>,
}

impl tonic::service::Interceptor for CheckSecret {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let ok = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| v == self.expected);
        if ok {
            Ok(req)
        } else {
            let n = self.rejected.fetch_add(1, Ordering::SeqCst) + 1;
            eprintln!("[worker {}] rejected request #{n} without valid secret", std::process::id());
            Err(tonic::Status::unauthenticated("missing or wrong cluster secret"))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (4) A custom ParquetFileReaderFactory that counts calls in this process.
// ---------------------------------------------------------------------------------------------

static CUSTOM_READS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct CountingFactory {
    label: &'static str,
    inner: DefaultParquetFileReaderFactory,
}

impl ParquetFileReaderFactory for CountingFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn AsyncFileReader + Send>> {
        let n = CUSTOM_READS.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            eprintln!("[pid {}] CountingFactory({}) used", std::process::id(), self.label);
        }
        self.inner
            .create_reader(partition_index, partitioned_file, metadata_size_hint, metrics)
    }
}

/// Replaces the reader factory of every parquet DataSourceExec.
fn install_factory(
    plan: Arc<dyn ExecutionPlan>,
    make: &dyn Fn(&FileScanConfig) -> Result<Arc<dyn ParquetFileReaderFactory>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(dse) = node.downcast_ref::<DataSourceExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(fsc) = dse.data_source().downcast_ref::<FileScanConfig>() else {
            return Ok(Transformed::no(node));
        };
        let Some(ps) = fsc.file_source().downcast_ref::<ParquetSource>() else {
            return Ok(Transformed::no(node));
        };
        let factory = make(fsc)?;
        let mut cfg = fsc.clone();
        cfg.file_source = Arc::new(ps.clone().with_parquet_file_reader_factory(factory));
        Ok(Transformed::yes(DataSourceExec::from_data_source(cfg) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// Lists the reader factory (Debug) of every parquet scan in a plan.
fn parquet_factories(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut out = vec![];
    let _ = plan.apply(|node| {
        if let Some(leaf) = node.downcast_ref::<datafusion_distributed::DistributedLeafExec>() {
            for v in leaf.variants() {
                out.extend(parquet_factories(v).into_iter().map(|f| format!("leaf variant: {f}")));
            }
        }
        if let Some(dse) = node.downcast_ref::<DataSourceExec>()
            && let Some(fsc) = dse.data_source().downcast_ref::<FileScanConfig>()
            && let Some(ps) = fsc.file_source().downcast_ref::<ParquetSource>()
        {
            let f = ps.parquet_file_reader_factory().map(|f| format!("{f:?}"));
            let f = f.unwrap_or_else(|| "None".to_string());
            // Shorten: the Debug of CachedParquetFileReaderFactory prints the store.
            out.push(f.chars().take(90).collect());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// Coordinator-side physical optimizer rule: installs CountingFactory("coordinator")
/// into every parquet scan, before the distributed planner cuts the plan into stages.
#[derive(Debug)]
struct InstallCountingFactory;

impl PhysicalOptimizerRule for InstallCountingFactory {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        install_factory(plan, &|fsc| {
            let _ = fsc;
            Ok(Arc::new(CountingFactory {
                label: "coordinator",
                inner: DefaultParquetFileReaderFactory::new(Arc::new(
                    object_store::local::LocalFileSystem::new(),
                )),
            }))
        })
    }
    fn name(&self) -> &str {
        "install_counting_factory"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------------------------

async fn run_worker(port: u16) -> Result<(), BoxErr> {
    let secret = secret();
    let reinstall = std::env::var("SPIKE_WORKER_REINSTALL_FACTORY").is_ok();
    // test: workers that do not send the secret on worker->worker calls
    let client_secret = std::env::var("SPIKE_WORKER_NO_CLIENT_SECRET").is_err();
    // Runs once per task (SetPlanRequest): builds the worker-side SessionState.
    let session_builder = move |ctx: WorkerQueryContext| {
        let secret = secret.clone();
        async move {
            let state = ctx
                .builder
                // worker->worker calls (shuffle reads) need the secret too
                .with_distributed_channel_resolver(SecretChannelResolver::new(
                    client_secret.then_some(secret.as_str()),
                ))
                // log (and optionally replace) the reader factory of the decoded plan
                .with_distributed_worker_plan_rewrite_handler(
                    move |ev: WorkerPlanRewriteEvent| {
                        let before = parquet_factories(&ev.plan);
                        if !before.is_empty() {
                            eprintln!(
                                "[worker {}] decoded stage plan parquet factories: {before:?}",
                                std::process::id()
                            );
                        }
                        let plan = if reinstall {
                            install_factory(ev.plan, &|fsc| {
                                let _ = fsc;
                                Ok(Arc::new(CountingFactory {
                                    label: "worker-reinstalled",
                                    inner: DefaultParquetFileReaderFactory::new(Arc::new(
                                        object_store::local::LocalFileSystem::new(),
                                    )),
                                }))
                            })?
                        } else {
                            ev.plan
                        };
                        Ok(WorkerPlanRewriteEventResponse::new(plan))
                    },
                )
                .build();
            Ok::<_, DataFusionError>(state)
        }
    };
    let worker = Worker::from_session_builder(session_builder);
    let observability = worker.with_observability_service(Arc::new(NoResolver));
    let rejected = Arc::new(AtomicUsize::new(0));
    let svc = tonic::service::interceptor::InterceptedService::new(
        worker.into_worker_server(),
        CheckSecret { expected: self::secret(), rejected },
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    eprintln!("[worker {}] listening on {addr}", std::process::id());
    // Print reads of the custom factory (if any) every second.
    tokio::spawn(async {
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = CUSTOM_READS.load(Ordering::SeqCst);
            if n != last {
                eprintln!("[worker {}] CountingFactory reads so far: {n}", std::process::id());
                last = n;
            }
        }
    });
    Server::builder()
        .add_service(svc)
        .add_service(observability)
        .serve(addr)
        .await?;
    Ok(())
}

struct NoResolver;
impl WorkerResolver for NoResolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(vec![])
    }
}

// ---------------------------------------------------------------------------------------------
// Coordinator
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct StaticResolver(Vec<Url>);
impl WorkerResolver for StaticResolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

fn data_dir() -> String {
    std::env::var("SPIKE_DATA").unwrap_or_else(|_| "/tmp/spike-tpch".to_string())
}

async fn register(ctx: &SessionContext) -> Result<()> {
    for t in ["lineitem", "orders", "customer"] {
        ctx.register_parquet(t, format!("{}/{t}/", data_dir()), ParquetReadOptions::default())
            .await?;
    }
    Ok(())
}

fn local_ctx() -> SessionContext {
    SessionContext::new_with_config(SessionConfig::new())
}

fn dist_state(
    urls: &[Url],
    secret: Option<&str>,
    extra: Option<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> SessionContext {
    let mut b = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new())
        .with_distributed_worker_resolver(StaticResolver(urls.to_vec()))
        .with_distributed_channel_resolver(SecretChannelResolver::new(secret));
    if let Some(rule) = extra {
        // physical_optimizer_rules = None means "defaults"; set defaults + ours explicitly.
        let mut rules = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::default().rules;
        rules.push(rule);
        b = b.with_physical_optimizer_rules(rules);
    }
    SessionContext::from(b.with_distributed_planner().build())
}

async fn run_sql(ctx: &SessionContext, sql: &str) -> Result<(Vec<RecordBatch>, Arc<dyn ExecutionPlan>)> {
    let df = ctx.sql(sql).await?;
    let plan = df.create_physical_plan().await?;
    let batches = collect(plan.clone(), ctx.task_ctx()).await?;
    Ok((batches, plan))
}

struct StageInfo {
    stage: usize,
    tasks: usize,
    kind: String,
    bytes: usize,
    rows: usize,
}

fn stages(plan: &Arc<dyn ExecutionPlan>) -> Vec<StageInfo> {
    let mut out = vec![];
    let _ = plan.apply(|node| {
        if let Some(nb) = node.as_network_boundary() {
            let st = nb.input_stage();
            let mut bytes = 0;
            if let Some(m) = node.metrics() {
                for metric in m.iter() {
                    if metric.value().name() == "bytes_transferred" {
                        bytes += metric.value().as_usize();
                    }
                }
            }
            out.push(StageInfo {
                stage: st.num(),
                tasks: st.task_count(),
                kind: node.name().to_string(),
                bytes,
                rows: node.metrics().and_then(|m| m.output_rows()).unwrap_or(0),
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn spawn_worker(port: u16, extra_env: &[(&str, &str)]) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("worker").arg(port.to_string()).kill_on_drop(true);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.spawn()
}

async fn wait_port(port: u16) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("worker on {port} did not come up");
}

async fn tasks_on(port: u16) -> Result<usize, BoxErr> {
    let mut c = ObservabilityServiceClient::connect(format!("http://127.0.0.1:{port}")).await?;
    let r = c.get_task_progress(GetTaskProgressRequest {}).await?;
    Ok(r.into_inner().tasks.len())
}

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after ")": state(0) ppid(1) ... utime is field 14 overall -> index 11 here, stime 12
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

async fn bench(urls: &[Url]) -> Result<(), BoxErr> {
    let runs: usize = std::env::var("SPIKE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let local = local_ctx();
    register(&local).await?;
    let dist = dist_state(urls, Some(&secret()), None);
    register(&dist).await?;
    let mut table = vec![];
    for (name, sql) in [("Q1", Q1), ("Q3", Q3), ("Q12", Q12)] {
        let mut lt = vec![];
        let mut dt = vec![];
        let mut local_out = String::new();
        let mut dist_out = String::new();
        let mut last_plan = None;
        for _ in 0..runs {
            let t = Instant::now();
            let (b, _) = run_sql(&local, sql).await?;
            lt.push(t.elapsed().as_secs_f64());
            local_out = pretty_format_batches(&b)?.to_string();
            let t = Instant::now();
            let (b, plan) = run_sql(&dist, sql).await?;
            dt.push(t.elapsed().as_secs_f64());
            dist_out = pretty_format_batches(&b)?.to_string();
            last_plan = Some(plan);
        }
        let equal = local_out == dist_out;
        if !equal {
            println!("MISMATCH {name}\nlocal:\n{local_out}\ndistributed:\n{dist_out}");
        }
        let plan = last_plan.unwrap();
        let plan = rewrite_distributed_plan_with_metrics(plan, DistributedMetricsFormat::Aggregated).await?;
        let st = stages(&plan);
        if name == "Q3" || std::env::var("SPIKE_PRINT_ALL_PLANS").is_ok() {
            println!("==== distributed plan of {name} (with metrics) ====\n{}", display_plan_ascii(plan.as_ref(), true));
        }
        println!("{name} result ({} rows printed):\n{local_out}", local_out.lines().count());
        let tasks: usize = st.iter().map(|s| s.tasks).sum();
        let bytes: usize = st.iter().map(|s| s.bytes).sum();
        let detail: Vec<String> = st
            .iter()
            .map(|s| format!("stage{}:{}x{} {}B {}rows", s.stage, s.kind, s.tasks, s.bytes, s.rows))
            .collect();
        table.push(format!(
            "| {name} | {} | {} | {} | {} stages + head, {} worker tasks | {} | {} |",
            lt.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(" / "),
            dt.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(" / "),
            equal,
            st.len(),
            tasks,
            bytes,
            detail.join("; ")
        ));
    }
    println!("\n| query | local s (runs) | distributed s (runs) | equal | stages/tasks | bytes over network | per stage |");
    println!("|---|---|---|---|---|---|---|");
    for row in table {
        println!("{row}");
    }
    Ok(())
}

async fn auth(urls: &[Url]) -> Result<(), BoxErr> {
    println!("\n==== (1) auth ====");
    for (label, secret) in [("no secret", None), ("wrong secret", Some("nope".to_string())), ("right secret", Some(secret()))] {
        let ctx = dist_state(urls, secret.as_deref(), None);
        register(&ctx).await?;
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(60), run_sql(&ctx, Q12)).await;
        match r {
            Err(_) => println!("auth [{label}]: TIMEOUT after 60s (hang)"),
            Ok(Ok((b, _))) => println!(
                "auth [{label}]: OK, {} rows in {:.2}s",
                b.iter().map(|b| b.num_rows()).sum::<usize>(),
                t.elapsed().as_secs_f64()
            ),
            Ok(Err(e)) => println!("auth [{label}]: ERROR after {:.2}s: {e}", t.elapsed().as_secs_f64()),
        }
    }
    Ok(())
}

async fn cancel(urls: &[Url], ports: &[u16], pids: &[u32]) -> Result<(), BoxErr> {
    println!("\n==== (2) cancel (drop the output stream) ====");
    let ctx = dist_state(urls, Some(&secret()), None);
    register(&ctx).await?;
    let plan = ctx.sql(&slow_sql()).await?.create_physical_plan().await?;
    let mut stream = datafusion::physical_plan::execute_stream(plan.clone(), ctx.task_ctx())?;
    let poll = tokio::spawn(async move {
        // The slow query yields only at the end; poll it for 4 s then drop it.
        let r = tokio::time::timeout(Duration::from_millis(3000), stream.next()).await;
        (r.is_err(), stream)
    });
    let ca: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let cb: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    println!(
        "worker CPU ticks during 1 s while running: {:?}",
        ca.iter().zip(&cb).map(|(a, b)| b - a).collect::<Vec<_>>()
    );
    let (timed_out, mut stream) = poll.await?;
    // keep polling until 4 s have passed in total, so the workers are busy at drop time
    let _ = tokio::time::timeout(Duration::from_millis(1000), stream.next()).await;
    let mut before = vec![];
    for p in ports {
        before.push(tasks_on(*p).await.unwrap_or(usize::MAX));
    }
    println!("query still running at drop: {timed_out}; worker task entries just before drop: {before:?}");
    let cpu_before: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let t = Instant::now();
    drop(stream);
    drop(plan);
    loop {
        let mut n = vec![];
        for p in ports {
            n.push(tasks_on(*p).await.unwrap_or(usize::MAX));
        }
        if n.iter().all(|v| *v == 0) {
            let c: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
            println!(
                "all worker task entries gone {:.0} ms after drop; worker CPU ticks between drop and then: {:?}",
                t.elapsed().as_secs_f64() * 1000.0,
                cpu_before.iter().zip(&c).map(|(a, b)| b - a).collect::<Vec<_>>()
            );
            break;
        }
        if t.elapsed() > Duration::from_secs(15) {
            println!("worker task entries still {n:?} 15 s after drop");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("worker CPU ticks at drop: {cpu_before:?} (query start: {ca:?} minus <=1 s)");
    let mut self_prev = cpu_ticks(std::process::id());
    let mut prev: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    for i in 1..=14 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        let mut n = vec![];
        for p in ports {
            n.push(tasks_on(*p).await.unwrap_or(usize::MAX));
        }
        let self_now = cpu_ticks(std::process::id());
        println!(
            "  +{i:2}s after drop: worker CPU ticks in last second {:?}, coordinator {}, task entries {n:?}",
            prev.iter().zip(&now).map(|(a, b)| b - a).collect::<Vec<_>>(),
            self_now - self_prev
        );
        prev = now;
        self_prev = self_now;
    }
    Ok(())
}

async fn codec_roundtrip() -> Result<(), BoxErr> {
    println!("\n==== (4a) in-process protobuf round trip of a ParquetSource with a custom factory ====");
    let ctx = local_ctx();
    register(&ctx).await?;
    let plan = ctx.sql("select l_orderkey from lineitem where l_quantity > 49").await?.create_physical_plan().await?;
    let plan = InstallCountingFactory.optimize(plan, &ConfigOptions::default())?;
    println!("before encode: {:?}", parquet_factories(&plan));
    let codec = DistributedCodec::new_combined_with_user(ctx.state().config());
    let conv = datafusion_proto::physical_plan::DeduplicatingProtoConverter::default();
    let bytes = datafusion_proto::bytes::physical_plan_to_bytes_with_proto_converter(plan, &codec, &conv)?;
    let decoded = datafusion_proto::bytes::physical_plan_from_bytes_with_proto_converter(
        &bytes,
        &ctx.task_ctx(),
        &codec,
        &conv,
    )?;
    println!("after decode:  {:?}", parquet_factories(&decoded));
    Ok(())
}

async fn codec_distributed(urls: &[Url]) -> Result<(), BoxErr> {
    println!("\n==== (4b) distributed run with CountingFactory installed on the coordinator ====");
    let before = CUSTOM_READS.load(Ordering::SeqCst);
    let ctx = dist_state(urls, Some(&secret()), Some(Arc::new(InstallCountingFactory)));
    register(&ctx).await?;
    let (b, plan) = run_sql(&ctx, Q12).await?;
    println!(
        "rows {}; coordinator-process CountingFactory reads during the query: {}; factories in coordinator's plan: {:?}",
        b.iter().map(|b| b.num_rows()).sum::<usize>(),
        CUSTOM_READS.load(Ordering::SeqCst) - before,
        parquet_factories(&plan)
    );
    println!("(see the worker stderr lines '[worker ..] decoded stage plan parquet factories' above)");
    Ok(())
}

async fn kill(urls: &[Url], ports: &[u16], children: &mut [tokio::process::Child]) -> Result<(), BoxErr> {
    println!("\n==== (3) kill -9 one worker mid-query ====");
    let ctx = dist_state(urls, Some(&secret()), None);
    register(&ctx).await?;
    let t = Instant::now();
    let q = tokio::spawn({
        let ctx = ctx.clone();
        async move { run_sql(&ctx, &slow_sql()).await.map(|(b, _)| b.len()) }
    });
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let mut n = vec![];
    for p in ports {
        n.push(tasks_on(*p).await.unwrap_or(usize::MAX));
    }
    println!("worker task entries just before the kill: {n:?}");
    let pid = children[1].id();
    children[1].start_kill()?;
    let killed_at = t.elapsed();
    println!("SIGKILL sent to worker pid {pid:?} at {:.2}s", killed_at.as_secs_f64());
    match tokio::time::timeout(Duration::from_secs(120), q).await {
        Err(_) => println!("query did NOT finish within 120 s after the kill (hang)"),
        Ok(r) => {
            let r = r?;
            let after = t.elapsed() - killed_at;
            match r {
                Ok(n) => println!("query finished OK ({n} batches) {:.2}s after kill (was it already done?)", after.as_secs_f64()),
                Err(e) => println!("query failed {:.3}s after kill with: {e}", after.as_secs_f64()),
            }
        }
    }
    // the surviving worker: are its tasks gone, does it stop computing?
    let survivor = children[0].id().unwrap();
    let mut prev = cpu_ticks(survivor);
    for i in 1..=8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu_ticks(survivor);
        println!(
            "  +{i}s after the failure: surviving worker CPU ticks in last second {}, task entries {}",
            now - prev,
            tasks_on(ports[0]).await.unwrap_or(usize::MAX)
        );
        prev = now;
    }
    // a new query with the dead worker still listed
    let t = Instant::now();
    match tokio::time::timeout(Duration::from_secs(120), run_sql(&ctx, Q12)).await {
        Err(_) => println!("next query with a dead worker in the list: hang > 120 s"),
        Ok(Ok(_)) => println!("next query with a dead worker in the list: OK in {:.2}s", t.elapsed().as_secs_f64()),
        Ok(Err(e)) => println!("next query with a dead worker in the list: failed after {:.3}s: {e}", t.elapsed().as_secs_f64()),
    }
    Ok(())
}

async fn coord(exps: Vec<String>) -> Result<(), BoxErr> {
    let ports: Vec<u16> = std::env::var("SPIKE_PORTS")
        .unwrap_or_else(|_| "50071,50072".to_string())
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    let mut env: Vec<(&str, &str)> = vec![];
    if exps.iter().any(|e| e == "reinstall") {
        env.push(("SPIKE_WORKER_REINSTALL_FACTORY", "1"));
    }
    let mut children = vec![];
    for p in &ports {
        children.push(spawn_worker(*p, &env)?);
    }
    for p in &ports {
        wait_port(*p).await;
    }
    let pids: Vec<u32> = children.iter().map(|c| c.id().unwrap()).collect();
    println!("workers: ports {ports:?}, pids {pids:?}");
    let urls: Vec<Url> = ports
        .iter()
        .map(|p| Url::parse(&format!("http://127.0.0.1:{p}")).unwrap())
        .collect();
    let all = exps.is_empty();
    let has = |e: &str| all || exps.iter().any(|x| x == e);
    if has("bench") {
        bench(&urls).await?;
    }
    if exps.iter().any(|e| e == "slow") {
        let local = local_ctx();
        register(&local).await?;
        let t = Instant::now();
        let (b, _) = run_sql(&local, &slow_sql()).await?;
        println!("slow query local: {:.2}s\n{}", t.elapsed().as_secs_f64(), pretty_format_batches(&b)?);
        let dist = dist_state(&urls, Some(&secret()), None);
        register(&dist).await?;
        let c0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        let s0 = cpu_ticks(std::process::id());
        let t = Instant::now();
        let (b, _) = run_sql(&dist, &slow_sql()).await?;
        let el = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let c1: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        println!(
            "slow query distributed: {el:.2}s; worker CPU ticks used by the full run {:?}, coordinator {}\n{}",
            c0.iter().zip(&c1).map(|(a, b)| b - a).collect::<Vec<_>>(),
            cpu_ticks(std::process::id()) - s0,
            pretty_format_batches(&b)?
        );
    }
    if has("auth") {
        auth(&urls).await?;
    }
    if has("codec") || has("reinstall") {
        codec_roundtrip().await?;
        codec_distributed(&urls).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await; // let worker logs flush
    }
    if has("cancel") {
        cancel(&urls, &ports, &pids).await?;
    }
    if has("kill") {
        kill(&urls, &ports, &mut children).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxErr> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => run_worker(args[2].parse()?).await,
        Some("coord") => coord(args[2..].to_vec()).await,
        _ => {
            eprintln!("usage: spike-dd worker <port> | spike-dd coord [bench|auth|cancel|kill|codec|reinstall]...");
            Ok(())
        }
    }
}
