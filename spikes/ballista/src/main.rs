//! Spike of Apache DataFusion Ballista 55.0.0 (DataFusion 55.2, tonic 0.14.9).
//! The counterpart of spikes/datafusion-distributed.
//!
//! Subcommands:
//!   spike-ballista scheduler <port>                         the scheduler (in-memory cluster state)
//!   spike-ballista executor <flight_port> <grpc_port> <scheduler_port>
//!   spike-ballista coord [experiments...]                   spawns 1 scheduler + 2 executors, then runs
//!                                                           bench, slow, udf, auth, cancel, kill (default: bench udf cancel kill)
//!
//! Env: SPIKE_SECRET (default "s3cr3t"), SPIKE_AUTH=1 (scheduler + executor Flight check the secret),
//!      SPIKE_DATA (default /tmp/spike-tpch), SPIKE_RUNS (default 5), SPIKE_SLOW_SQL,
//!      SPIKE_LOG=info|debug (log crate level, default warn), SPIKE_EXEC_NO_UDF=1,
//!      SPIKE_EXEC_NO_STORE=1, SPIKE_SCHED_NO_UDF=1, SPIKE_SCHED_NO_STORE=1 (leave the UDF / the
//!      lakehost:// store off that process).

use ballista_core::JobId;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::extension::{EndpointOverrideFn, SessionConfigExt};
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::serde::protobuf::{
    CancelJobParams, ExecuteQueryParams, GetJobMetricsParams, GetJobStatusParams, KeyValuePair,
    execute_query_params::Query, execute_query_result, job_status, operator_metric,
};
use ballista_core::serde::scheduler::PartitionId;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_executor::flight_service::BallistaFlightService;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::create_scheduler;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::Result;
use datafusion::execution::SessionState;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use futures::TryStreamExt;
use prost::Message;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
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

/// Same slow query as the dd spike (~27M-row self join + md5).
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

fn auth_on() -> bool {
    std::env::var("SPIKE_AUTH").is_ok_and(|v| v == "1")
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

fn data_dir() -> String {
    std::env::var("SPIKE_DATA").unwrap_or_else(|_| "/tmp/spike-tpch".to_string())
}

const WORK_ROOT: &str = "/tmp/spike-ballista-work";

// ---------------------------------------------------------------------------------------------
// A minimal `log` logger (Ballista logs through `log`), so we need no logging crate.
// ---------------------------------------------------------------------------------------------

struct StderrLog(&'static str);
impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} {}] {} {}: {}", self.0, std::process::id(), r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

fn init_log(role: &'static str) {
    let lvl = match std::env::var("SPIKE_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("info") => log::LevelFilter::Info,
        Ok("error") => log::LevelFilter::Error,
        _ => log::LevelFilter::Warn,
    };
    let _ = log::set_logger(Box::leak(Box::new(StderrLog(role))));
    log::set_max_level(lvl);
}

// ---------------------------------------------------------------------------------------------
// (6) lakehost-specific plugging: a trivial scalar UDF and a `lakehost://lake/` object store.
// ---------------------------------------------------------------------------------------------

static UDF_CALLS: AtomicUsize = AtomicUsize::new(0);

/// `lh_plus1(Int64) -> Int64`, counting its invocations in this process.
fn lh_plus1() -> ScalarUDF {
    create_udf(
        "lh_plus1",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| -> Result<ColumnarValue> {
            let n = UDF_CALLS.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                eprintln!("[pid {}] lh_plus1 invoked here (first call)", std::process::id());
            }
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let a = arrays[0].as_any().downcast_ref::<Int64Array>().unwrap();
            let out: Int64Array = a.iter().map(|v| v.map(|v| v + 1)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

fn lake_url() -> Url {
    Url::parse("lakehost://lake/").unwrap()
}

fn lake_store() -> Arc<dyn object_store::ObjectStore> {
    Arc::new(object_store::local::LocalFileSystem::new_with_prefix(data_dir()).unwrap())
}

fn register_lake_store(rt: &RuntimeEnv) {
    rt.register_object_store(&lake_url(), lake_store());
}

// ---------------------------------------------------------------------------------------------
// Auth: a tonic interceptor on the servers. Two ways a caller may present the secret:
// `authorization: Bearer <secret>` metadata (what `with_ballista_grpc_metadata` sends, client ->
// scheduler only), or a `user-agent` that starts with `lakehost-<secret>` (the only header that the
// `override_create_grpc_client_endpoint` hook - a function Endpoint -> Endpoint - can set; it is
// used by executor -> scheduler, scheduler -> executor, executor -> executor and client -> executor).
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct CheckSecret {
    who: &'static str,
    expected: String,
    rejected: Arc<AtomicUsize>,
}

impl tonic::service::Interceptor for CheckSecret {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let bearer = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| v == self.expected);
        let ua = req
            .metadata()
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(&format!("lakehost-{} ", self.expected)));
        if bearer || ua {
            Ok(req)
        } else {
            let n = self.rejected.fetch_add(1, Ordering::SeqCst) + 1;
            eprintln!(
                "[{} {}] rejected request #{n} without valid secret (user-agent {:?})",
                self.who,
                std::process::id(),
                req.metadata().get("user-agent")
            );
            Err(tonic::Status::unauthenticated("missing or wrong cluster secret"))
        }
    }
}

