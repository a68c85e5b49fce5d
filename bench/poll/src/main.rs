//! The status-poll benchmark (issue 16): `GET /v2/query/{id}` of a finished
//! query from 100 concurrent pollers, each on its own keep-alive connection,
//! against one lakehost replica and against three behind HAProxy, beside the
//! same load on a trivial axum handler (`poll-bench hello`, this binary) alone
//! and three of it behind the same HAProxy, all in one run. It prints requests
//! per second, p50 and p99 latency, and the ratios to the hello handler.
//!
//! The replicas and HAProxy run the README's production example
//! (`deploy/replica.toml`, `deploy/haproxy.cfg`, filled in here) on a fresh
//! Postgres database and a lake in a local folder (a status poll never reads
//! the lake). It measures; it asserts nothing. Run it with `bench/run-poll`.
//!
//! Then the same clients each submit small queries on one replica (issue 17):
//! `SELECT <n>` submitted, polled to SUCCEEDED and its first page read, and
//! the same in one round trip with `Prefer: wait`. Every answer's value is
//! checked, and at the end every job submitted is counted in the store by
//! state: a job that is not SUCCEEDED, or missing, is printed as lost.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use serde_json::Value;

#[derive(Parser)]
#[command(
    about = "Status-poll throughput and p99: lakehost (1 replica, 3 behind HAProxy) beside an axum hello handler"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Internal>,
    /// Concurrent pollers, each on its own connection.
    #[arg(long, default_value_t = 100)]
    pollers: usize,
    /// Measured seconds per target (after one second of warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The lakehost binary (default: target/release/lakehost, else target/debug/lakehost).
    #[arg(long)]
    lakehost: Option<PathBuf>,
    #[arg(long, env = "LAKEHOST_TEST_HAPROXY", default_value = "haproxy")]
    haproxy: PathBuf,
    /// A Postgres server's admin URL; the benchmark makes a fresh database there.
    #[arg(long, env = "LAKEHOST_TEST_DATABASE_URL")]
    database_url: String,
    /// psql, to create that database.
    #[arg(long, default_value = "psql")]
    psql: PathBuf,
}

#[derive(Subcommand)]
enum Internal {
    /// The peer: GET /hello and GET /readyz answer a small JSON body.
    Hello {
        #[arg(long)]
        listen: String,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    match &args.command {
        Some(Internal::Hello { listen }) => runtime.block_on(hello(listen)),
        None => runtime.block_on(bench(&args)),
    }
}

async fn hello(listen: &str) -> anyhow::Result<()> {
    use axum::{Json, Router, routing::get};
    let app = Router::new()
        .route(
            "/hello",
            get(|| async { Json(serde_json::json!({"hello": "world"})) }),
        )
        .route(
            "/readyz",
            get(|| async { Json(serde_json::json!({"status": "ready"})) }),
        );
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `command` and waits for its first stdout line.
fn spawn(mut command: Command, log: &Path) -> anyhow::Result<(Running, String)> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("{command:?}"))?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = lines.next().transpose()?.unwrap_or_default();
    std::thread::spawn(move || lines.for_each(drop));
    Ok((Running(child), first))
}

fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let held = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?)
}

fn fill(template: &str, values: &[(String, String)]) -> anyhow::Result<String> {
    let mut text = template.to_string();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    if text.contains("{{") {
        bail!("a placeholder left unfilled:\n{text}");
    }
    Ok(text)
}

/// HAProxy on `deploy/haproxy.cfg` in front of three API servers.
struct Balancer {
    _process: Running,
    api: String,
    admin_socket: PathBuf,
}

