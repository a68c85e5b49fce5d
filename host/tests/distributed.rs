//! Distributed reads across real processes: a coordinating `lakehost serve`
//! and two worker replicas, all on one store (a SQLite file they share) and
//! one lake on S3 (moto, `.ci/s3`), each with the cluster secret.
//!
//! The workers are replicas too: a query sent to a worker runs there alone,
//! which is the local run every distributed answer is compared with. The
//! coordinator distributes every read (`min_scan_bytes = 1`) in tasks of a
//! few kilobytes. Then, in order:
//!
//! 1. TPC-H Q1, Q3, Q12, a three-table join and a `||` grouping (the
//!    bounded operator decoded on workers), on synthetic rows of the TPC-H
//!    columns: each equals the local run, is counted as distributed on the
//!    coordinator, starts tasks on both workers, and its Query resource
//!    says `"workers": 2` (a local run's has no `workers`);
//! 2. an own-client analyst's unfiltered read is refused with the spec's
//!    403 before any task starts; filtered to its clients it runs
//!    distributed and equals the local run;
//! 3. `repeat` past the per-call cap fails on the workers ("Resources
//!    exhausted" from the bounded function, not the machine's memory);
//! 4. a call to a worker without the secret, or with a wrong one, is refused
//!    as Unauthenticated and starts no task;
//! 5. DELETE of a running distributed query ends it CANCELLED, and the
//!    workers stop computing (as a replica running the query alone does:
//!    `engine::yield_points`);
//! 6. `kill -9` of a worker mid-query ends the query FAILED with a reason,
//!    never stuck RUNNING; the next reads go to the worker left, and with
//!    none left they run on the coordinator.
//!
//! Needs moto (`LAKEHOST_TEST_S3_ENDPOINT`: `.ci/s3`); without it (when the
//! test was built) it is reported ignored, and in CI it fails (host/build.rs).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

mod common;

use common::{KillOnDrop, demo_client_token as token, json_of};

const SECRET: &str = "distributed-test-secret-0123456789abcdef";
/// How long any one query may take to end before the test gives up.
const SETTLE: Duration = Duration::from_secs(120);

const LINEITEM_ROWS: u64 = 240_000;

const Q1: &str = "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, \
 sum(l_extendedprice) AS sum_base_price, sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, \
 sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, avg(l_quantity) AS avg_qty, \
 avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc, count(*) AS count_order \
 FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY \
 GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";

/// Q3, with `l_orderkey` breaking ties so the ten rows are one answer.
const Q3: &str = "SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, \
 o_orderdate, o_shippriority FROM customer, orders, lineitem \
 WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey \
 AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15' \
 GROUP BY l_orderkey, o_orderdate, o_shippriority \
 ORDER BY revenue DESC, o_orderdate, l_orderkey LIMIT 10";

const Q12: &str = "SELECT l_shipmode, \
 sum(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH' THEN 1 ELSE 0 END) AS high_line_count, \
 sum(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END) AS low_line_count \
 FROM orders, lineitem WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP') \
 AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate \
 AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1994-01-01' + INTERVAL '1' YEAR \
 GROUP BY l_shipmode ORDER BY l_shipmode";

const JOIN: &str = "SELECT c_mktsegment, count(*) AS lines, sum(l_quantity) AS quantity \
 FROM lineitem JOIN orders ON l_orderkey = o_orderkey JOIN customer ON o_custkey = c_custkey \
 GROUP BY c_mktsegment ORDER BY c_mktsegment";

/// A TopK over string columns (`engine/topk_input.rs` filters its input).
const TOPK: &str = "SELECT l_orderkey, l_shipmode, l_returnflag, l_extendedprice FROM lineitem \
 ORDER BY l_extendedprice DESC, l_orderkey LIMIT 20";

const CONCAT: &str = "SELECT l_returnflag || '/' || l_linestatus AS flags, count(*) AS n \
 FROM lineitem GROUP BY 1 ORDER BY 1";

