//! Three real `lakehost serve` replicas on one Postgres database and one lake
//! on S3 (moto), behind a real HAProxy that health-checks `GET /readyz`, all
//! configured from `deploy/replica.toml` and `deploy/haproxy.cfg` (the README's
//! production example, filled in here). Under a bounded mixed load from
//! concurrent clients through HAProxy (queries, loads with uploads and
//! commits, daily-run starts, status polls) it goes through four failures:
//!
//! 1. `kill -9` of a replica running queries, commits and a daily run;
//! 2. a rolling restart of all three (SIGTERM, exit 0, start again);
//! 3. Postgres stopped under load and started again;
//! 4. the lake's S3 endpoint hung (`kill -STOP` of moto, then `-CONT`).
//!
//! After each it asserts invariants, never timings: every accepted query ends
//! SUCCEEDED or FAILED with a reason, every committed load ends SUCCESS or FAIL
//! exactly once with all of its rows or none (counted per `svc$load_id`), no
//! two daily runs are ever RUNNING, and the rolling restart fails no client
//! request (a transport error or a 5xx). It prints what was sent, how it ended
//! and the request errors of each phase.
//!
//! Needs Postgres (`LAKEHOST_TEST_DATABASE_URL`, `LAKEHOST_TEST_PGDATA`: `.ci/postgres`),
//! moto (`LAKEHOST_TEST_S3_ENDPOINT`, `LAKEHOST_TEST_S3_PID`: `.ci/s3`) and
//! HAProxy (`LAKEHOST_TEST_HAPROXY`: `.ci/haproxy`); without them (when the
//! test was built) it is reported ignored, and in CI a missing part fails it
//! (host/build.rs).

use std::{
    collections::{BTreeMap, HashMap},
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};

mod common;

use common::free_ports;

/// Client tasks sending the mixed load through HAProxy.
const CLIENTS: usize = 6;
/// The table every load appends to.
const TABLE: &str = "events";
/// A query that keeps a worker busy for a few seconds (no table needed).
const SLOW_QUERY: &str = "SELECT sum(value % 7) AS s FROM range(0, 300000000)";
/// How long the end of any one job may take to show before the test gives up.
const SETTLE: Duration = Duration::from_secs(180);

// ---------------------------------------------------------------------------
// The parts the test needs.

/// What `.ci/postgres`, `.ci/s3` and `.ci/haproxy` exported.
struct Parts {
    admin_database_url: String,
    pgdata: PathBuf,
    s3_endpoint: String,
    moto_pid: i32,
    haproxy: PathBuf,
}

/// The parts, which the build saw (`lakehost_has_postgres`, `lakehost_has_s3`
/// and `lakehost_has_haproxy`, or `CI`): a missing one fails the test.
fn parts() -> Parts {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let haproxy = var("LAKEHOST_TEST_HAPROXY").map(PathBuf::from).or_else(|| {
        ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
            .map(PathBuf::from)
            .into_iter()
            .find(|p| p.exists())
    });
    let found = (
        var("LAKEHOST_TEST_DATABASE_URL"),
        var("LAKEHOST_TEST_PGDATA"),
        var("LAKEHOST_TEST_S3_ENDPOINT"),
        var("LAKEHOST_TEST_S3_PID").and_then(|p| p.parse().ok()),
        haproxy,
    );
    match found {
        (
            Some(admin_database_url),
            Some(pgdata),
            Some(s3_endpoint),
            Some(moto_pid),
            Some(haproxy),
        ) => Parts {
            admin_database_url,
            pgdata: PathBuf::from(pgdata),
            s3_endpoint,
            moto_pid,
            haproxy,
        },
        _ => panic!(
            "the multi-replica test needs LAKEHOST_TEST_DATABASE_URL and \
             LAKEHOST_TEST_PGDATA (eval \"$(.ci/postgres)\"), LAKEHOST_TEST_S3_ENDPOINT \
             and LAKEHOST_TEST_S3_PID (eval \"$(.ci/s3)\") and HAProxy \
             (eval \"$(.ci/haproxy)\")"
        ),
    }
}

/// Fills `{{NAME}}` placeholders; every placeholder must be filled.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_string();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    assert!(!text.contains("{{"), "a placeholder left unfilled:\n{text}");
    text
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid of a child of ours (or moto's, which .ci/s3
    // started for the test suite); it has no memory effects in this process.
    let result = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(result, 0, "kill({pid}, {signal}) failed");
}

// ---------------------------------------------------------------------------
// Postgres and moto, and putting them back whatever happens.

/// The CI cluster, run as `.ci/postgres` runs it (as user `postgres` when root).
struct Postgres {
    pgdata: PathBuf,
    port: u16,
    stopped: AtomicBool,
}

impl Postgres {
    fn pg_ctl(&self, args: &str) {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|dirs| {
                let mut versions: Vec<PathBuf> =
                    dirs.flatten().map(|d| d.path().join("bin")).collect();
                versions.sort_by_key(|p| {
                    p.parent()
                        .and_then(|v| v.file_name())
                        .and_then(|v| v.to_str())
                        .and_then(|v| v.parse::<u32>().ok())
                        .unwrap_or(0)
                });
                versions.pop()
            })
            .map(|bin| bin.join("pg_ctl"))
            .unwrap_or_else(|| PathBuf::from("pg_ctl"));
        let line = format!("{} -D {} {args}", bin.display(), self.pgdata.display());
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        let status = if root {
            Command::new("su")
                .args(["postgres", "-s", "/bin/sh", "-c", &line])
                .stdout(Stdio::null())
                .status()
        } else {
            Command::new("sh")
                .args(["-c", &line])
                .stdout(Stdio::null())
                .status()
        }
        .unwrap();
        assert!(status.success(), "{line}: {status}");
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.pg_ctl("-m fast -w stop");
    }

    /// Starts it with `.ci/postgres`'s options.
    fn start(&self) {
        self.pg_ctl(&format!(
            "-l {}/server.log -w -o '-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off' start",
            self.pgdata.display(),
            self.port,
            self.pgdata.display()
        ));
        self.stopped.store(false, Ordering::SeqCst);
    }
}

impl Drop for Postgres {
    /// The rest of the suite needs it: never leave it stopped.
    fn drop(&mut self) {
        if self.stopped.load(Ordering::SeqCst) {
            self.start();
        }
    }
}

/// moto, hung with SIGSTOP; always continued again.
struct Moto {
    pid: u32,
}