fn secret_endpoint(secret: Option<String>) -> EndpointOverrideFn {
    Arc::new(move |ep: tonic::transport::Endpoint| -> Result<tonic::transport::Endpoint, BoxErr> {
        Ok(match &secret {
            Some(s) => ep.user_agent(format!("lakehost-{s}"))?,
            None => ep,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Scheduler
// ---------------------------------------------------------------------------------------------

async fn run_scheduler(port: u16) -> Result<(), BoxErr> {
    init_log("scheduler");
    let no_udf = flag("SPIKE_SCHED_NO_UDF");
    let no_store = flag("SPIKE_SCHED_NO_STORE");
    let mut config = SchedulerConfig::default()
        .with_port(port)
        .with_hostname("127.0.0.1")
        .with_scheduler_policy(TaskSchedulingPolicy::PushStaged)
        // The scheduler decodes the submitted physical plan with a session of its own.
        .with_override_session_builder(Arc::new(move |cfg: SessionConfig| -> Result<SessionState> {
            let mut state: SessionState = ballista_core::utils::default_session_builder(cfg)?;
            if !no_udf {
                datafusion::execution::FunctionRegistry::register_udf(&mut state, Arc::new(lh_plus1()))?;
            }
            if !no_store {
                register_lake_store(state.runtime_env());
            }
            Ok(state)
        }));
    config.bind_host = "127.0.0.1".into();
    if auth_on() {
        // scheduler -> executor calls (LaunchMultiTask, CancelTasks, RemoveJobData)
        config = config.with_override_create_grpc_client_endpoint(secret_endpoint(Some(secret())));
    }
    let config = Arc::new(config);
    let cluster = BallistaCluster::new_from_config(&config).await?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    if !auth_on() {
        ballista_scheduler::scheduler_process::start_server(cluster, addr, config).await?;
        return Ok(());
    }
    // Reassembled server: only the SchedulerGrpc service (no Flight proxy, no REST/health routes),
    // behind an interceptor that runs before the request message (the plan) is decoded.
    let scheduler =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, config.clone()).await?;
    let svc = SchedulerGrpcServer::new(scheduler)
        .max_decoding_message_size(config.grpc_server_max_decoding_message_size as usize)
        .max_encoding_message_size(config.grpc_server_max_encoding_message_size as usize);
    let check = CheckSecret { who: "scheduler", expected: secret(), rejected: Arc::new(AtomicUsize::new(0)) };
    eprintln!("[scheduler {}] auth on: SchedulerGrpc behind an interceptor on {addr}", std::process::id());
    tonic::transport::Server::builder()
        .add_service(tonic::service::interceptor::InterceptedService::new(svc, check))
        .serve(addr)
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Executor
// ---------------------------------------------------------------------------------------------

async fn run_executor(flight_port: u16, grpc_port: u16, scheduler_port: u16) -> Result<(), BoxErr> {
    init_log("executor");
    let work_dir = format!("{WORK_ROOT}/{flight_port}");
    std::fs::create_dir_all(&work_dir)?;
    let mut registry = ballista_core::registry::BallistaFunctionRegistry::default();
    if !flag("SPIKE_EXEC_NO_UDF") {
        registry.scalar_functions.insert("lh_plus1".into(), Arc::new(lh_plus1()));
    }
    let no_store = flag("SPIKE_EXEC_NO_STORE");
    let wd = work_dir.clone();
    let auth = auth_on();
    let sec = secret();
    let mut cfg = ExecutorProcessConfig {
        bind_host: "127.0.0.1".into(),
        external_host: Some("127.0.0.1".into()),
        port: flight_port,
        grpc_port,
        scheduler_host: "127.0.0.1".into(),
        scheduler_port,
        work_dir: Some(work_dir.clone()),
        task_scheduling_policy: TaskSchedulingPolicy::PushStaged,
        override_function_registry: Some(Arc::new(registry)),
        override_runtime_producer: Some(Arc::new(move |_cfg: &SessionConfig| -> Result<Arc<RuntimeEnv>> {
            let rt = RuntimeEnvBuilder::new().with_temp_file_path(wd.clone()).build()?;
            if !no_store {
                register_lake_store(&rt);
            }
            Ok(Arc::new(rt))
        })),
        ..Default::default()
    };
    if auth {
        // executor -> scheduler (register, heartbeat, task status)
        cfg.override_create_grpc_client_endpoint = Some(secret_endpoint(Some(sec.clone())));
        // executor -> executor shuffle fetches use the task's SessionConfig
        let s2 = sec.clone();
        cfg.override_config_producer = Some(Arc::new(move || {
            SessionConfig::new_with_ballista()
                .with_ballista_override_create_grpc_client_endpoint(secret_endpoint(Some(s2.clone())))
        }));
        // the Flight server (shuffle + result fetch) behind the interceptor
        let s3 = sec.clone();
        cfg.override_arrow_flight_service = Some(Arc::new(
            move |work_dir: String,
                  addr: SocketAddr,
                  mut shutdown: ballista_executor::shutdown::Shutdown,
                  _grpc: ballista_core::utils::GrpcServerConfig| {
                let check = CheckSecret { who: "executor-flight", expected: s3.clone(), rejected: Arc::new(AtomicUsize::new(0)) };
                tokio::spawn(async move {
                    let svc = arrow_flight::flight_service_server::FlightServiceServer::new(
                        BallistaFlightService::new(work_dir),
                    )
                    .max_decoding_message_size(16 * 1024 * 1024)
                    .max_encoding_message_size(16 * 1024 * 1024);
                    tonic::transport::Server::builder()
                        .add_service(tonic::service::interceptor::InterceptedService::new(svc, check))
                        .serve_with_shutdown(addr, async move { shutdown.recv().await })
                        .await
                        .map_err(ballista_core::error::BallistaError::TonicError)
                })
            },
        ));
    }
    start_executor_process(Arc::new(cfg)).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Coordinator
// ---------------------------------------------------------------------------------------------

struct Cluster {
    scheduler_port: u16,
    children: Vec<tokio::process::Child>, // [scheduler, exec1, exec2]
    exec_ports: Vec<u16>,                 // flight ports
}

impl Cluster {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.scheduler_port)
    }
    fn exec_pids(&self) -> Vec<u32> {
        self.children[1..].iter().filter_map(|c| c.id()).collect()
    }
}

fn spawn_self(args: &[String]) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(args).kill_on_drop(true);
    cmd.spawn()
}

async fn wait_port(port: u16) {
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("port {port} did not come up");
}

async fn start_cluster() -> Result<Cluster, BoxErr> {
    let _ = std::fs::remove_dir_all(WORK_ROOT);
    let sp = 50050u16;
    let mut children = vec![spawn_self(&["scheduler".into(), sp.to_string()])?];
    wait_port(sp).await;
    let exec_ports = vec![50061u16, 50063u16];
    for p in &exec_ports {
        children.push(spawn_self(&["executor".into(), p.to_string(), (p + 1).to_string(), sp.to_string()])?);
    }
    for p in &exec_ports {
        wait_port(*p).await;
    }
    // registration happens on the first heartbeat/register call; give it a moment
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = Cluster { scheduler_port: sp, children, exec_ports };
    println!(
        "cluster: scheduler :{} pid {:?}; executors flight {:?} pids {:?}",
        sp,
        c.children[0].id(),
        c.exec_ports,
        c.exec_pids()
    );
    Ok(c)
}

fn local_ctx() -> SessionContext {
    let ctx = SessionContext::new_with_config(SessionConfig::new());
    ctx.register_udf(lh_plus1());
    register_lake_store(ctx.runtime_env().as_ref());
    ctx
}

/// The coordinator's context: plain DataFusion planning, a Ballista-extended SessionConfig so
/// the ballista.* settings and the client-side gRPC hooks are available.
fn coord_ctx(secret: Option<&str>) -> SessionContext {
    let mut cfg = SessionConfig::new_with_ballista();
    // Ballista's defaults: target_partitions 16, prefer_hash_join false (sort-merge joins).
    if let Some(n) = std::env::var("SPIKE_TARGET_PARTITIONS").ok().and_then(|v| v.parse().ok()) {
        cfg = cfg.with_target_partitions(n);
    }
    if flag("SPIKE_PREFER_HASH_JOIN") {
        cfg = cfg.set_bool("datafusion.optimizer.prefer_hash_join", true);
    }
    if let Some(s) = secret {
        cfg = cfg
            .with_ballista_grpc_metadata(HashMap::from([("authorization".to_string(), format!("Bearer {s}"))]))
            .with_ballista_override_create_grpc_client_endpoint(secret_endpoint(Some(s.to_string())));
    }
    let ctx = SessionContext::new_with_config(cfg);
    ctx.register_udf(lh_plus1());
    register_lake_store(ctx.runtime_env().as_ref());
    ctx
}

async fn register(ctx: &SessionContext) -> Result<()> {
    for t in ["lineitem", "orders", "customer"] {
        ctx.register_parquet(t, format!("{}/{t}/", data_dir()), ParquetReadOptions::default()).await?;
    }
    // the same lineitem files through the custom object store URL
    ctx.register_parquet("lineitem_lh", "lakehost://lake/lineitem/", ParquetReadOptions::default())
        .await?;
    Ok(())
}

async fn run_local(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

async fn plan(ctx: &SessionContext, sql: &str) -> Result<Arc<dyn ExecutionPlan>> {
    ctx.sql(sql).await?.create_physical_plan().await
}

/// The realistic path: an already-built physical plan handed to
/// `ballista_core::execution_plans::execute_physical_plan` (push mode: the scheduler streams job
/// status back; results are fetched from the executors over Flight).
async fn run_dist(url: &str, ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    let p = plan(ctx, sql).await?;
    let state = ctx.state();
    let cfg = state.config();
    let stream = ballista_core::execution_plans::execute_physical_plan::<PhysicalPlanNode>(
        url.to_string(),
        &cfg.ballista_config(),
        p,
        &BallistaPhysicalExtensionCodec::default(),
        ctx.session_id(),
        cfg.clone(),
    )
    .await?;
    stream.try_collect().await
}

/// Our own minimal client over the generated SchedulerGrpc API, to get hold of the job id
/// (execute_physical_plan keeps it private): ExecuteQuery (pull mode), poll GetJobStatus.
async fn scheduler_client(
    url: &str,
    secret: Option<&str>,
) -> Result<SchedulerGrpcClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, ballista_core::extension::BallistaGrpcMetadataInterceptor>>, BoxErr> {
    let ch = tonic::transport::Endpoint::from_shared(url.to_string())?.connect().await?;
    let md = secret
        .map(|s| HashMap::from([("authorization".to_string(), format!("Bearer {s}"))]))
        .unwrap_or_default();
    Ok(SchedulerGrpcClient::with_interceptor(
        ch,
        ballista_core::extension::BallistaGrpcMetadataInterceptor::new(md),
    )
    .max_decoding_message_size(64 << 20)
    .max_encoding_message_size(64 << 20))
}

async fn submit(url: &str, ctx: &SessionContext, sql: &str, secret: Option<&str>) -> Result<String, BoxErr> {
    let p = plan(ctx, sql).await?;
    let node = PhysicalPlanNode::try_from_physical_plan(p, &BallistaPhysicalExtensionCodec::default())?;
    let settings = ctx
        .state()
        .config()
        .options()
        .entries()
        .into_iter()
        .map(|e| KeyValuePair { key: e.key, value: e.value })
        .collect();
    let mut req = tonic::Request::new(ExecuteQueryParams {
        query: Some(Query::PhysicalPlan(node.encode_to_vec())),
        settings,
        session_id: ctx.session_id(),
        operation_id: format!("spike-{}", std::process::id()),
    });
    ballista_core::version::insert_version_header(req.metadata_mut());
    let mut c = scheduler_client(url, secret).await?;
    let r = c.execute_query(req).await?.into_inner();
    match r.result {
        Some(execute_query_result::Result::Success(s)) => Ok(s.job_id),
        other => Err(format!("submit failed: {other:?}").into()),
    }
}

/// Polls until the job ends; returns ("successful"|"failed: ..."|"cancelled?", elapsed).
async fn wait_job(url: &str, job_id: &str, timeout: Duration) -> Result<String, BoxErr> {
    let mut c = scheduler_client(url, Some(&secret())).await?;
    let t = Instant::now();
    loop {
        let s = c.get_job_status(GetJobStatusParams { job_id: job_id.into() }).await?.into_inner();
        match s.status.and_then(|s| s.status) {
            Some(job_status::Status::Successful(_)) => return Ok("successful".into()),
            Some(job_status::Status::Failed(f)) => return Ok(format!("failed: {}", f.error)),
            _ => {}
        }
        if t.elapsed() > timeout {
            return Ok("still running at timeout".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sorted_lines(batches: &[RecordBatch]) -> Vec<String> {
    let s = pretty_format_batches(batches).map(|d| d.to_string()).unwrap_or_default();
    let mut v: Vec<String> = s.lines().map(|l| l.to_string()).collect();
    v.sort();
    v
}

fn lo_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
    s.lines()
        .find(|l| l.trim_start().starts_with("lo:"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// Bytes of the shuffle files of a job, per stage, summed over the executors' work dirs.
fn shuffle_files(job_id: &str) -> Vec<(String, u64, usize)> {
    let mut per_stage: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
    fn walk(dir: &std::path::Path, stage: &str, acc: &mut std::collections::BTreeMap<String, (u64, usize)>) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, stage, acc);
                } else if let Ok(m) = e.metadata() {
                    let en = acc.entry(stage.to_string()).or_default();
                    en.0 += m.len();
                    en.1 += 1;
                }
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(WORK_ROOT) {
        for ex in rd.flatten() {
            let jd = ex.path().join(job_id);
            if let Ok(stages) = std::fs::read_dir(&jd) {
                for st in stages.flatten() {
                    let name = st.file_name().to_string_lossy().to_string();
                    walk(&st.path(), &name, &mut per_stage);
                }
            }
        }
    }
    per_stage.into_iter().map(|(k, (b, n))| (k, b, n)).collect()
}

/// Job metrics from the scheduler (GetJobMetrics): per stage, partitions (= tasks), the
/// stage's top operator, rows written by the ShuffleWriter, bytes decoded by ShuffleReaders,
/// and local/remote partition reads.
async fn job_metrics(url: &str, job_id: &str, print_ops: bool) -> Result<Vec<(u32, u32, String)>, BoxErr> {
    let mut c = scheduler_client(url, Some(&secret())).await?;
    let m = c.get_job_metrics(GetJobMetricsParams { job_id: job_id.into() }).await?.into_inner();
    let mut out = vec![];
    for st in &m.stages {
        let mut named: HashMap<String, u64> = HashMap::new();
        let mut top_rows = 0u64;
        let mut top_bytes = 0u64;
        for (i, op) in st.operators.iter().enumerate() {
            for met in &op.metrics {
                match &met.metric {
                    Some(operator_metric::Metric::OutputRows(v)) if i == 0 => top_rows += v,
                    Some(operator_metric::Metric::OutputBytes(v)) if i == 0 => top_bytes += v,
                    Some(operator_metric::Metric::Count(c)) if op.operator_type.contains("ShuffleReader") => {
                        *named.entry(c.name.clone()).or_default() += c.value
                    }
                    _ => {}
                }
            }
            if print_ops {
                println!("    stage {} {}{}: {}", st.stage_id, "  ".repeat(op.depth as usize), op.operator_type, op.operator_desc.chars().take(110).collect::<String>());
            }
        }
        let top = st.operators.first().map(|o| o.operator_type.clone()).unwrap_or_default();
        let mut named: Vec<_> = named.into_iter().collect();
        named.sort();
        out.push((
            st.stage_id,
            st.partitions,
            format!("{top}: out_rows {top_rows} out_bytes {top_bytes}; readers {named:?}"),
        ));
    }
    Ok(out)
}

async fn bench(c: &Cluster) -> Result<(), BoxErr> {
    let runs: usize = std::env::var("SPIKE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let url = c.url();
    let local = local_ctx();
    register(&local).await?;
    let sec = auth_on().then(secret);
    let dist = coord_ctx(sec.as_deref());
    register(&dist).await?;
    let mut table = vec![];
    for (name, sql) in [("Q1", Q1), ("Q3", Q3), ("Q12", Q12)] {
        let (mut lt, mut dt) = (vec![], vec![]);
        let (mut lo, mut dout) = (vec![], vec![]);
        for _ in 0..runs {
            let t = Instant::now();
            lo = sorted_lines(&run_local(&local, sql).await?);
            lt.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            dout = sorted_lines(&run_dist(&url, &dist, sql).await?);
            dt.push(t.elapsed().as_secs_f64());
        }
        let equal = lo == dout;
        if !equal {
            println!("MISMATCH {name}\nlocal:\n{}\ndistributed:\n{}", lo.join("\n"), dout.join("\n"));
        }
        // bytes over loopback for one distributed run (rx of `lo`; lo is otherwise idle here)
        let lo0 = lo_bytes();
        let _ = run_dist(&url, &dist, sql).await?;
        let lo_delta = lo_bytes() - lo0;
        // one more distributed run through our own client, for the job id -> metrics + shuffle files
        let job = submit(&url, &dist, sql, sec.as_deref()).await?;
        let st = wait_job(&url, &job, Duration::from_secs(60)).await?;
        let files = shuffle_files(&job);
        let print_ops = name == "Q3" || flag("SPIKE_PRINT_ALL_PLANS");
        if print_ops {
            println!("==== Q3 job {job} ({st}) stages/operators ====");
        }
        let mets = job_metrics(&url, &job, print_ops).await?;
        let tasks: u32 = mets.iter().map(|m| m.1).sum();
        let bytes: u64 = files.iter().map(|f| f.1).sum();
        println!("{name}: {} rows; job {job} {st}", lo.len().saturating_sub(4));
        for m in &mets {
            println!("  stage {} x{} tasks: {}", m.0, m.1, m.2);
        }
        println!("  shuffle files (stage, bytes, files): {files:?}");
        table.push(format!(
            "| {name} | {:.2} ({}) | {:.2} ({}) | {equal} | {} stages / {tasks} tasks | {lo_delta} B over lo | {bytes} B shuffle files left at end |",
            median(&lt),
            lt.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(" "),
            median(&dt),
            dt.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(" "),
            mets.len(),
        ));
    }
    println!("\n| query | local s median (runs) | distributed s median (runs) | same rows | stages/tasks | bytes over loopback | shuffle files |");
    println!("|---|---|---|---|---|---|---|");
    for r in table {
        println!("{r}");
    }
    Ok(())
}

async fn slow(c: &Cluster) -> Result<(), BoxErr> {
    println!("\n==== slow query: local vs distributed ====");
    let local = local_ctx();
    register(&local).await?;
    let t = Instant::now();
    let lo = sorted_lines(&run_local(&local, &slow_sql()).await?);
    println!("slow local {:.2}s", t.elapsed().as_secs_f64());
    let dist = coord_ctx(auth_on().then(secret).as_deref());
    register(&dist).await?;
    let pids = c.exec_pids();
    let c0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let t = Instant::now();
    let d = sorted_lines(&run_dist(&c.url(), &dist, &slow_sql()).await?);
    let el = t.elapsed().as_secs_f64();
    let c1: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    println!(
        "slow distributed {el:.2}s, same rows {}; executor CPU ticks for the full run {:?}",
        lo == d,
        c0.iter().zip(&c1).map(|(a, b)| b - a).collect::<Vec<_>>()
    );
    Ok(())
}

async fn udf(c: &Cluster) -> Result<(), BoxErr> {
    println!("\n==== (6) UDF + lakehost:// object store through the cluster ====");
    let local = local_ctx();
    register(&local).await?;
    let dist = coord_ctx(auth_on().then(secret).as_deref());
    register(&dist).await?;
    for sql in [
        "select l_returnflag, sum(lh_plus1(l_orderkey)) as s, count(*) as n from lineitem group by 1 order by 1",
        "select l_returnflag, sum(l_orderkey) as s, count(*) as n from lineitem_lh group by 1 order by 1",
        "select l_returnflag, sum(lh_plus1(l_orderkey)) as s from lineitem_lh group by 1 order by 1",
    ] {
        let before = UDF_CALLS.load(Ordering::SeqCst);
        let lo = sorted_lines(&run_local(&local, sql).await?);
        let mid = UDF_CALLS.load(Ordering::SeqCst);
        let t = Instant::now();
        match run_dist(&c.url(), &dist, sql).await {
            Ok(b) => {
                let d = sorted_lines(&b);
                println!(
                    "OK {:.2}s same rows {} (udf calls in coordinator: local run {}, distributed run {}): {sql}",
                    t.elapsed().as_secs_f64(),
                    lo == d,
                    mid - before,
                    UDF_CALLS.load(Ordering::SeqCst) - mid
                );
                if lo != d {
                    println!("{}\n vs\n{}", lo.join("\n"), d.join("\n"));
                }
            }
            Err(e) => println!("ERROR after {:.2}s: {e}\n   for: {sql}", t.elapsed().as_secs_f64()),
        }
    }
    // the plan the coordinator ships: does the scan carry the lakehost:// URL?
    let p = plan(&dist, "select count(*) from lineitem_lh where l_quantity > 49").await?;
    let s = datafusion::physical_plan::displayable(p.as_ref()).indent(false).to_string();
    println!("coordinator plan for lineitem_lh:\n{s}");
    Ok(())
}

async fn auth(c: &Cluster) -> Result<(), BoxErr> {
    println!("\n==== (3) auth (cluster started with SPIKE_AUTH={}) ====", auth_on() as u8);
    let url = c.url();
    for (label, s) in [("no secret", None), ("wrong secret", Some("nope".to_string())), ("right secret", Some(secret()))] {
        let ctx = coord_ctx(s.as_deref());
        register(&ctx).await?;
        let t = Instant::now();
        match tokio::time::timeout(Duration::from_secs(60), run_dist(&url, &ctx, Q12)).await {
            Err(_) => println!("auth [{label}]: TIMEOUT 60s"),
            Ok(Ok(b)) => println!("auth [{label}]: OK {} rows in {:.2}s", b.iter().map(|b| b.num_rows()).sum::<usize>(), t.elapsed().as_secs_f64()),
            Ok(Err(e)) => println!("auth [{label}]: ERROR after {:.3}s: {}", t.elapsed().as_secs_f64(), e.to_string().chars().take(300).collect::<String>()),
        }
    }
    // direct Flight call to an executor, without / with the secret (a bogus partition)
    for (label, s) in [("no secret", None), ("right secret", Some(secret()))] {
        let ep = s.map(|s| Arc::new(ballista_core::extension::BallistaConfigGrpcEndpoint::new(secret_endpoint(Some(s)))));
        let r = async {
            let mut bc = ballista_core::client::BallistaClient::try_new("127.0.0.1", c.exec_ports[0], 16 << 20, false, ep, 1, 10, 0, 0).await?;
            let pid = PartitionId { job_id: JobId::from("nojob".to_string()), stage_id: 1, partition_id: 0 };
            bc.fetch_partition("x", &pid, None, Default::default(), true).await?;
            Ok::<(), ballista_core::error::BallistaError>(())
        }
        .await;
        println!("executor Flight fetch [{label}]: {:?}", r.map_err(|e| e.to_string().chars().take(200).collect::<String>()));
    }
    // executor gRPC (push-mode task launch/cancel) port: not behind our interceptor
    println!("(executor gRPC ports {:?} are served by executor_server::startup, no hook for a layer)", c.exec_ports.iter().map(|p| p + 1).collect::<Vec<_>>());
    Ok(())
}

async fn sample_cpu(pids: &[u32], secs: usize, label: &str) {
    let mut prev: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    for i in 1..=secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        println!("  +{i:2}s {label}: executor CPU ticks in last second {:?}", prev.iter().zip(&now).map(|(a, b)| b - a).collect::<Vec<_>>());
        prev = now;
    }
}

async fn cancel(c: &Cluster) -> Result<(), BoxErr> {
    let url = c.url();
    let pids = c.exec_pids();
    let sec = auth_on().then(secret);
    let ctx = coord_ctx(sec.as_deref());
    register(&ctx).await?;

    println!("\n==== (4a) cancel = drop the execute_physical_plan stream at 2 s ====");
    let q = tokio::spawn({
        let (url, ctx) = (url.clone(), ctx.clone());
        async move { run_dist(&url, &ctx, &slow_sql()).await.map(|b| b.len()) }
    });
    tokio::time::sleep(Duration::from_millis(2000)).await;
    q.abort();
    let t = Instant::now();
    let _ = q.await;
    println!("client task aborted/dropped ({} ms)", t.elapsed().as_millis());
    sample_cpu(&pids, 10, "after drop").await;
    // wait until the executors are idle before the next part
    for _ in 0..40 {
        let a: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let b: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        if a.iter().zip(&b).all(|(x, y)| y - x < 5) {
            break;
        }
    }

    println!("\n==== (4b) cancel = CancelJob RPC at 2 s (job submitted with our own client) ====");
    let job = submit(&url, &ctx, &slow_sql(), sec.as_deref()).await?;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let mut sc = scheduler_client(&url, sec.as_deref()).await?;
    let t = Instant::now();
    let r = sc.cancel_job(CancelJobParams { job_id: job.clone() }).await?.into_inner();
    println!("CancelJob({job}) -> cancelled={} in {} ms", r.cancelled, t.elapsed().as_millis());
    let st = wait_job(&url, &job, Duration::from_secs(2)).await?;
    println!("job status after cancel: {st}");
    sample_cpu(&pids, 10, "after CancelJob").await;
    Ok(())
}

async fn kill(c: &mut Cluster) -> Result<(), BoxErr> {
    println!("\n==== (5) kill -9 one executor mid-query ====");
    let url = c.url();
    let sec = auth_on().then(secret);
    let ctx = coord_ctx(sec.as_deref());
    register(&ctx).await?;
    let t = Instant::now();
    let q = tokio::spawn({
        let (url, ctx) = (url.clone(), ctx.clone());
        async move { run_dist(&url, &ctx, &slow_sql()).await.map(|b| sorted_lines(&b)) }
    });
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let pid = c.children[2].id();
    c.children[2].start_kill()?;
    let killed_at = t.elapsed();
    println!("SIGKILL to executor pid {pid:?} (flight :{}) at {:.2}s", c.exec_ports[1], killed_at.as_secs_f64());
    let survivor = c.children[1].id().unwrap();
    let timeout = std::env::var("SPIKE_KILL_TIMEOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(240u64);
    let mut q = q;
    let mut last = cpu_ticks(survivor);
    let mut waited = 0;
    let res = loop {
        match tokio::time::timeout(Duration::from_secs(5), &mut q).await {
            Ok(r) => break Some(r?),
            Err(_) => {
                waited += 5;
                let now = cpu_ticks(survivor);
                println!("  +{waited}s after kill: still waiting; survivor CPU ticks last 5 s: {}", now - last);
                last = now;
                if waited >= timeout {
                    break None;
                }
            }
        }
    };
    let after = t.elapsed() - killed_at;
    match res {
        None => println!("query did NOT finish within {timeout} s after the kill (hang)"),
        Some(Ok(rows)) => {
            let local = local_ctx();
            register(&local).await?;
            let lo = sorted_lines(&run_local(&local, &slow_sql()).await?);
            println!("query finished OK {:.2}s after the kill; same rows as local: {}", after.as_secs_f64(), lo == rows);
            if lo != rows {
                println!("local:\n{}\ndistributed after the kill:\n{}", lo.join("\n"), rows.join("\n"));
            }
        }
        Some(Err(e)) => println!("query failed {:.2}s after the kill with: {e}", after.as_secs_f64()),
    }
    let t = Instant::now();
    match tokio::time::timeout(Duration::from_secs(120), run_dist(&url, &ctx, Q12)).await {
        Err(_) => println!("next query (Q12): hang > 120 s"),
        Ok(Ok(b)) => println!("next query (Q12): OK {} rows in {:.2}s", b.iter().map(|b| b.num_rows()).sum::<usize>(), t.elapsed().as_secs_f64()),
        Ok(Err(e)) => println!("next query (Q12): failed after {:.2}s: {e}", t.elapsed().as_secs_f64()),
    }
    Ok(())
}

async fn coord(exps: Vec<String>) -> Result<(), BoxErr> {
    init_log("coord");
    if flag("SPIKE_HEARTBEAT") {
        // a plain OS thread: tells a stalled tokio runtime apart from a stalled machine
        std::thread::spawn(|| {
            let t0 = Instant::now();
            let mut last = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let gap = last.elapsed();
                if gap > Duration::from_millis(1500) {
                    eprintln!("[coord heartbeat] OS thread slept 500 ms but woke after {gap:?} (t={:?})", t0.elapsed());
                }
                last = Instant::now();
            }
        });
        tokio::spawn(async {
            let t0 = Instant::now();
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let gap = last.elapsed();
                if gap > Duration::from_millis(1500) {
                    eprintln!("[coord heartbeat] tokio task slept 500 ms but woke after {gap:?} (t={:?})", t0.elapsed());
                }
                last = Instant::now();
            }
        });
    }
    let mut c = start_cluster().await?;
    let exps = if exps.is_empty() { vec!["bench".into(), "udf".into(), "cancel".into(), "kill".into()] } else { exps };
    for e in &exps {
        let r = match e.as_str() {
            "bench" => bench(&c).await,
            "slow" => slow(&c).await,
            "udf" => udf(&c).await,
            "auth" => auth(&c).await,
            "cancel" => cancel(&c).await,
            "kill" => kill(&mut c).await,
            other => Err(format!("unknown experiment {other}").into()),
        };
        if let Err(err) = r {
            println!("experiment {e} failed: {err}");
        }
    }
    for ch in c.children.iter_mut() {
        let _ = ch.start_kill();
    }
    Ok(())
}

fn main() -> Result<(), BoxErr> {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        match args.get(1).map(String::as_str) {
            Some("scheduler") => run_scheduler(args[2].parse()?).await,
            Some("executor") => run_executor(args[2].parse()?, args[3].parse()?, args[4].parse()?).await,
            Some("coord") => coord(args[2..].to_vec()).await,
            _ => {
                eprintln!("usage: spike-ballista scheduler <port> | executor <flight> <grpc> <sched> | coord [bench|slow|udf|auth|cancel|kill]...");
                Ok(())
            }
        }
    })
}