impl Balancer {
    fn start(haproxy: &Path, dir: &Path, servers: &[u16; 3]) -> anyhow::Result<Self> {
        let ports = free_ports(5)?;
        let admin_socket = dir.join("haproxy.sock");
        let mut values = vec![
            (
                "ADMIN_SOCKET".to_string(),
                admin_socket.display().to_string(),
            ),
            ("API_BIND".into(), format!("127.0.0.1:{}", ports[0])),
            ("UPLOAD_BIND".into(), format!("127.0.0.1:{}", ports[1])),
        ];
        for (i, port) in servers.iter().enumerate() {
            values.push((format!("REPLICA{}_API", i + 1), format!("127.0.0.1:{port}")));
            values.push((
                format!("REPLICA{}_UPLOAD", i + 1),
                format!("127.0.0.1:{}", ports[2 + i]),
            ));
        }
        let config = dir.join("haproxy.cfg");
        std::fs::write(
            &config,
            fill(include_str!("../../../deploy/haproxy.cfg"), &values)?,
        )?;
        let process = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("haproxy.log"))?)
            .spawn()
            .with_context(|| format!("starting {}", haproxy.display()))?;
        Ok(Self {
            _process: Running(process),
            api: format!("http://127.0.0.1:{}", ports[0]),
            admin_socket,
        })
    }

    /// Waits until HAProxy has all three servers UP.
    async fn wait_until_all_up(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = std::os::unix::net::UnixStream::connect(&self.admin_socket)
                .and_then(|mut socket| {
                    socket.write_all(b"show servers state lakehost_api\n")?;
                    let mut answer = String::new();
                    socket.read_to_string(&mut answer)?;
                    Ok(answer
                        .lines()
                        .filter(|l| !l.starts_with('#'))
                        .filter(|l| l.split_whitespace().nth(5) == Some("2"))
                        .count())
                })
                .unwrap_or(0);
            if up == 3 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("HAProxy never saw three servers UP");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A client that keeps one connection, as each poller and submitter has.
fn one_connection_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .tcp_nodelay(true)
        .build()
        .expect("a client")
}

/// What one target measured.
struct Figures {
    target: String,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
    /// The hello handler's figures this one is set beside.
    peer: usize,
}

/// What each client of a submitting target does per cycle.
#[derive(Clone, Copy, PartialEq)]
enum Cycle {
    /// POST /v2/query, GET /v2/query/{id} until SUCCEEDED, GET its result.
    SubmitPollPage,
    /// POST /v2/query with `Prefer: wait=10`: the first page in the answer.
    Wait,
}

/// One submitted query's cycle; its id, and whether its value came back.
async fn submit_cycle(
    client: &reqwest::Client,
    api: &str,
    token: &str,
    n: u64,
    cycle: Cycle,
) -> (Option<String>, bool) {
    let mut request = client
        .post(format!("{api}/v2/query"))
        .bearer_auth(token)
        .json(&serde_json::json!({"query": format!("SELECT {n} AS n")}));
    if cycle == Cycle::Wait {
        request = request.header("Prefer", "wait=10");
    }
    let Ok(response) = request.send().await else {
        return (None, false);
    };
    let status = response.status();
    let Ok(body) = response.json::<Value>().await else {
        return (None, false);
    };
    let Some(id) = body["queryId"].as_str().map(str::to_string) else {
        return (None, false);
    };
    let expected = format!("\"{n}\"");
    if status == reqwest::StatusCode::OK {
        return (Some(id), body.to_string().contains(&expected));
    }
    let mut pause = Duration::from_millis(1);
    loop {
        let Ok(answer) = client
            .get(format!("{api}/v2/query/{id}"))
            .bearer_auth(token)
            .send()
            .await
        else {
            return (Some(id), false);
        };
        let Ok(state) = answer.json::<Value>().await else {
            return (Some(id), false);
        };
        match state["status"]["state"].as_str() {
            Some("SUCCEEDED") => break,
            Some("QUEUED" | "RUNNING") => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => return (Some(id), false),
        }
    }
    let page = client
        .get(format!("{api}/v2/query/{id}/result"))
        .bearer_auth(token)
        .send()
        .await;
    let ok = match page {
        Ok(page) if page.status().is_success() => {
            page.text().await.is_ok_and(|text| text.contains(&expected))
        }
        _ => false,
    };
    (Some(id), ok)
}