impl Moto {
    fn hang(&self) {
        signal(self.pid, libc::SIGSTOP);
    }
    fn resume(&self) {
        signal(self.pid, libc::SIGCONT);
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // SAFETY: as in `signal`; the result does not matter here.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGCONT) };
    }
}

// ---------------------------------------------------------------------------
// The replicas and the balancer.

/// One `lakehost serve` process with its own data folder and ports.
struct Replica {
    name: String,
    api: String,
    api_port: u16,
    upload_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    config: PathBuf,
    /// The test-only settings (test steps, short leases) and the per-replica
    /// keys, as the README's deployment sets them: environment variables.
    env: Vec<(String, String)>,
    child: Option<Child>,
    starts: u32,
}

impl Replica {
    /// Starts it and waits for its first line, `lakehost listening on <url>`.
    async fn start(&mut self) {
        assert!(self.child.is_none(), "{} already runs", self.name);
        let mut command = Command::new(env!("CARGO_BIN_EXE_lakehost"));
        command
            .args(["serve", "--config"])
            .arg(&self.config)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .envs(self.env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log)
                    .unwrap(),
            );
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let log = self.log.clone();
        let first = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            // Keep reading: the server still prints its banner.
            std::thread::spawn(move || lines.for_each(drop));
            first
        })
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no output; see {}", log.display()))
        .unwrap();
        let first = common::banner_text(first);
        let url = first
            .strip_prefix("lakehost listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}; see {}", log.display()));
        assert_eq!(url, self.api, "{} listens where its config says", self.name);
        self.child = Some(child);
        self.starts += 1;
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn kill_9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, then its exit (a drain is bounded by `server.drain_s`).
    async fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(child.id(), libc::SIGTERM);
        let name = self.name.clone();
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return status;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("{name} still running 60 s after SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .await
        .unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// HAProxy, started with `deploy/haproxy.cfg` filled in.
struct Balancer {
    child: Child,
    admin_socket: PathBuf,
}

impl Balancer {
    /// `show servers state <backend>`: each server's name and whether it is UP.
    fn server_states(&self, backend: &str) -> BTreeMap<String, bool> {
        let mut socket = std::os::unix::net::UnixStream::connect(&self.admin_socket).unwrap();
        socket
            .write_all(format!("show servers state {backend}\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).unwrap();
        // Columns: be_id be_name srv_id srv_name srv_addr srv_op_state ...;
        // srv_op_state 2 is running (UP).
        answer
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let columns: Vec<&str> = l.split_whitespace().collect();
                (columns.len() > 5).then(|| (columns[3].to_string(), columns[5] == "2"))
            })
            .collect()
    }

    /// Waits until HAProxy sees `server` UP (or DOWN), at most `SETTLE`.
    async fn wait_for(&self, server: &str, up: bool) {
        let deadline = Instant::now() + SETTLE;
        while self.server_states("lakehost_api").get(server) != Some(&up) {
            assert!(
                Instant::now() < deadline,
                "HAProxy never saw {server} {}: {:?}",
                if up { "UP" } else { "DOWN" },
                self.server_states("lakehost_api")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Requests, and what became of them.

/// How the requests of one kind ended in one phase.
#[derive(Default, Debug, Clone, Copy)]
struct Outcomes {
    sent: u64,
    answered_2xx: u64,
    answered_4xx: u64,
    answered_5xx: u64,
    transport_errors: u64,
}

impl Outcomes {
    fn failed(&self) -> u64 {
        self.answered_5xx + self.transport_errors
    }
}

/// A query the service accepted (202 with a queryId).
#[derive(Debug, Clone)]
struct AcceptedQuery {
    id: String,
    phase: &'static str,
    sql: String,
}

/// A load whose commit the service accepted (202), with the rows it carries.
#[derive(Debug, Clone)]
struct CommittedLoad {
    id: String,
    phase: &'static str,
    rows: i64,
    /// False when the commit was sent but its answer was lost (a replica
    /// killed between accepting it and the answer reaching the client): the
    /// load may be PROCESSING, then all or nothing, or still OPEN.
    answered: bool,
}

/// Everything the clients sent, per phase, and every job they started.
#[derive(Default)]
struct Ledger {
    requests: BTreeMap<(&'static str, &'static str), Outcomes>,
    failures: Vec<String>,
    queries: Vec<AcceptedQuery>,
    loads: Vec<CommittedLoad>,
    daily_runs: Vec<(String, &'static str)>,
    /// Every time a status poll saw two RUNNING daily runs (must stay empty).
    two_running: Vec<Value>,
}

/// The clients' side: the HAProxy frontends, a token, and the ledger.
struct Clients {
    api: String,
    upload: String,
    http: reqwest::Client,
    token: Mutex<String>,
    phase: Mutex<&'static str>,
    ledger: Mutex<Ledger>,
    load_rows: AtomicU64,
}

impl Clients {
    fn token(&self) -> String {
        self.token.lock().unwrap().clone()
    }

    fn phase(&self) -> &'static str {
        *self.phase.lock().unwrap()
    }

    /// Sends a request, records how it ended in this phase, and returns the
    /// status and JSON body (`Value::Null` if none), or `None` on a transport
    /// error.
    async fn send(
        &self,
        kind: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Option<(u16, Value)> {
        let phase = self.phase();
        let result = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ))
        }
        .await;
        let mut ledger = self.ledger.lock().unwrap();
        let outcomes = ledger.requests.entry((phase, kind)).or_default();
        outcomes.sent += 1;
        match &result {
            Ok((status, _)) if *status >= 500 => outcomes.answered_5xx += 1,
            Ok((status, _)) if *status >= 400 => outcomes.answered_4xx += 1,
            Ok(_) => outcomes.answered_2xx += 1,
            Err(_) => outcomes.transport_errors += 1,
        }
        match &result {
            Ok((status, body)) if *status >= 500 => ledger
                .failures
                .push(format!("{phase} {kind}: {status} {body}")),
            Err(e) => ledger.failures.push(format!("{phase} {kind}: {e}")),
            _ => {}
        }
        result.ok()
    }

    async fn token_from(&self, api: &str) -> String {
        let (status, body) = self
            .send(
                "token",
                self.http
                    .post(format!("{api}/realms/demo/protocol/openid-connect/token"))
                    .form(&[
                        ("grant_type", "client_credentials"),
                        ("client_id", "demo-admin"),
                        ("client_secret", "demo-admin-secret"),
                    ]),
            )
            .await
            .expect("a token");
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_string()
    }

    /// A new token through the balancer (tokens live five minutes).
    async fn refresh_token(&self) {
        let token = self.token_from(&self.api).await;
        *self.token.lock().unwrap() = token;
    }

    /// Submits a query at `api` (the balancer, or one replica); its id when accepted.
    async fn submit_query(&self, api: &str, sql: &str) -> Option<String> {
        let (status, body) = self
            .send(
                "POST /v2/query",
                self.http
                    .post(format!("{api}/v2/query"))
                    .bearer_auth(self.token())
                    .json(&json!({ "query": sql })),
            )
            .await?;
        if status != 202 {
            return None;
        }
        let id = body["queryId"].as_str().unwrap().to_string();
        self.ledger.lock().unwrap().queries.push(AcceptedQuery {
            id: id.clone(),
            phase: self.phase(),
            sql: sql.to_string(),
        });
        Some(id)
    }

    async fn query_status(&self, id: &str) -> Option<Value> {
        let (status, body) = self
            .send(
                "GET /v2/query/{id}",
                self.http
                    .get(format!("{}/v2/query/{id}", self.api))
                    .bearer_auth(self.token()),
            )
            .await?;
        (status == 200).then_some(body)
    }

    /// Polls a query until it ends or `within` passes.
    async fn poll_query(&self, id: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(body) = self.query_status(id).await
                && matches!(
                    body["status"]["state"].as_str(),
                    Some("SUCCEEDED" | "FAILED" | "CANCELLED")
                )
            {
                return Some(body);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    async fn load_status(&self, id: &str) -> Option<Value> {
        let (status, body) = self
            .send(
                "GET /v2/load/{id}",
                self.http
                    .get(format!("{}/v2/load/{id}", self.api))
                    .bearer_auth(self.token()),
            )
            .await?;
        (status == 200).then_some(body)
    }

    async fn poll_load(&self, id: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(body) = self.load_status(id).await
                && matches!(body["LoadStatus"].as_str(), Some("SUCCESS" | "FAIL"))
            {
                return Some(body);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// The load's end (SUCCESS or FAIL); None for a load whose commit answer
    /// was lost and which is still OPEN: the commit never reached a replica.
    async fn settle_load(&self, load: &CommittedLoad) -> Option<Value> {
        if !load.answered
            && self
                .load_status(&load.id)
                .await
                .is_some_and(|state| state["LoadStatus"] == "OPEN")
        {
            return None;
        }
        let ended = self.poll_load(&load.id, SETTLE).await;
        Some(ended.unwrap_or_else(|| panic!("load {} never ended", load.id)))
    }

    /// Creates a load at `api`, uploads one file by the descriptor's form (to
    /// wherever the descriptor points: the balancer's upload frontend) and
    /// commits it; the load's id when the commit was accepted.
    async fn commit_a_load(&self, api: &str) -> Option<String> {
        let rows = 20 + (self.load_rows.fetch_add(7, Ordering::Relaxed) % 60) as i64;
        let (status, load) = self
            .send(
                "POST /v2/load",
                self.http
                    .post(format!("{api}/v2/load"))
                    .bearer_auth(self.token())
                    .json(&json!({"load_type": "APPEND_ONLY", "table_name": TABLE})),
            )
            .await?;
        if status != 200 && status != 201 && status != 202 {
            return None;
        }
        let id = load["loadId"].as_str()?.to_string();
        let (status, descriptor) = self
            .send(
                "POST /v2/load/{id}/file",
                self.http
                    .post(format!("{api}/v2/load/{id}/file"))
                    .bearer_auth(self.token())
                    .json(&json!({"file_key": "part_1"})),
            )
            .await?;
        if status != 200 {
            return None;
        }
        let mut form = reqwest::multipart::Form::new();
        for (name, value) in descriptor["presigned_url"]["fields"].as_object()? {
            form = form.text(name.clone(), value.as_str()?.to_string());
        }
        form = form.part(
            "file",
            reqwest::multipart::Part::bytes(common::parquet("n", rows, 4)),
        );
        let (status, _) = self
            .send(
                "upload (form POST)",
                self.http
                    .post(descriptor["presigned_url"]["url"].as_str()?)
                    .multipart(form),
            )
            .await?;
        if status != 204 {
            return None;
        }
        let answer = self
            .send(
                "POST /v2/load/{id}/commit",
                self.http
                    .post(format!("{api}/v2/load/{id}/commit"))
                    .bearer_auth(self.token())
                    .json(&json!({"check_sum": {"count(*)": rows}})),
            )
            .await;
        if answer.as_ref().is_some_and(|(status, _)| *status != 202) {
            return None;
        }
        self.ledger.lock().unwrap().loads.push(CommittedLoad {
            id: id.clone(),
            phase: self.phase(),
            rows,
            answered: answer.is_some(),
        });
        answer.map(|_| id)
    }

    /// POST /dailyRun/start_execution at `api`: the execution's name when it started.
    async fn start_daily_run(&self, api: &str) -> Option<String> {
        let (status, body) = self
            .send(
                "POST /dailyRun/start_execution",
                self.http
                    .post(format!("{api}/dailyRun/start_execution"))
                    .bearer_auth(self.token()),
            )
            .await?;
        if status != 200 {
            return None;
        }
        let name = body["executionName"].as_str()?.to_string();
        let phase = self.phase();
        self.ledger
            .lock()
            .unwrap()
            .daily_runs
            .push((name.clone(), phase));
        Some(name)
    }

    /// Every execution (`mode=list`); records it if two are RUNNING.
    async fn daily_runs(&self) -> Option<Vec<Value>> {
        let (status, body) = self
            .send(
                "GET /dailyRun/execution_status",
                self.http
                    .get(format!(
                        "{}/dailyRun/execution_status?mode=list&limit=1000",
                        self.api
                    ))
                    .bearer_auth(self.token()),
            )
            .await?;
        if status != 200 {
            return None;
        }
        let runs = body["executions"].as_array()?.clone();
        if runs.iter().filter(|r| r["status"] == "RUNNING").count() > 1 {
            self.ledger.lock().unwrap().two_running.push(body.clone());
        }
        Some(runs)
    }

    /// One client's rounds until `stop`: a query, a load, a few status polls,
    /// and (client 0) a daily-run start, each waited for a while.
    async fn run_client(self: Arc<Self>, client: usize, stop: Arc<AtomicBool>) {
        let mut round = client;
        while !stop.load(Ordering::Relaxed) {
            match round % 3 {
                0 => {
                    let sql = match round % 2 {
                        0 => format!("SELECT count(*) AS n FROM {TABLE}"),
                        _ => "SELECT sum(value % 7) AS s FROM range(0, 2000000)".to_string(),
                    };
                    if let Some(id) = self.submit_query(&self.api, &sql).await {
                        self.poll_query(&id, Duration::from_secs(20)).await;
                    }
                }
                1 => {
                    if let Some(id) = self.commit_a_load(&self.api).await {
                        self.poll_load(&id, Duration::from_secs(20)).await;
                    }
                }
                _ => {
                    if client == 0 && round % 4 == 2 {
                        self.start_daily_run(&self.api).await;
                    }
                    self.daily_runs().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            round += 1;
        }
    }

    /// The rows of `sql`'s result (all pages), header row excluded.
    async fn rows_of(&self, sql: &str) -> Vec<Vec<String>> {
        let id = loop {
            if let Some(id) = self.submit_query(&self.api, sql).await {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let ended = self
            .poll_query(&id, SETTLE)
            .await
            .expect("the count query ends");
        assert_eq!(ended["status"]["state"], "SUCCEEDED", "{ended}");
        let mut rows = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut request = self
                .http
                .get(format!("{}/v2/query/{id}/result", self.api))
                .bearer_auth(self.token());
            if let Some(token) = &next {
                request = request.query(&[("next_token", token)]);
            }
            let (status, page) = self
                .send("GET /v2/query/{id}/result", request)
                .await
                .expect("a result page");
            assert_eq!(status, 200, "{page}");
            let page_rows = page["resultSet"]["Rows"].as_array().unwrap();
            let skip = usize::from(next.is_none());
            for row in page_rows.iter().skip(skip) {
                rows.push(
                    row["Data"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d["VarCharValue"].as_str().unwrap_or_default().to_string())
                        .collect(),
                );
            }
            match page["nextToken"].as_str() {
                Some(token) => next = Some(token.to_string()),
                None => return rows,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The cluster.

struct Cluster {
    /// Kept when the test fails, for the replicas' and HAProxy's logs.
    dir: Option<tempfile::TempDir>,
    replicas: Vec<Replica>,
    balancer: Balancer,
    clients: Arc<Clients>,
    postgres: Postgres,
    moto: Moto,
}

/// The default load steps with a pause before the insert, so commits are
/// caught running; a daily run that pauses before its refresh.
const LOAD_MANIFEST: &str = r#"version = 1
[[steps]]
name = "validate_parquet"
component = "builtin:validate_parquet"
grants = ["staged-files", "log"]
[[steps]]
name = "enforce_service_clients"
component = "builtin:enforce_service_clients"
grants = ["staged-files", "staged-sql", "log"]
[[steps]]
name = "verify_checksums"
component = "builtin:verify_checksums"
grants = ["staged-sql", "log"]
[[steps]]
name = "match_schema"
component = "builtin:match_schema"
grants = ["staged-files", "lake-schema", "log"]
[[steps]]
name = "pause"
component = "builtin:pause"
grants = []
[steps.config]
ms = 1000
[[steps]]
name = "insert"
component = "builtin:insert"
grants = ["staged-sql", "lake-append", "log"]
"#;

const DAILY_MANIFEST: &str = r#"version = 1
[[steps]]
name = "pause"
component = "builtin:daily_pause"
[steps.config]
ms = 3000
[[steps]]
name = "refresh_insights"
component = "builtin:sql_transform"
grants = ["lake-sql", "log"]
[[steps.config.tables]]
table = "events_per_client"
sql = "SELECT service_client_id, count(*) AS n FROM ${lake}.events GROUP BY service_client_id"
"#;

impl Cluster {
    async fn start(parts: Parts) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        println!(
            "multi-replica test: files and logs under {}",
            root.display()
        );

        // A fresh database and a fresh bucket.
        let database = format!("lakehost_replicas_{}", lakehost::store::new_id());
        {
            use sqlx::Connection as _;
            let mut admin = sqlx::PgConnection::connect(&parts.admin_database_url)
                .await
                .unwrap();
            sqlx::query(&format!("CREATE DATABASE {database}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        let base = parts.admin_database_url.rsplit_once('/').unwrap().0;
        let database_url = format!("{base}/{database}");
        let pg_port = url::Url::parse(&parts.admin_database_url)
            .unwrap()
            .port()
            .unwrap_or(5432);
        let bucket = format!("lakehost-replicas-{}", &lakehost::store::new_id()[..12]);
        let created = reqwest::Client::new()
            .put(format!("{}/{bucket}", parts.s3_endpoint))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success(), "{}", created.status());

        // The pipelines every replica reads.
        let pipelines = root.join("pipelines");
        std::fs::create_dir_all(pipelines.join("orgs/demo")).unwrap();
        std::fs::write(pipelines.join("orgs/demo/load.toml"), LOAD_MANIFEST).unwrap();
        std::fs::write(pipelines.join("orgs/demo/daily.toml"), DAILY_MANIFEST).unwrap();

        let ports = free_ports(8);
        let (api_port, upload_port) = (ports[0], ports[1]);
        let public_api = format!("http://127.0.0.1:{api_port}");
        let config = root.join("replica.toml");
        std::fs::write(
            &config,
            fill(
                include_str!("../../deploy/replica.toml"),
                &[
                    ("DATABASE_URL", database_url.clone()),
                    ("LAKE_URL", format!("s3://{bucket}/lake")),
                    ("PUBLIC_API_URL", public_api.clone()),
                    (
                        "PUBLIC_UPLOAD_URL",
                        format!("http://127.0.0.1:{upload_port}"),
                    ),
                ],
            ),
        )
        .unwrap();
        let aws = |name: &str, default: &str| {
            (
                name.to_string(),
                std::env::var(name).unwrap_or_else(|_| default.to_string()),
            )
        };
        let mut replicas: Vec<Replica> = (0..3)
            .map(|i| {
                let name = format!("replica{}", i + 1);
                let (api_port, upload_port) = (ports[2 + 2 * i], ports[3 + 2 * i]);
                let data_dir = root.join(&name);
                std::fs::create_dir_all(&data_dir).unwrap();
                let env = vec![
                    (
                        "LAKEHOST_SERVER_LISTEN".into(),
                        format!("127.0.0.1:{api_port}"),
                    ),
                    (
                        "LAKEHOST_STORAGE_S3_LISTEN".into(),
                        format!("127.0.0.1:{upload_port}"),
                    ),
                    // Each replica's metrics on a port of its own.
                    (
                        "LAKEHOST_SERVER_METRICS_LISTEN".into(),
                        "127.0.0.1:0".into(),
                    ),
                    (
                        "LAKEHOST_STORAGE_DATA_DIR".into(),
                        data_dir.display().to_string(),
                    ),
                    (
                        "LAKEHOST_PIPELINE_DIR".into(),
                        pipelines.display().to_string(),
                    ),
                    ("LAKEHOST_PIPELINE_TEST_STEPS".into(), "true".into()),
                    // Short leases, so a dead replica's jobs end fast.
                    ("LAKEHOST_PIPELINE_LEASE_S".into(), "3".into()),
                    ("LAKEHOST_QUERY_LEASE_S".into(), "3".into()),
                    ("LAKEHOST_DAILYRUN_LEASE_S".into(), "3".into()),
                    ("LAKEHOST_DAILYRUN_TICK_MS".into(), "500".into()),
                    ("LAKEHOST_AUTH_JWKS_REFETCH_COOLDOWN_S".into(), "1".into()),
                    aws("AWS_ENDPOINT_URL", &parts.s3_endpoint),
                    aws("AWS_ALLOW_HTTP", "true"),
                    aws("AWS_ACCESS_KEY_ID", "lakehost-test"),
                    aws("AWS_SECRET_ACCESS_KEY", "lakehost-test"),
                    aws("AWS_REGION", "us-east-1"),
                ];
                Replica {
                    api: format!("http://127.0.0.1:{api_port}"),
                    api_port,
                    upload_port,
                    log: root.join(format!("{name}.log")),
                    data_dir,
                    config: config.clone(),
                    env,
                    child: None,
                    starts: 0,
                    name,
                }
            })
            .collect();

        // HAProxy first: the replicas fetch the JWKS through it.
        let admin_socket = root.join("haproxy.sock");
        let haproxy_cfg = root.join("haproxy.cfg");
        let mut values = vec![
            ("ADMIN_SOCKET", admin_socket.display().to_string()),
            ("API_BIND", format!("127.0.0.1:{api_port}")),
            ("UPLOAD_BIND", format!("127.0.0.1:{upload_port}")),
        ];
        let names: Vec<(String, String)> = (1..=3)
            .map(|i| (format!("REPLICA{i}_API"), format!("REPLICA{i}_UPLOAD")))
            .collect();
        for (replica, (api_name, upload_name)) in replicas.iter().zip(&names) {
            values.push((api_name, format!("127.0.0.1:{}", replica.api_port)));
            values.push((upload_name, format!("127.0.0.1:{}", replica.upload_port)));
        }
        std::fs::write(
            &haproxy_cfg,
            fill(include_str!("../../deploy/haproxy.cfg"), &values),
        )
        .unwrap();
        let checked = Command::new(&parts.haproxy)
            .arg("-c")
            .arg("-f")
            .arg(&haproxy_cfg)
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "haproxy -c: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let child = Command::new(&parts.haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&haproxy_cfg)
            .stdout(std::fs::File::create(root.join("haproxy.log")).unwrap())
            .stderr(std::fs::File::create(root.join("haproxy.err")).unwrap())
            .spawn()
            .unwrap();
        let balancer = Balancer {
            child,
            admin_socket: admin_socket.clone(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&admin_socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "HAProxy did not start; see {}",
                root.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The embedded identity provider's signing key is a file in each
        // replica's data folder: the first replica makes it, the others get a
        // copy, so a token from one is valid on all (DESIGN "Scale-out").
        replicas[0].start().await;
        let key_file = Path::new("idp/demo/signing-keys.json");
        for replica in &replicas[1..] {
            let to = replica.data_dir.join(key_file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(replicas[0].data_dir.join(key_file), to).unwrap();
        }
        for replica in &mut replicas[1..] {
            replica.start().await;
        }
        for replica in &replicas {
            balancer.wait_for(&replica.name, true).await;
        }
        let clients = Arc::new(Clients {
            api: public_api,
            upload: format!("http://127.0.0.1:{upload_port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(90))
                // Below HAProxy's `timeout http-keep-alive` (5 s): a client
                // reusing a connection the balancer is closing that instant
                // gets a transport error that is nobody's failure.
                .pool_idle_timeout(Duration::from_secs(2))
                .build()
                .unwrap(),
            token: Mutex::new(String::new()),
            phase: Mutex::new("setup"),
            ledger: Mutex::new(Ledger::default()),
            load_rows: AtomicU64::new(0),
        });
        clients.refresh_token().await;
        Cluster {
            dir: Some(dir),
            replicas,
            balancer,
            clients,
            postgres: Postgres {
                pgdata: parts.pgdata,
                port: pg_port,
                stopped: AtomicBool::new(false),
            },
            moto: Moto {
                pid: parts.moto_pid as u32,
            },
        }
    }

    /// Starts the mixed load; `stop_load` ends it.
    fn start_load(&self) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..CLIENTS)
            .map(|client| tokio::spawn(self.clients.clone().run_client(client, stop.clone())))
            .collect();
        Load { stop, tasks }
    }

    /// Every replica's log lines that name `id` (a job's story, for a
    /// failure message: CI keeps only the test's output).
    fn log_lines_naming(&self, id: &str) -> String {
        let mut lines = String::new();
        for replica in &self.replicas {
            let log = std::fs::read_to_string(&replica.log).unwrap_or_default();
            for line in log.lines().filter(|line| line.contains(id)) {
                lines.push_str(&format!("\n{}: {line}", replica.name));
            }
        }
        lines
    }

    async fn begin_phase(&self, phase: &'static str) {
        *self.clients.phase.lock().unwrap() = phase;
        self.clients.refresh_token().await;
        println!("\n== phase: {phase}");
    }

    /// GET /readyz of one replica, directly: status and body.
    async fn readyz(&self, replica: usize) -> Option<(u16, Value)> {
        let response = self
            .clients
            .http
            .get(format!("{}/readyz", self.replicas[replica].api))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// Waits until every replica's /readyz is 503 naming `part` (returns the
    /// bodies seen) or 200 again (`part` None).
    async fn wait_for_readiness(&self, part: Option<&str>) -> Vec<Value> {
        let mut seen = Vec::new();
        for replica in 0..self.replicas.len() {
            let deadline = Instant::now() + SETTLE;
            loop {
                let answer = self.readyz(replica).await;
                let reached = match (&answer, part) {
                    (Some((200, _)), None) => true,
                    // The message names the first failing part; `part`
                    // must be among the failing checks.
                    (Some((503, body)), Some(part)) => {
                        body["status"] == "not ready"
                            && body["message"].as_str().is_some_and(|m| !m.is_empty())
                            && body["checks"][part].as_str().is_some_and(|c| c != "ok")
                    }
                    _ => false,
                };
                if reached {
                    if let Some((_, body)) = answer {
                        seen.push(body);
                    }
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}'s /readyz never showed {part:?}: last {answer:?}",
                    self.replicas[replica].name
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        seen
    }

    /// Waits until every started job of the phase has ended, then asserts the
    /// invariants over everything so far and prints the phase's account.
    async fn settle_and_check(&self, phase: &'static str) -> PhaseAccount {
        let clients = &self.clients;
        let (queries, loads, runs) = {
            let ledger = clients.ledger.lock().unwrap();
            (
                ledger
                    .queries
                    .iter()
                    .filter(|q| q.phase == phase)
                    .cloned()
                    .collect::<Vec<_>>(),
                ledger
                    .loads
                    .iter()
                    .filter(|l| l.phase == phase)
                    .cloned()
                    .collect::<Vec<_>>(),
                ledger
                    .daily_runs
                    .iter()
                    .filter(|r| r.1 == phase)
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        };
        let mut account = PhaseAccount::default();
        for query in &queries {
            let ended = clients
                .poll_query(&query.id, SETTLE)
                .await
                .unwrap_or_else(|| panic!("query {} ({}) never ended", query.id, query.sql));
            let state = ended["status"]["state"].as_str().unwrap().to_string();
            match state.as_str() {
                "SUCCEEDED" => {}
                "FAILED" => {
                    let reason = ended["status"]["stateChangeReason"]
                        .as_str()
                        .unwrap_or_default();
                    assert!(
                        !reason.trim().is_empty(),
                        "a FAILED query without a reason: {ended}"
                    );
                    *account
                        .query_failures
                        .entry(reason.to_string())
                        .or_default() += 1;
                }
                _ => panic!("query {} ended {state}: {ended}", query.id),
            }
            *account.queries.entry(state.clone()).or_default() += 1;
            account.final_states.insert(query.id.clone(), state);
        }
        for load in &loads {
            let Some(ended) = clients.settle_load(load).await else {
                *account
                    .loads
                    .entry("OPEN (commit lost)".into())
                    .or_default() += 1;
                continue;
            };
            let state = ended["LoadStatus"].as_str().unwrap().to_string();
            if state == "FAIL" {
                let error_type = ended["ErrorType"].as_str().unwrap_or_default();
                assert!(
                    !error_type.is_empty(),
                    "a FAIL without an ErrorType: {ended}"
                );
                let message = format!("{error_type}: {}", ended["ErrorMessages"]);
                *account.load_failures.entry(message).or_default() += 1;
            }
            *account.loads.entry(state.clone()).or_default() += 1;
            account.final_states.insert(load.id.clone(), state);
        }
        // No daily run stays RUNNING; each started one ended.
        let deadline = Instant::now() + SETTLE;
        let executions = loop {
            if let Some(runs) = clients.daily_runs().await
                && runs.iter().all(|r| r["status"] != "RUNNING")
            {
                break runs;
            }
            assert!(Instant::now() < deadline, "a daily run stayed RUNNING");
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        for (name, _) in &runs {
            let run = executions
                .iter()
                .find(|r| r["name"] == name.as_str())
                .unwrap_or_else(|| panic!("started daily run {name} is not listed"));
            let status = run["status"].as_str().unwrap().to_string();
            *account.daily_runs.entry(status.clone()).or_default() += 1;
            account.final_states.insert(name.clone(), status);
        }
        {
            let ledger = clients.ledger.lock().unwrap();
            assert!(
                ledger.two_running.is_empty(),
                "two daily runs RUNNING: {:?}",
                ledger.two_running
            );
            for ((p, kind), outcomes) in &ledger.requests {
                if *p == phase {
                    account.requests.insert(kind, *outcomes);
                }
            }
            account.failures = ledger
                .failures
                .iter()
                .filter(|f| f.starts_with(&format!("{phase} ")))
                .take(10)
                .cloned()
                .collect();
        }
        self.assert_rows_all_or_none().await;
        account.print(phase);
        account
    }

    /// Each SUCCESS load's rows are in the table exactly once, each FAIL's
    /// not at all, and no other load's rows are there.
    async fn assert_rows_all_or_none(&self) {
        let clients = &self.clients;
        let counted: HashMap<String, i64> = clients
            .rows_of(&format!(
                "SELECT \"svc$load_id\", count(*) FROM {TABLE} GROUP BY \"svc$load_id\""
            ))
            .await
            .into_iter()
            .map(|row| (row[0].clone(), row[1].parse().unwrap()))
            .collect();
        let loads = clients.ledger.lock().unwrap().loads.clone();
        let mut expected = HashMap::new();
        for load in &loads {
            let Some(state) = clients.settle_load(load).await else {
                continue;
            };
            if state["LoadStatus"] == "SUCCESS" {
                expected.insert(load.id.clone(), load.rows);
            }
        }
        for (id, rows) in &expected {
            assert_eq!(
                counted.get(id),
                Some(rows),
                "load {id} ended SUCCESS: all its rows, once"
            );
        }
        for (id, rows) in &counted {
            assert!(
                expected.contains_key(id),
                "{rows} rows of load {id}, which did not end SUCCESS (or was never committed)"
            );
        }
        println!(
            "rows: {} loads SUCCESS with all their rows once, {} committed loads without rows, {} rows in all",
            expected.len(),
            loads.len() - expected.len(),
            counted.values().sum::<i64>()
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!(
                "the replicas' and HAProxy's logs are kept in {}",
                dir.keep().display()
            );
        }
    }
}

/// The running load's clients.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// What one phase sent and how it ended.
#[derive(Default)]
struct PhaseAccount {
    requests: BTreeMap<&'static str, Outcomes>,
    failures: Vec<String>,
    queries: BTreeMap<String, u64>,
    query_failures: BTreeMap<String, u64>,
    loads: BTreeMap<String, u64>,
    load_failures: BTreeMap<String, u64>,
    daily_runs: BTreeMap<String, u64>,
    final_states: BTreeMap<String, String>,
}

impl PhaseAccount {
    fn failed_requests(&self) -> u64 {
        self.requests.values().map(Outcomes::failed).sum()
    }

    fn print(&self, phase: &str) {
        println!(
            "-- {phase}: requests through HAProxy (sent / 2xx / 4xx / 5xx / transport errors)"
        );
        for (kind, o) in &self.requests {
            println!(
                "   {kind:<34} {:>5} / {:>5} / {:>4} / {:>4} / {:>4}",
                o.sent, o.answered_2xx, o.answered_4xx, o.answered_5xx, o.transport_errors
            );
        }
        println!(
            "   failed requests (5xx or transport): {}",
            self.failed_requests()
        );
        for failure in &self.failures {
            println!("     e.g. {}", truncate(failure, 300));
        }
        println!("   accepted queries ended: {:?}", self.queries);
        for (reason, n) in &self.query_failures {
            println!("     FAILED x{n}: {}", truncate(reason, 200));
        }
        println!("   committed loads ended: {:?}", self.loads);
        for (reason, n) in &self.load_failures {
            println!("     FAIL x{n}: {}", truncate(reason, 200));
        }
        println!("   daily runs started ended: {:?}", self.daily_runs);
    }
}

fn truncate(text: &str, at: usize) -> &str {
    match text.char_indices().nth(at) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

// ---------------------------------------------------------------------------
// The test.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(all(lakehost_has_postgres, lakehost_has_s3, lakehost_has_haproxy)),
    ignore = "needs Postgres, an S3 server and HAProxy: eval \"$(.ci/postgres)\", \"$(.ci/s3)\" and \"$(.ci/haproxy)\" first (README, Tests)"
)]
async fn three_replicas_behind_haproxy_survive_a_kill_a_rolling_restart_a_postgres_restart_and_an_s3_outage()
 {
    let parts = parts();
    let mut cluster = Cluster::start(parts).await;
    let clients = cluster.clients.clone();

    shared_secrets_work_across_replicas(&cluster).await;
    let mut ended: BTreeMap<String, String> = BTreeMap::new();

    // 1. kill -9 of a replica running queries, commits and a daily run.
    cluster.begin_phase("kill -9").await;
    let load = cluster.start_load();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let victim = 1;
    let victim_api = cluster.replicas[victim].api.clone();
    // The victim's own daily run: started there once the clients' run (if
    // any) has ended.
    let mut daily_run = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while daily_run.is_none() && Instant::now() < deadline {
        daily_run = clients.start_daily_run(&victim_api).await;
        if daily_run.is_none() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let daily_run = daily_run.expect("a daily run started on the replica to kill");
    let slow_queries = [
        clients.submit_query(&victim_api, SLOW_QUERY).await,
        clients.submit_query(&victim_api, SLOW_QUERY).await,
    ];
    let victim_load = clients.commit_a_load(&victim_api).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "killing {} (pid {}): its daily run {daily_run:?}, slow queries {slow_queries:?}, a load {victim_load:?}",
        cluster.replicas[victim].name,
        cluster.replicas[victim].pid()
    );
    cluster.replicas[victim].kill_9();
    cluster.balancer.wait_for("replica2", false).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.replicas[victim].start().await;
    cluster.balancer.wait_for("replica2", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop().await;
    let account = cluster.settle_and_check("kill -9").await;
    let killed_run = account.final_states[&daily_run].as_str();
    assert!(
        matches!(killed_run, "ABORTED" | "SUCCEEDED"),
        "the killed replica's daily run ended {killed_run}"
    );
    ended.extend(account.final_states);

    // 2. A rolling restart: SIGTERM, exit 0, start again, UP in HAProxy; no
    // client request fails.
    cluster.begin_phase("rolling restart").await;
    let load = cluster.start_load();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..cluster.replicas.len() {
        let name = cluster.replicas[i].name.clone();
        let status = cluster.replicas[i].terminate().await;
        println!("{name} exited after SIGTERM: {status}");
        assert_eq!(status.code(), Some(0), "{name} exits 0 after a drain");
        cluster.replicas[i].start().await;
        cluster.balancer.wait_for(&name, true).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop().await;
    let account = cluster.settle_and_check("rolling restart").await;
    assert_eq!(
        account.failed_requests(),
        0,
        "no client request fails in a rolling restart: {:?}",
        account.failures
    );
    // A drained replica finishes its jobs or hands them back to be run again:
    // none of them is a casualty of the restart.
    assert!(
        account.query_failures.is_empty()
            && account.load_failures.is_empty()
            && account.daily_runs.keys().all(|s| s == "SUCCEEDED"),
        "jobs that failed in a rolling restart: {:?} {:?} {:?}",
        account.query_failures,
        account.load_failures,
        account.daily_runs
    );
    ended.extend(account.final_states);

    // 3. Postgres stopped under load, then started: the replicas say so on
    // /readyz, recover by themselves, and no job is lost.
    cluster.begin_phase("postgres restart").await;
    let load = cluster.start_load();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.postgres.stop();
    let not_ready = cluster.wait_for_readiness(Some("store")).await;
    println!("while Postgres was down: {not_ready:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.postgres.start();
    cluster.wait_for_readiness(None).await;
    for replica in &cluster.replicas {
        cluster.balancer.wait_for(&replica.name, true).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.stop().await;
    // After recovery requests succeed again.
    *clients.phase.lock().unwrap() = "after postgres";
    let probe = clients
        .submit_query(&clients.api, "SELECT 1 AS one")
        .await
        .expect("a query after recovery");
    let outcome = clients.poll_query(&probe, SETTLE).await;
    assert_eq!(
        outcome.as_ref().map(|body| &body["status"]["state"]),
        Some(&Value::from("SUCCEEDED")),
        "a query after Postgres came back: {outcome:?}; its log lines:{}",
        cluster.log_lines_naming(&probe)
    );
    let probe = clients
        .commit_a_load(&clients.api)
        .await
        .expect("a load after recovery");
    let outcome = clients.poll_load(&probe, SETTLE).await;
    assert_eq!(
        outcome.as_ref().map(|body| &body["LoadStatus"]),
        Some(&Value::from("SUCCESS")),
        "a load after Postgres came back: {outcome:?}; its log lines:{}",
        cluster.log_lines_naming(&probe)
    );
    let account = cluster.settle_and_check("postgres restart").await;
    ended.extend(account.final_states);
    let after = cluster.settle_and_check("after postgres").await;
    assert_eq!(
        after.failed_requests(),
        0,
        "requests after recovery: {:?}",
        after.failures
    );
    ended.extend(after.final_states);

    // 4. The lake's S3 endpoint hangs for a while, then answers again.
    cluster.begin_phase("s3 down").await;
    let load = cluster.start_load();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.moto.hang();
    let not_ready = cluster.wait_for_readiness(Some("lake")).await;
    println!("while S3 hung: {not_ready:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.moto.resume();
    cluster.wait_for_readiness(None).await;
    for replica in &cluster.replicas {
        cluster.balancer.wait_for(&replica.name, true).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop().await;
    let account = cluster.settle_and_check("s3 down").await;
    ended.extend(account.final_states);

    // Every job ended exactly once: nothing changed since it was seen ended.
    for (id, state) in &ended {
        let now = match clients.query_status(id).await {
            Some(query) => query["status"]["state"].as_str().unwrap().to_string(),
            None => match clients.load_status(id).await {
                Some(load) => load["LoadStatus"].as_str().unwrap().to_string(),
                None => continue, // a daily run: listed below
            },
        };
        assert_eq!(&now, state, "{id} ended {state}, now {now}");
    }
    let runs = clients.daily_runs().await.expect("the daily runs");
    for run in runs {
        if let Some(state) = ended.get(run["name"].as_str().unwrap()) {
            assert_eq!(&run["status"], state.as_str(), "{run}");
        }
    }
    let ledger = clients.ledger.lock().unwrap();
    println!(
        "\nin all: {} queries accepted, {} loads committed, {} daily runs started; replicas started {:?} times",
        ledger.queries.len(),
        ledger.loads.len(),
        ledger.daily_runs.len(),
        cluster
            .replicas
            .iter()
            .map(|r| r.starts)
            .collect::<Vec<_>>()
    );
}

/// Secrets every replica must share: a token from one replica's identity
/// provider, an upload grant from another, a result page token from a third.
async fn shared_secrets_work_across_replicas(cluster: &Cluster) {
    let clients = &cluster.clients;
    let [one, two, three] = [0, 1, 2].map(|i| cluster.replicas[i].api.clone());
    let token = clients.token_from(&one).await;
    for api in [&one, &two, &three] {
        let (status, body) = clients
            .send(
                "GET /v2/identity/security_metadata",
                clients
                    .http
                    .get(format!("{api}/v2/identity/security_metadata"))
                    .bearer_auth(&token),
            )
            .await
            .unwrap();
        assert_eq!(status, 200, "a token from replica1 on {api}: {body}");
    }
    // An upload descriptor from replica2, the upload to replica3's endpoint
    // directly, the commit on replica1; its rows create the table.
    let (_, load) = clients
        .send(
            "POST /v2/load",
            clients
                .http
                .post(format!("{two}/v2/load"))
                .bearer_auth(&token)
                .json(&json!({"load_type": "APPEND_ONLY", "table_name": TABLE})),
        )
        .await
        .unwrap();
    let id = load["loadId"].as_str().unwrap().to_string();
    let (_, descriptor) = clients
        .send(
            "POST /v2/load/{id}/file",
            clients
                .http
                .post(format!("{two}/v2/load/{id}/file"))
                .bearer_auth(&token)
                .json(&json!({"file_key": "part_1"})),
        )
        .await
        .unwrap();
    let mut form = reqwest::multipart::Form::new();
    for (name, value) in descriptor["presigned_url"]["fields"].as_object().unwrap() {
        form = form.text(name.clone(), value.as_str().unwrap().to_string());
    }
    form = form.part(
        "file",
        reqwest::multipart::Part::bytes(common::parquet("n", 10, 4)),
    );
    // The descriptor names the balancer's upload frontend; send it to replica3's own.
    let form_url = descriptor["presigned_url"]["url"]
        .as_str()
        .unwrap()
        .replace(
            &clients.upload,
            &format!("http://127.0.0.1:{}", cluster.replicas[2].upload_port),
        );
    assert_ne!(
        form_url,
        descriptor["presigned_url"]["url"].as_str().unwrap(),
        "{descriptor}"
    );
    let uploaded = clients
        .http
        .post(form_url)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        uploaded.status(),
        204,
        "an upload granted by replica2 on replica3: {}",
        uploaded.text().await.unwrap()
    );
    let committed = clients
        .http
        .post(format!("{one}/v2/load/{id}/commit"))
        .bearer_auth(&token)
        .json(&json!({"check_sum": {"count(*)": 10}}))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 202);
    clients.ledger.lock().unwrap().loads.push(CommittedLoad {
        id: id.clone(),
        phase: "setup",
        rows: 10,
        answered: true,
    });
    let ended = clients
        .poll_load(&id, SETTLE)
        .await
        .expect("the first load ends");
    assert_eq!(ended["LoadStatus"], "SUCCESS", "{ended}");
    // A result's second page, by the first page's next_token, on another replica.
    let (_, submitted) = clients
        .send(
            "POST /v2/query",
            clients
                .http
                .post(format!("{three}/v2/query"))
                .bearer_auth(&token)
                .json(&json!({"query": "SELECT value FROM range(0, 1500)"})),
        )
        .await
        .unwrap();
    let query = submitted["queryId"].as_str().unwrap().to_string();
    assert_eq!(
        clients.poll_query(&query, SETTLE).await.unwrap()["status"]["state"],
        "SUCCEEDED"
    );
    let (_, first) = clients
        .send(
            "GET /v2/query/{id}/result",
            clients
                .http
                .get(format!("{three}/v2/query/{query}/result"))
                .bearer_auth(&token),
        )
        .await
        .unwrap();
    let next = first["nextToken"]
        .as_str()
        .expect("a second page")
        .to_string();
    let (status, second) = clients
        .send(
            "GET /v2/query/{id}/result",
            clients
                .http
                .get(format!("{one}/v2/query/{query}/result"))
                .query(&[("next_token", &next)])
                .bearer_auth(&token),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "replica3's page token on replica1: {second}");
    assert_eq!(second["resultSet"]["Rows"].as_array().unwrap().len(), 500);
    println!(
        "shared secrets: a token, an upload grant and a page token each worked on another replica"
    );
}