/// Keeps both workers busy for about a minute and a half (19 billion
/// joined rows; the same join modulo 300 takes 2 s): it is only ever
/// cancelled or cut short by a dead worker here.
const SLOW: &str = "SELECT count(*) AS n, sum(a.l_quantity * b.l_quantity) AS q \
 FROM lineitem a JOIN lineitem b ON a.l_orderkey % 3 = b.l_orderkey % 3";

// ---------------------------------------------------------------------------
// The processes.

/// One `lakehost serve` of the cluster.
struct Process {
    server: KillOnDrop,
    api: String,
    metrics: String,
    worker: String,
}

impl Process {
    fn start(dir: &Path, name: &str, env: &[(String, String)]) -> Self {
        let data_dir = dir.join(name);
        std::fs::create_dir_all(&data_dir).unwrap();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let data_dir = data_dir.display().to_string();
        let mut all: Vec<(&str, &str)> = vec![
            ("RUST_LOG", "info"),
            ("LAKEHOST_STORAGE_DATA_DIR", &data_dir),
        ];
        all.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let (server, output, api) = common::serve(dir, &all, log.into());
        let mut metrics = None;
        let mut worker = None;
        let mut output = output;
        for line in output.by_ref().take(10) {
            let line = line.unwrap();
            let line = line.trim_start();
            if let Some(url) = line.strip_prefix("Metrics:") {
                metrics = Some(url.trim().to_string());
            }
            if let Some(rest) = line.strip_prefix("Worker:") {
                worker = rest.split_whitespace().next().map(str::to_string);
            }
            if line.starts_with("Get a token") {
                break;
            }
        }
        std::thread::spawn(move || output.for_each(drop));
        Self {
            server,
            api,
            metrics: metrics.expect("the banner names the metrics address"),
            worker: worker.expect("the banner names the worker listener"),
        }
    }

    fn pid(&self) -> u32 {
        self.server.0.id()
    }

    /// A counter's value on this process's `/metrics` (0 when absent);
    /// a name without labels sums all its series.
    async fn counter(&self, http: &reqwest::Client, series: &str) -> f64 {
        let text = http
            .get(&self.metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter_map(|line| line.strip_prefix(series))
            .filter_map(|rest| match rest.strip_prefix(' ') {
                Some(value) => Some(value),
                None if !series.contains('{') => rest.split_once("} ").map(|(_, value)| value),
                None => None,
            })
            .filter_map(|value| value.trim().parse::<f64>().ok())
            .sum()
    }

    /// CPU seconds this process has used (user and system, from /proc).
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no memory effects.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        ticks as f64 / per_second
    }
}

/// Waits until `process` computes nothing any more (under a tenth of a CPU
/// second in one second), for at most 10 seconds.
async fn stops_computing(process: &Process, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = process.cpu_seconds();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = process.cpu_seconds() - before;
        if used < 0.1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} still computing 10 s after the cancel ({used:.2} CPU s in 1 s)"
        );
    }
}