/// `clients` clients, each with its own connection, run `cycle` in a loop
/// with a new number each time: one second of warm-up, then `seconds`
/// measured. Returns the figures and the ids of every query submitted.
async fn measure_cycles(
    target: &str,
    api: &str,
    token: &str,
    clients: usize,
    seconds: u64,
    cycle: Cycle,
) -> (Figures, Vec<String>) {
    let start = Instant::now() + Duration::from_secs(1);
    let end = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients as u64)
        .map(|c| {
            let (api, token) = (api.to_string(), token.to_string());
            tokio::spawn(async move {
                let client = one_connection_client();
                let (mut latencies, mut errors, mut ids) = (Vec::new(), 0, Vec::new());
                for i in 0.. {
                    let sent = Instant::now();
                    if sent >= end {
                        break;
                    }
                    let (id, ok) =
                        submit_cycle(&client, &api, &token, c * 10_000_000 + i, cycle).await;
                    ids.extend(id);
                    if sent >= start || !ok {
                        match ok {
                            true => latencies.push(sent.elapsed()),
                            false => errors += 1,
                        }
                    }
                }
                (latencies, errors, ids)
            })
        })
        .collect();
    let (mut latencies, mut errors, mut ids) = (Vec::new(), 0, Vec::new());
    for task in tasks {
        let (mine, my_errors, my_ids) = task.await.expect("a client");
        latencies.extend(mine);
        errors += my_errors;
        ids.extend(my_ids);
    }
    let mut figures = figures_of(target, latencies, errors, seconds);
    figures.peer = 0;
    (figures, ids)
}

/// Latencies summed up as a target's figures.
fn figures_of(target: &str, mut latencies: Vec<Duration>, errors: usize, seconds: u64) -> Figures {
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Figures {
        target: target.to_string(),
        per_second: latencies.len() as f64 / seconds as f64,
        p50: at(0.50),
        p99: at(0.99),
        errors,
        peer: 0,
    }
}

/// The jobs of `ids` in the store, by state (a missing one as `missing`).
fn jobs_by_state(
    psql: &Path,
    database_url: &str,
    ids: &[String],
) -> anyhow::Result<Vec<(String, usize)>> {
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "SELECT state, count(*) FROM query_jobs WHERE id IN ({list}) GROUP BY state ORDER BY state"
    );
    let output = Command::new(psql)
        .arg(database_url)
        .args(["-At", "-F", " ", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(sql.as_bytes())?;
            child.wait_with_output()
        })?;
    if !output.status.success() {
        bail!("counting the jobs failed");
    }
    let mut states = Vec::new();
    let mut found = 0;
    for line in String::from_utf8(output.stdout)?.lines() {
        if let Some((state, count)) = line.split_once(' ') {
            let count: usize = count.trim().parse()?;
            found += count;
            states.push((state.to_string(), count));
        }
    }
    states.push(("missing".into(), ids.len() - found));
    Ok(states)
}

