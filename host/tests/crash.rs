//! Stopping the real server in the middle of a load's commit, on the same
//! data afterwards:
//!
//! - `kill -9` before the insert step, and after it wrote its files but
//!   before the commit recorded them: after a restart the load ends FAIL
//!   once, naming the step its server died in, is not run again (issue 22:
//!   the step may be what killed it), and no row of it is ever visible; the
//!   killed attempt's files are swept.
//! - SIGTERM (a drain): the server hands the commit back and exits 0; the
//!   next server runs it again and it ends SUCCESS once with all its rows.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

mod common;

const ROWS: i64 = 1000;

struct Server {
    child: Child,
    api: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `kill -9`.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then the exit status (at most a minute later).
    fn terminate(self) -> std::process::ExitStatus {
        self.signal_then_wait(1, Duration::from_secs(60))
    }

    /// `times` SIGTERMs a moment apart, then the exit status, at most
    /// `within` later.
    fn signal_then_wait(mut self, times: usize, within: Duration) -> std::process::ExitStatus {
        let pid = i32::try_from(self.child.id()).unwrap();
        for n in 0..times {
            if n > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            // SAFETY: sends a signal to the child this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        }
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running after SIGTERM x{times}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn start(dir: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lakehost"))
        .args(["serve", "--config"])
        .arg(dir.join("lakehost.toml"))
        // Only the config file: the test runner's LAKEHOST_TEST_* and AWS_*
        // variables are not the server's.
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn,lakehost::load=info")
        .stdout(Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("server.log"))
                .unwrap(),
        )
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no output; see {}", dir.join("server.log").display()))
        .unwrap();
    let api = first
        .strip_prefix("lakehost listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    // Keep reading: the server still prints its banner.
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, api }
}

/// The server's config: `manifest` as the demo org's load pipeline, 3 s
/// commit leases, and `server.drain_s = drain_s`.
fn write_config(dir: &Path, manifest: &str, drain_s: u64) {
    let data = dir.join("data");
    let pipelines = dir.join("pipelines");
    std::fs::create_dir_all(pipelines.join("orgs/demo")).unwrap();
    std::fs::write(pipelines.join("orgs/demo/load.toml"), manifest).unwrap();
    std::fs::write(
        dir.join("lakehost.toml"),
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\ndrain_s = {drain_s}\n[storage]\ndata_dir = {:?}\ns3_listen = \"127.0.0.1:0\"\n\
             [pipeline]\ndir = {:?}\nlease_s = 3\ntest_steps = true\n",
            data.display().to_string(),
            pipelines.display().to_string()
        ),
    )
    .unwrap();
}

/// The default steps with a three-second pause before or after the insert.
fn manifest(pause_after_insert: bool) -> String {
    let step = |name: &str, grants: &str, extra: &str| {
        format!(
            "[[steps]]\nname = \"{name}\"\ncomponent = \"builtin:{name}\"\ngrants = [{grants}]\n{extra}\n"
        )
    };
    let pause = step("pause", "", "[steps.config]\nms = 3000");
    let mut text = String::from("version = 1\n");
    text += &step("validate_parquet", "\"staged-files\"", "");
    text += &step("verify_checksums", "\"staged-sql\"", "");
    if !pause_after_insert {
        text += &pause;
    }
    text += &step("insert", "\"staged-sql\", \"lake-append\"", "");
    if pause_after_insert {
        text += &pause;
    }
    text
}

/// Creates a load of ROWS trips, uploads and commits it.
async fn commit_a_load(http: &reqwest::Client, api: &str, token: &str) -> String {
    common::commit_parquet(
        http,
        api,
        token,
        "trips",
        common::parquet("trip_id", ROWS, 4),
        json!({"count(*)": ROWS}),
    )
    .await
}

async fn load_status(http: &reqwest::Client, api: &str, token: &str, id: &str) -> Value {
    common::json_of(http.get(format!("{api}/v2/load/{id}")).bearer_auth(token)).await
}

/// `SELECT count(*), count(DISTINCT svc$load_id) FROM trips`, or `None` while
/// the table does not exist (no load has ended SUCCESS).
async fn counts(http: &reqwest::Client, api: &str, token: &str) -> Option<(String, String)> {
    let submitted = http
        .post(format!("{api}/v2/query"))
        .bearer_auth(token)
        .json(&json!({"query": "SELECT count(*), count(DISTINCT \"svc$load_id\") FROM trips"}))
        .send()
        .await
        .unwrap();
    if submitted.status() == 400 {
        return None;
    }
    let id = submitted.json::<Value>().await.unwrap()["queryId"]
        .as_str()
        .unwrap()
        .to_string();
    loop {
        let status: Value =
            common::json_of(http.get(format!("{api}/v2/query/{id}")).bearer_auth(token)).await;
        match status["status"]["state"].as_str().unwrap() {
            "SUCCEEDED" => break,
            "QUEUED" | "RUNNING" => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("query ended {other}: {status}"),
        }
    }
    let page: Value = common::json_of(
        http.get(format!("{api}/v2/query/{id}/result"))
            .bearer_auth(token),
    )
    .await;
    let cell = |i: usize| {
        page["resultSet"]["Rows"][1]["Data"][i]["VarCharValue"]
            .as_str()
            .unwrap()
            .to_string()
    };
    Some((cell(0), cell(1)))
}

/// Waits until the load is no longer PROCESSING; its status then.
async fn load_end(http: &reqwest::Client, api: &str, token: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = load_status(http, api, token, id).await;
        if status["LoadStatus"] != "PROCESSING" {
            return status;
        }
        assert!(Instant::now() < deadline, "still PROCESSING: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a server, commits a load and stops the server with `stop` while
/// the commit is in its pause (before the insert, or after it wrote its
/// files); then starts a server on the same data, which waits for the
/// commit's lease to run out (3 s) when it was not handed back. Returns the
/// new server, a token, the load's id and how it ended.
async fn stop_during_commit(
    dir: &Path,
    (pause_after_insert, drain_s): (bool, u64),
    stop: impl FnOnce(Server),
) -> (Server, reqwest::Client, String, String, Value) {
    write_config(dir, &manifest(pause_after_insert), drain_s);
    let http = reqwest::Client::new();
    let server = start(dir);
    let token_1 = common::demo_admin_token(&http, &server.api).await;
    let id = commit_a_load(&http, &server.api, &token_1).await;
    // Into the pause: before the insert, or after it wrote its files (the
    // step the server records as the commit's).
    let store = lakehost::store::Store::open_sqlite(&dir.join("data/lakehost.db"))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let load = store.load(&id).await.unwrap().unwrap();
        if load.running_step.as_deref() == Some("pause") {
            break;
        }
        assert!(Instant::now() < deadline, "never in its pause: {load:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
    assert_eq!(
        load_status(&http, &server.api, &token_1, &id).await["LoadStatus"],
        "PROCESSING"
    );
    stop(server);

    // A new client: the restarted server may get the old port, and a pooled
    // connection to the killed one would be reset.
    let http = reqwest::Client::new();
    let server = start(dir);
    let token = common::demo_admin_token(&http, &server.api).await;
    assert_eq!(
        counts(&http, &server.api, &token).await,
        None,
        "no rows before the load ends"
    );
    let ended = load_end(&http, &server.api, &token, &id).await;
    (server, http, token, id, ended)
}

async fn kill_during_commit(pause_after_insert: bool) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (server, http, token, id, ended) =
        stop_during_commit(dir, (pause_after_insert, 1), Server::kill).await;
    // FAIL, naming the step its server died in; never run again.
    assert_eq!(ended["LoadStatus"], "FAIL", "{ended}");
    assert_eq!(ended["ErrorType"], "InternalError", "{ended}");
    let message = ended["ErrorMessages"].to_string();
    assert!(
        message.contains("stopped during step `pause`") && message.contains("not run again"),
        "{ended}"
    );
    assert_eq!(counts(&http, &server.api, &token).await, None, "no rows");
    // It stays ended: no second run changes it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        load_status(&http, &server.api, &token, &id).await["LoadStatus"],
        "FAIL"
    );
    assert_eq!(counts(&http, &server.api, &token).await, None);
    // The killed attempt's files (after its insert) are gone.
    let files = parquet_files(&dir.join("data"));
    assert!(files.is_empty(), "{files:?}");
}

/// The names of the lake's data files under the demo lake database.
fn parquet_files(data: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut folders = vec![data.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet")
                && path.to_string_lossy().contains("demo_lake_v2")
            {
                names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_before_the_insert_step_then_the_load_ends_fail_naming_the_step() {
    kill_during_commit(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_insert_wrote_its_files_then_no_row_is_ever_visible() {
    kill_during_commit(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_commit_back_and_the_next_server_ends_it_once_with_all_rows() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (server, http, token, id, ended) = stop_during_commit(dir, (true, 1), |server| {
        let status = server.terminate();
        assert_eq!(status.code(), Some(0), "a drained server exits 0");
    })
    .await;
    assert_eq!(ended["LoadStatus"], "SUCCESS", "{ended}");
    assert_eq!(
        counts(&http, &server.api, &token).await,
        Some((ROWS.to_string(), "1".to_string())),
        "all rows, once"
    );
    // The handed-back attempt's files are gone: each attempt names its own,
    // and the one that ended swept the earlier ones.
    let files = parquet_files(&dir.join("data"));
    assert!(!files.is_empty());
    assert!(
        files
            .iter()
            .all(|name| name.starts_with(&format!("{id}-a2-"))),
        "{files:?}"
    );
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("commit handed back"), "{log}");
}

/// A second SIGTERM during a drain exits at once with 130: the drain would
/// have waited up to a minute for the commit in its pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once_with_130() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (server, http, token, id, ended) = stop_during_commit(dir, (false, 60), |server| {
        let status = server.signal_then_wait(2, Duration::from_secs(10));
        assert_eq!(status.code(), Some(130), "exited at once");
    })
    .await;
    // Not handed back: the commit's lease ran out, so it ended as a death.
    assert_eq!(ended["LoadStatus"], "FAIL", "{ended}");
    assert_eq!(
        counts(&http, &server.api, &token).await,
        None,
        "{id}: no rows"
    );
}