async fn submit(http: &reqwest::Client, api: &str, token: &str, sql: &str) -> (u16, Value) {
    let response = http
        .post(format!("{api}/v2/query"))
        .bearer_auth(token)
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn state_of(http: &reqwest::Client, api: &str, token: &str, id: &str) -> Value {
    json_of(http.get(format!("{api}/v2/query/{id}")).bearer_auth(token)).await
}

/// Polls until the query ends; its Query resource.
async fn ended(http: &reqwest::Client, api: &str, token: &str, id: &str) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let query = state_of(http, api, token, id).await;
        if matches!(
            query["status"]["state"].as_str(),
            Some("SUCCEEDED" | "FAILED" | "CANCELLED")
        ) {
            return query;
        }
        assert!(Instant::now() < deadline, "still not ended: {query}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `sql` at `api` to SUCCEEDED; its rows, every page.
async fn rows_of(http: &reqwest::Client, api: &str, token: &str, sql: &str) -> Vec<Vec<String>> {
    run(http, api, token, sql).await.0
}

/// Runs `sql` at `api` to SUCCEEDED; its rows, every page, and its Query
/// resource.
async fn run(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    sql: &str,
) -> (Vec<Vec<String>>, Value) {
    let (status, body) = submit(http, api, token, sql).await;
    assert_eq!(status, 202, "{sql}: {body}");
    let id = body["queryId"].as_str().unwrap().to_string();
    let query = ended(http, api, token, &id).await;
    assert_eq!(query["status"]["state"], "SUCCEEDED", "{sql}: {query}");
    let mut rows = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let mut request = http
            .get(format!("{api}/v2/query/{id}/result"))
            .bearer_auth(token);
        if let Some(next) = &next {
            request = request.query(&[("next_token", next)]);
        }
        let page = json_of(request).await;
        let skip = usize::from(next.is_none());
        for row in page["resultSet"]["Rows"]
            .as_array()
            .unwrap()
            .iter()
            .skip(skip)
        {
            rows.push(
                row["Data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d["VarCharValue"].as_str().unwrap_or("NULL").to_string())
                    .collect(),
            );
        }
        match page["nextToken"].as_str() {
            Some(token) => next = Some(token.to_string()),
            None => return (rows, query),
        }
    }
}

/// Submits `sql` and waits until it is RUNNING with tasks started on the
/// workers; its id.
async fn running_on_workers(
    http: &reqwest::Client,
    coordinator: &Process,
    workers: &[&Process],
    token: &str,
    sql: &str,
) -> String {
    let mut tasks_before = 0.0;
    for worker in workers {
        tasks_before += worker.counter(http, "lakehost_cluster_tasks_total").await;
    }
    let (status, body) = submit(http, &coordinator.api, token, sql).await;
    assert_eq!(status, 202, "{body}");
    let id = body["queryId"].as_str().unwrap().to_string();
    let deadline = Instant::now() + SETTLE;
    loop {
        let query = state_of(http, &coordinator.api, token, &id).await;
        let mut tasks = 0.0;
        for worker in workers {
            tasks += worker.counter(http, "lakehost_cluster_tasks_total").await;
        }
        let state = query["status"]["state"].as_str().unwrap_or_default();
        if state == "RUNNING" && tasks > tasks_before {
            return id;
        }
        assert!(
            matches!(state, "QUEUED" | "RUNNING"),
            "the slow query ended early: {query}"
        );
        assert!(Instant::now() < deadline, "no task started: {query}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The lines of the synthetic TPC-H tables, as CREATE TABLE AS statements.
fn seed_statements() -> Vec<String> {
    let orders = LINEITEM_ROWS / 4;
    let customers = orders / 10;
    let money = |expr: &str| format!("CAST({expr} AS DECIMAL(15,2))");
    vec![
        format!(
            "CREATE TABLE demo_lake_v2.customer AS SELECT value AS c_custkey, \
             CASE value % 5 WHEN 0 THEN 'BUILDING' WHEN 1 THEN 'AUTOMOBILE' WHEN 2 THEN 'MACHINERY' \
             WHEN 3 THEN 'HOUSEHOLD' ELSE 'FURNITURE' END AS c_mktsegment, \
             1 + value % 3 AS service_client_id FROM range(0, {customers})"
        ),
        format!(
            "CREATE TABLE demo_lake_v2.orders AS SELECT value AS o_orderkey, \
             (value * 7) % {customers} AS o_custkey, \
             DATE '1992-01-01' + CAST((value * 13) % 2400 AS INT) AS o_orderdate, \
             CASE value % 5 WHEN 0 THEN '1-URGENT' WHEN 1 THEN '2-HIGH' WHEN 2 THEN '3-MEDIUM' \
             WHEN 3 THEN '4-NOT SPECIFIED' ELSE '5-LOW' END AS o_orderpriority, \
             0 AS o_shippriority, 1 + value % 3 AS service_client_id FROM range(0, {orders})"
        ),
        format!(
            "CREATE TABLE demo_lake_v2.lineitem AS SELECT value / 4 AS l_orderkey, \
             {quantity} AS l_quantity, {price} AS l_extendedprice, \
             {discount} AS l_discount, {tax} AS l_tax, \
             CASE value % 3 WHEN 0 THEN 'A' WHEN 1 THEN 'N' ELSE 'R' END AS l_returnflag, \
             CASE WHEN value % 2 = 0 THEN 'F' ELSE 'O' END AS l_linestatus, \
             DATE '1992-01-01' + CAST((value * 7) % 2500 AS INT) AS l_shipdate, \
             DATE '1992-01-01' + CAST((value * 7) % 2500 + value % 61 - 30 AS INT) AS l_commitdate, \
             DATE '1992-01-01' + CAST((value * 7) % 2500 + 1 + value % 30 AS INT) AS l_receiptdate, \
             CASE value % 4 WHEN 0 THEN 'MAIL' WHEN 1 THEN 'SHIP' WHEN 2 THEN 'AIR' ELSE 'TRUCK' END \
             AS l_shipmode, 1 + (value / 4) % 3 AS service_client_id FROM range(0, {LINEITEM_ROWS})",
            quantity = money("value % 50 + 1"),
            price = money("(value * 7919) % 100000"),
            discount = money(&format!("{} / 100", money("value % 11"))),
            tax = money(&format!("{} / 100", money("value % 9"))),
        ),
    ]
}

/// What `.ci/s3` exported, which the build saw (`lakehost_has_s3`, or `CI`):
/// its absence fails the test.
fn s3_endpoint() -> String {
    std::env::var("LAKEHOST_TEST_S3_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
        .expect("LAKEHOST_TEST_S3_ENDPOINT names an S3 server: eval \"$(.ci/s3)\" first")
}

// ---------------------------------------------------------------------------
// The test.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_s3),
    ignore = "needs an S3 server: eval \"$(.ci/s3)\" first (README, Tests)"
)]
async fn a_coordinator_and_two_workers_answer_as_one_process_and_fail_cleanly() {
    let endpoint = s3_endpoint();
    let http = reqwest::Client::new();
    let bucket = format!("lakehost-dist-{}", std::process::id());
    let created = http
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());

    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("store.db").display());
    let aws = |name: &str| (name.to_string(), std::env::var(name).unwrap_or_default());
    let shared: Vec<(String, String)> = vec![
        ("LAKEHOST_STORAGE_DATABASE_URL".into(), store),
        (
            "LAKEHOST_STORAGE_LAKE_URL".into(),
            format!("s3://{bucket}/lake"),
        ),
        ("LAKEHOST_DISTRIBUTED_ENABLED".into(), "true".into()),
        ("LAKEHOST_DISTRIBUTED_SECRET".into(), SECRET.into()),
        ("AWS_ENDPOINT_URL".into(), endpoint.clone()),
        aws("AWS_ALLOW_HTTP"),
        aws("AWS_ACCESS_KEY_ID"),
        aws("AWS_SECRET_ACCESS_KEY"),
        aws("AWS_REGION"),
    ];
    let env_of = |extra: Vec<(String, String)>| -> Vec<(String, String)> {
        shared.iter().cloned().chain(extra).collect()
    };
    // Workers first, each on a port of its own choosing (its banner says
    // which); then the coordinator, naming them.
    let any_port = || {
        (
            "LAKEHOST_DISTRIBUTED_WORKER_LISTEN".to_string(),
            "127.0.0.1:0".to_string(),
        )
    };
    let mut workers: Vec<Process> = (0..2)
        .map(|i| Process::start(dir.path(), &format!("worker{i}"), &env_of(vec![any_port()])))
        .collect();
    let worker_urls: Vec<&str> = workers.iter().map(|w| w.worker.as_str()).collect();
    let coordinator = Process::start(
        dir.path(),
        "coordinator",
        &env_of(vec![
            any_port(),
            ("LAKEHOST_DISTRIBUTED_WORKERS".into(), worker_urls.join(",")),
            ("LAKEHOST_DISTRIBUTED_MIN_SCAN_BYTES".into(), "1".into()),
            ("LAKEHOST_DISTRIBUTED_BYTES_PER_TASK".into(), "4096".into()),
        ]),
    );
    let admin = token(&http, &coordinator.api, "demo-admin").await;
    let local_admin = token(&http, &workers[0].api, "demo-admin").await;
    for statement in seed_statements() {
        rows_of(&http, &coordinator.api, &admin, &statement).await;
    }

    // 1. The TPC-H queries, distributed, equal the local run.
    let distributed = "lakehost_distributed_reads_total{plan=\"distributed\"}";
    let tasks = "lakehost_cluster_tasks_total";
    let scanned = "lakehost_query_scanned_bytes_total";
    let moved = "lakehost_cluster_moved_bytes_total";
    for (name, sql) in [
        ("Q1", Q1),
        ("Q3", Q3),
        ("Q12", Q12),
        ("join", JOIN),
        ("||", CONCAT),
        ("top 20", TOPK),
    ] {
        let before = coordinator.counter(&http, distributed).await;
        let scanned_before = coordinator.counter(&http, scanned).await;
        let moved_before = coordinator.counter(&http, moved).await;
        let tasks_before = [
            workers[0].counter(&http, tasks).await,
            workers[1].counter(&http, tasks).await,
        ];
        let (here, query) = run(&http, &coordinator.api, &admin, sql).await;
        let (there, local) = run(&http, &workers[0].api, &local_admin, sql).await;
        assert!(!here.is_empty(), "{name} returned rows");
        assert_eq!(here, there, "{name}: distributed equals local");
        assert_eq!(query["workers"], 2, "{name}: {query}");
        assert!(local.get("workers").is_none(), "{local}");
        assert_eq!(
            coordinator.counter(&http, distributed).await,
            before + 1.0,
            "{name} was distributed"
        );
        for (i, worker) in workers.iter().enumerate() {
            assert!(
                worker.counter(&http, tasks).await > tasks_before[i],
                "{name} ran tasks on worker {i}"
            );
        }
        // The workers' scans and what the stages moved come back with the
        // tasks' metrics and count on the coordinator.
        assert!(
            coordinator.counter(&http, scanned).await > scanned_before,
            "{name}: the workers' scanned bytes are counted"
        );
        assert!(
            coordinator.counter(&http, moved).await > moved_before,
            "{name}: what its stages moved is counted"
        );
    }
    assert_eq!(
        workers[0].counter(&http, distributed).await,
        0.0,
        "a worker naming no workers runs its own queries alone"
    );

    // 2. An own-client analyst: refused before any stage, or filtered.
    let analyst = token(&http, &coordinator.api, "demo-own-analyst").await;
    let local_analyst = token(&http, &workers[0].api, "demo-own-analyst").await;
    let tasks_before =
        workers[0].counter(&http, tasks).await + workers[1].counter(&http, tasks).await;
    let (status, body) = submit(&http, &coordinator.api, &analyst, JOIN).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        json!({"message": "You seem to have a permissions problem. You are trying to access data you do not have permissions for."})
    );
    assert_eq!(
        workers[0].counter(&http, tasks).await + workers[1].counter(&http, tasks).await,
        tasks_before,
        "no task started for a refused read"
    );
    let filtered = "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem \
                    WHERE service_client_id IN (1, 2) GROUP BY l_returnflag ORDER BY l_returnflag";
    let before = coordinator.counter(&http, distributed).await;
    let here = rows_of(&http, &coordinator.api, &analyst, filtered).await;
    assert_eq!(
        here,
        rows_of(&http, &workers[0].api, &local_analyst, filtered).await
    );
    assert_eq!(coordinator.counter(&http, distributed).await, before + 1.0);

    // 3. The bounded functions hold on workers.
    let (status, body) = submit(
        &http,
        &coordinator.api,
        &admin,
        "SELECT l_orderkey, repeat(l_shipmode, 300000000) AS big FROM lineitem",
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let query = ended(
        &http,
        &coordinator.api,
        &admin,
        body["queryId"].as_str().unwrap(),
    )
    .await;
    assert_eq!(query["status"]["state"], "FAILED", "{query}");
    let reason = query["status"]["stateChangeReason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("repeat would return")
            && reason.contains("more than one function call may"),
        "{query}"
    );

    // 4. No plan without the secret.
    let raw = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let refusals = "lakehost_cluster_refusals_total{reason=\"secret\"}";
    let refused_before = workers[0].counter(&http, refusals).await;
    let tasks_before = workers[0].counter(&http, tasks).await;
    for authorization in [None, Some("Bearer not-the-cluster-secret-0123456789abcdef")] {
        let mut request = raw
            .post(format!(
                "{}/worker.WorkerService/CoordinatorChannel",
                workers[0].worker
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            // One gRPC message of garbage where the plan would be.
            .body(vec![0, 0, 0, 0, 4, 1, 2, 3, 4]);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response
                .headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap().to_string()),
            Some("16".to_string()),
            "Unauthenticated for {authorization:?}"
        );
    }
    assert_eq!(
        workers[0].counter(&http, refusals).await,
        refused_before + 2.0
    );
    assert_eq!(
        workers[0].counter(&http, tasks).await,
        tasks_before,
        "nothing decoded"
    );

    // 5. DELETE of a running distributed query: CANCELLED, and the workers stop.
    let worker_refs: Vec<&Process> = workers.iter().collect();
    let id = running_on_workers(&http, &coordinator, &worker_refs, &admin, SLOW).await;
    let busy_before = [workers[0].cpu_seconds(), workers[1].cpu_seconds()];
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy =
        workers[0].cpu_seconds() + workers[1].cpu_seconds() - busy_before.iter().sum::<f64>();
    assert!(
        busy > 0.5,
        "the workers compute the slow query ({busy:.2} CPU s in 1 s)"
    );
    let cancelled = http
        .delete(format!("{}/v2/query/{id}", coordinator.api))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert!(cancelled.status().is_success(), "{}", cancelled.status());
    let query = ended(&http, &coordinator.api, &admin, &id).await;
    assert_eq!(query["status"]["state"], "CANCELLED", "{query}");
    for (i, worker) in workers.iter().enumerate() {
        stops_computing(worker, &format!("worker {i}")).await;
    }

    // The same query run by one replica alone stops at its DELETE too.
    let (status, body) = submit(&http, &workers[0].api, &local_admin, SLOW).await;
    assert_eq!(status, 202, "{body}");
    let id = body["queryId"].as_str().unwrap().to_string();
    while state_of(&http, &workers[0].api, &local_admin, &id).await["status"]["state"] != "RUNNING"
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    http.delete(format!("{}/v2/query/{id}", workers[0].api))
        .bearer_auth(&local_admin)
        .send()
        .await
        .unwrap();
    let query = ended(&http, &workers[0].api, &local_admin, &id).await;
    assert_eq!(query["status"]["state"], "CANCELLED", "{query}");
    stops_computing(&workers[0], "a replica running it alone").await;

    // 6. kill -9 of a worker mid-query: FAILED with a reason, not stuck.
    let id = running_on_workers(&http, &coordinator, &worker_refs, &admin, SLOW).await;
    drop(worker_refs);
    let killed = workers.pop().unwrap();
    drop(killed);
    let query = ended(&http, &coordinator.api, &admin, &id).await;
    assert_eq!(query["status"]["state"], "FAILED", "{query}");
    let reason = query["status"]["stateChangeReason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("A server running part of this query stopped answering"),
        "{query}"
    );
    eprintln!("a worker killed mid-query: {reason}");

    // The next reads go to the worker left, once a probe (every 2 s) saw
    // the other one gone.
    // (With one worker datafusion-distributed may keep a plan whole.)
    tokio::time::sleep(Duration::from_secs(4)).await;
    let planned = "lakehost_distributed_reads_total";
    let before = coordinator.counter(&http, planned).await;
    let here = rows_of(&http, &coordinator.api, &admin, JOIN).await;
    assert_eq!(
        here,
        rows_of(&http, &workers[0].api, &local_admin, JOIN).await
    );
    assert_eq!(coordinator.counter(&http, planned).await, before + 1.0);

    // With no worker left, reads run on the coordinator alone.
    drop(workers);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let alone = "lakehost_distributed_reads_total{plan=\"no_workers\"}";
    let before = coordinator.counter(&http, alone).await;
    assert_eq!(rows_of(&http, &coordinator.api, &admin, JOIN).await, here);
    assert_eq!(coordinator.counter(&http, alone).await, before + 1.0);
}