/// `pollers` clients, each with its own connection, GET `url` in a loop: one
/// second of warm-up, then `seconds` measured.
async fn measure(
    target: &str,
    url: &str,
    token: Option<&str>,
    pollers: usize,
    seconds: u64,
) -> Figures {
    let start = Instant::now() + Duration::from_secs(1);
    let end = start + Duration::from_secs(seconds);
    let url = Arc::new(url.to_string());
    let token = Arc::new(token.map(str::to_string));
    let tasks: Vec<_> = (0..pollers)
        .map(|_| {
            let (url, token) = (url.clone(), token.clone());
            tokio::spawn(async move {
                let client = one_connection_client();
                let mut latencies = Vec::new();
                let mut errors = 0;
                loop {
                    let sent = Instant::now();
                    if sent >= end {
                        break;
                    }
                    let mut request = client.get(url.as_str());
                    if let Some(token) = token.as_deref() {
                        request = request.bearer_auth(token);
                    }
                    let ok = match request.send().await {
                        Ok(response) => {
                            let status = response.status();
                            response.bytes().await.is_ok() && status.is_success()
                        }
                        Err(_) => false,
                    };
                    if sent >= start {
                        match ok {
                            true => latencies.push(sent.elapsed()),
                            false => errors += 1,
                        }
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (mine, my_errors) = task.await.expect("a poller");
        latencies.extend(mine);
        errors += my_errors;
    }
    figures_of(target, latencies, errors, seconds)
}

fn lakehost_binary(args: &Args) -> anyhow::Result<(PathBuf, &'static str)> {
    if let Some(path) = &args.lakehost {
        return Ok((path.clone(), "as given"));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()?;
    for (profile, note) in [
        ("release", "release build (fat LTO)"),
        (
            "debug",
            "dev build: lakehost's own code unoptimised, its dependencies at opt-level 2; no target/release/lakehost was found",
        ),
    ] {
        let path = root.join("target").join(profile).join("lakehost");
        if path.exists() {
            return Ok((path, note));
        }
    }
    bail!("no lakehost binary: cargo build --release -p lakehost")
}

async fn bench(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (lakehost, build) = lakehost_binary(args)?;
    println!(
        "status-poll benchmark: {} pollers, {} s each (after 1 s warm-up), on {} cores",
        args.pollers,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("lakehost: {} ({build})", lakehost.display());
    let mut figures = Vec::new();

    // The peer: the hello handler alone, then three of it behind HAProxy.
    {
        let ports = free_ports(3)?;
        let myself = std::env::current_exe()?;
        let mut hellos = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let mut command = Command::new(&myself);
            command.args(["hello", "--listen", &format!("127.0.0.1:{port}")]);
            let (process, first) = spawn(command, &dir.path().join(format!("hello{i}.log")))?;
            if !first.starts_with("listening on") {
                bail!("hello did not start: {first}");
            }
            hellos.push(process);
        }
        let balancer_dir = dir.path().join("hello-haproxy");
        std::fs::create_dir_all(&balancer_dir)?;
        let balancer = Balancer::start(
            &args.haproxy,
            &balancer_dir,
            &[ports[0], ports[1], ports[2]],
        )?;
        balancer.wait_until_all_up().await?;
        let url = format!("http://127.0.0.1:{}/hello", ports[0]);
        figures.push(
            measure(
                "axum hello, 1 process",
                &url,
                None,
                args.pollers,
                args.seconds,
            )
            .await,
        );
        let url = format!("{}/hello", balancer.api);
        figures.push(
            measure(
                "axum hello, 3 behind HAProxy",
                &url,
                None,
                args.pollers,
                args.seconds,
            )
            .await,
        );
        figures[1].peer = 1;
    }

    // lakehost: one replica, then three behind HAProxy, on a fresh database.
    let database = format!("lakehost_poll_bench_{}", std::process::id());
    let created = Command::new(&args.psql)
        .arg(&args.database_url)
        .args(["-q", "-c", &format!("CREATE DATABASE {database}")])
        .status()
        .with_context(|| format!("{} (--psql)", args.psql.display()))?;
    if !created.success() {
        bail!("CREATE DATABASE {database} failed");
    }
    let base = args
        .database_url
        .rsplit_once('/')
        .map_or(args.database_url.as_str(), |(base, _)| base);
    let ports = free_ports(8)?;
    let haproxy_dir = dir.path().join("lakehost-haproxy");
    std::fs::create_dir_all(&haproxy_dir)?;
    let lake = dir.path().join("lake");
    std::fs::create_dir_all(&lake)?;
    let replica_ports = [ports[0], ports[1], ports[2]];
    let balancer = Balancer::start(&args.haproxy, &haproxy_dir, &replica_ports)?;
    let config = dir.path().join("replica.toml");
    let values = [
        ("DATABASE_URL", format!("{base}/{database}")),
        ("LAKE_URL", format!("file://{}", lake.display())),
        ("PUBLIC_API_URL", balancer.api.clone()),
        (
            "PUBLIC_UPLOAD_URL",
            format!("http://127.0.0.1:{}", ports[3]),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v));
    std::fs::write(
        &config,
        fill(include_str!("../../../deploy/replica.toml"), &values)?,
    )?;
    let start_replica = |i: usize| -> anyhow::Result<Running> {
        let data_dir = dir.path().join(format!("replica{i}"));
        let mut command = Command::new(&lakehost);
        command
            .args(["serve", "--config"])
            .arg(&config)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .env(
                "LAKEHOST_SERVER_LISTEN",
                format!("127.0.0.1:{}", replica_ports[i]),
            )
            .env(
                "LAKEHOST_STORAGE_S3_LISTEN",
                format!("127.0.0.1:{}", ports[4 + i]),
            )
            .env("LAKEHOST_STORAGE_DATA_DIR", &data_dir)
            .env("LAKEHOST_SERVER_METRICS_LISTEN", "127.0.0.1:0");
        let (process, first) = spawn(command, &dir.path().join(format!("replica{i}.log")))?;
        if !first.starts_with("lakehost listening on") {
            bail!("replica {i} did not start: {first}");
        }
        Ok(process)
    };
    let first_replica = start_replica(0)?;
    let direct = format!("http://127.0.0.1:{}", replica_ports[0]);
    let http = reqwest::Client::new();
    let token: Value = http
        .post(format!(
            "{direct}/realms/demo/protocol/openid-connect/token"
        ))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "demo-admin"),
            ("client_secret", "demo-admin-secret"),
        ])
        .send()
        .await?
        .json()
        .await?;
    let token = token["access_token"]
        .as_str()
        .context("a token")?
        .to_string();
    let submitted: Value = http
        .post(format!("{direct}/v2/query"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"query": "SELECT 1 AS one"}))
        .send()
        .await?
        .json()
        .await?;
    let id = submitted["queryId"]
        .as_str()
        .with_context(|| format!("a query id in {submitted}"))?
        .to_string();
    loop {
        let status: Value = http
            .get(format!("{direct}/v2/query/{id}"))
            .bearer_auth(&token)
            .send()
            .await?
            .json()
            .await?;
        match status["status"]["state"].as_str() {
            Some("SUCCEEDED") => break,
            Some("QUEUED" | "RUNNING") => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => bail!("SELECT 1 did not succeed: {status}"),
        }
    }
    let url = format!("{direct}/v2/query/{id}");
    figures.push(
        measure(
            "lakehost, 1 replica",
            &url,
            Some(&token),
            args.pollers,
            args.seconds,
        )
        .await,
    );

    // The same clients submitting small queries on the one replica.
    let mut submitted = 0;
    let mut not_succeeded = Vec::new();
    for (target, cycle) in [
        ("lakehost submit+poll+page", Cycle::SubmitPollPage),
        ("lakehost submit, Prefer: wait", Cycle::Wait),
    ] {
        let (measured, ids) =
            measure_cycles(target, &direct, &token, args.pollers, args.seconds, cycle).await;
        figures.push(measured);
        submitted += ids.len();
        let states = jobs_by_state(&args.psql, &format!("{base}/{database}"), &ids)?;
        not_succeeded.extend(
            states
                .into_iter()
                .filter(|(state, count)| state != "SUCCEEDED" && *count > 0),
        );
    }

    // Two more replicas with the first one's signing key, then HAProxy over the three.
    let key = Path::new("idp/demo/signing-keys.json");
    for i in 1..3 {
        let to = dir.path().join(format!("replica{i}")).join(key);
        std::fs::create_dir_all(to.parent().expect("a folder"))?;
        std::fs::copy(dir.path().join("replica0").join(key), to)?;
    }
    let replicas = [first_replica, start_replica(1)?, start_replica(2)?];
    balancer.wait_until_all_up().await?;
    let url = format!("{}/v2/query/{id}", balancer.api);
    figures.push(
        measure(
            "lakehost, 3 behind HAProxy",
            &url,
            Some(&token),
            args.pollers,
            args.seconds,
        )
        .await,
    );
    figures.last_mut().expect("just pushed").peer = 1;

    println!(
        "\n{:<30} {:>10} {:>9} {:>9} {:>7} {:>12} {:>10}",
        "target", "req/s", "p50 ms", "p99 ms", "errors", "req/s ratio", "p99 ratio"
    );
    for f in &figures {
        // lakehost beside the hello handler in the same shape (alone / behind HAProxy).
        let peer = &figures[f.peer];
        println!(
            "{:<30} {:>10.0} {:>9.2} {:>9.2} {:>7} {:>12} {:>10}",
            f.target,
            f.per_second,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.errors,
            format!("{:.2}", f.per_second / peer.per_second),
            format!("{:.2}", f.p99.as_secs_f64() / peer.p99.as_secs_f64()),
        );
    }
    println!(
        "\nratios: against the hello handler in the same shape (1 process, or 3 behind HAProxy); \
         the pollers share the machine's cores with the servers.\n\
         The submit targets count whole cycles (submit, polls, page; or one waited POST) per second, \
         each value checked; errors are cycles that failed or returned another value."
    );
    let lost: usize = not_succeeded.iter().map(|(_, count)| count).sum();
    println!(
        "jobs submitted: {submitted}; in the store and not SUCCEEDED (or missing): {lost} {not_succeeded:?}"
    );
    drop(replicas);
    drop(balancer);
    let _ = Command::new(&args.psql)
        .arg(&args.database_url)
        .args([
            "-q",
            "-c",
            &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    Ok(())
}
