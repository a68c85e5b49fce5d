//! What an operator sees of a `lakehost serve` process (docs/operating.md):
//! with `server.log_format = "json"` every line it writes, on stdout (the
//! banner) and on stderr (the log, and the error that stops startup), is one
//! JSON object; a lake bucket that does not exist is said at startup and by
//! `/readyz` until it is created; a Postgres database that does not exist
//! stops startup with how to create it.

mod common;

use std::{
    io::{BufRead as _, BufReader, Read},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::{KillOnDrop, demo_admin_token, json_of, lakehost};
use serde_json::{Value, json};

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// A `lakehost serve` process whose stdout and stderr are read line by line
/// as they come.
struct Server {
    process: KillOnDrop,
    lines: mpsc::Receiver<(Stream, String)>,
    /// Every line read so far, in the order read.
    read: Vec<(Stream, String)>,
}

impl Server {
    /// `lakehost serve` in `dir` with the embedded default on free ports, in
    /// JSON, with `env` besides.
    fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> Self {
        let mut process = KillOnDrop(
            serve_command(dir, env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let (sender, lines) = mpsc::channel();
        read_lines(process.0.stdout.take().unwrap(), Stream::Stdout, &sender);
        read_lines(process.0.stderr.take().unwrap(), Stream::Stderr, &sender);
        Self {
            process,
            lines,
            read: Vec::new(),
        }
    }

    /// The next line, waiting up to `wait`; `None` once both streams ended.
    fn next_line(&mut self, wait: Duration) -> Option<(Stream, String)> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                self.read.push(line.clone());
                Some(line)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("no line within {wait:?}; so far: {:#?}", self.read)
            }
        }
    }

    /// The API's address, from the banner's first line (`url`).
    fn api(&mut self) -> String {
        loop {
            let (stream, line) = self
                .next_line(Duration::from_secs(60))
                .expect("the server printed its banner");
            if stream == Stream::Stdout {
                let line = as_json(&line);
                assert_eq!(line["target"], "lakehost::banner", "{line}");
                let url = line["url"].as_str().unwrap_or_else(|| panic!("{line}"));
                assert_eq!(
                    line["message"].as_str(),
                    Some(format!("lakehost listening on {url}").as_str())
                );
                return url.to_string();
            }
        }
    }

    /// A line on stderr whose `message` is `message`, read already or
    /// waited for.
    fn wait_for_log(&mut self, message: &str) -> Value {
        let is_it = |stream: Stream, line: &str| {
            (stream == Stream::Stderr)
                .then(|| as_json(line))
                .filter(|line| line["message"] == message)
        };
        if let Some(line) = self.read.iter().find_map(|(s, l)| is_it(*s, l)) {
            return line;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (stream, line) = self
                .next_line(left)
                .unwrap_or_else(|| panic!("no {message:?} line: {:#?}", self.read));
            if let Some(line) = is_it(stream, &line) {
                return line;
            }
        }
    }

    /// SIGTERM, then every line until both streams end, and the exit status.
    fn stop(mut self) -> (std::process::ExitStatus, Vec<(Stream, String)>) {
        // SAFETY: kill(2) of our own child; no memory effects here.
        let sent = unsafe { libc::kill(self.process.0.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
        while self.next_line(Duration::from_secs(60)).is_some() {}
        let status = self.process.0.wait().unwrap();
        (status, std::mem::take(&mut self.read))
    }
}

/// `lakehost serve` in `dir` on free ports with JSON logs and `env`.
fn serve_command(dir: &std::path::Path, env: &[(&str, &str)]) -> Command {
    let mut command = lakehost();
    command
        .arg("serve")
        .current_dir(dir)
        .env("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0")
        .env("LAKEHOST_STORAGE_S3_LISTEN", "127.0.0.1:0")
        .env("LAKEHOST_SERVER_METRICS_LISTEN", "127.0.0.1:0")
        .env("LAKEHOST_SERVER_LOG_FORMAT", "json")
        .env("RUST_LOG", "info,lakehost=debug")
        .envs(env.iter().copied());
    command
}

/// Sends each line of `stream` to `sender` from a thread of its own.
fn read_lines(
    stream: impl Read + Send + 'static,
    which: Stream,
    sender: &mpsc::Sender<(Stream, String)>,
) {
    let sender = sender.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if sender.send((which, line)).is_err() {
                return;
            }
        }
    });
}

/// `line` as a JSON object in the log's shape, or a failure naming it.
fn as_json(line: &str) -> Value {
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(value.is_object(), "not an object: {line}");
    for key in ["timestamp", "level", "target", "message"] {
        assert!(value.get(key).is_some(), "no {key}: {line}");
    }
    value
}

/// GET /readyz: its status and body.
async fn readyz(http: &reqwest::Client, api: &str) -> (u16, Value) {
    let answer = http.get(format!("{api}/readyz")).send().await.unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// Polls /readyz until it answers 200.
async fn until_ready(http: &reqwest::Client, api: &str) {
    let mut last = (0, Value::Null);
    for _ in 0..600 {
        last = readyz(http, api).await;
        if last.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not ready after 30 s: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_json_logs_every_line_on_stdout_and_stderr_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let api = server.api();
    let http = reqwest::Client::new();
    until_ready(&http, &api).await;
    let token = demo_admin_token(&http, &api).await;
    let submitted = json_of(
        http.post(format!("{api}/v2/query"))
            .bearer_auth(&token)
            .json(&json!({"query": "SELECT 1 AS one"})),
    )
    .await;
    let query_id = submitted["queryId"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted}"))
        .to_string();
    let mut state = Value::Null;
    for _ in 0..800 {
        state = json_of(
            http.get(format!("{api}/v2/query/{query_id}"))
                .bearer_auth(&token),
        )
        .await;
        if state["status"]["state"] == "SUCCEEDED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(state["status"]["state"], "SUCCEEDED", "{state}");
    let (status, lines) = server.stop();
    assert!(status.success(), "{status}: {lines:#?}");

    let parsed: Vec<(Stream, Value)> = lines
        .iter()
        .map(|(stream, line)| (*stream, as_json(line)))
        .collect();
    let banner: Vec<&Value> = parsed
        .iter()
        .filter(|(stream, _)| *stream == Stream::Stdout)
        .map(|(_, line)| line)
        .collect();
    // The plain banner's seven lines, each with the address it names.
    let keys = [
        "url",
        "org_api",
        "dailyrun_api",
        "openapi",
        "uploads",
        "metrics",
        "token_url",
    ];
    assert_eq!(banner.len(), keys.len(), "{banner:#?}");
    for (line, key) in banner.iter().zip(keys) {
        assert_eq!(line["target"], "lakehost::banner", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
        assert!(line[key].is_string(), "no {key}: {line}");
    }
    assert!(
        banner[6]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Get a token: curl -s ")),
        "{}",
        banner[6]
    );
    let logged = |wanted: &dyn Fn(&Value) -> bool| {
        parsed
            .iter()
            .any(|(stream, line)| *stream == Stream::Stderr && wanted(line))
    };
    assert!(logged(
        &|l: &Value| l["message"] == "request finished" && l["route"] == "/v2/query"
    ));
    assert!(logged(&|l: &Value| l["message"] == "job state"
        && l["job"] == "query"
        && l["job_id"] == query_id.as_str()
        && l["state"] == "SUCCEEDED"));
    assert!(logged(&|l: &Value| l["message"] == "draining"));
    assert!(logged(&|l: &Value| l["message"] == "drained"));
}

#[test]
fn with_json_logs_the_error_that_stops_startup_is_json() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = serve_command(dir.path(), &[("LAKEHOST_SERVER_LISTEN", address.as_str())])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty(), "no banner");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<Value> = stderr.lines().map(as_json).collect();
    let last = lines.last().unwrap_or_else(|| panic!("nothing on stderr"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert_eq!(
        last["message"],
        format!(
            "lakehost: cannot listen on {address} (server.listen): Address already in use (os error 98)"
        ),
        "{stderr}"
    );
}

/// A lake on S3 whose bucket does not exist: the server starts, says so in
/// its log, `/readyz` answers 503 naming the bucket and how to create it,
/// and 200 once the bucket is created, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_s3),
    ignore = "needs an S3 server: eval \"$(.ci/s3)\" first (README, Tests)"
)]
async fn a_missing_bucket_is_said_at_startup_and_by_readyz_until_it_is_created() {
    let endpoint = std::env::var("LAKEHOST_TEST_S3_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
        .expect("LAKEHOST_TEST_S3_ENDPOINT names an S3 server: eval \"$(.ci/s3)\" first");
    let bucket = format!("lakehost-operator-{}", std::process::id());
    let lake_url = format!("s3://{bucket}/lake");
    let variable = |name: &str| std::env::var(name).unwrap_or_default();
    let aws: Vec<(&str, String)> = [
        "AWS_ALLOW_HTTP",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
    ]
    .into_iter()
    .map(|name| (name, variable(name)))
    .chain([("AWS_ENDPOINT_URL", endpoint.clone())])
    .collect();
    let mut env: Vec<(&str, &str)> = aws.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("LAKEHOST_STORAGE_LAKE_URL", lake_url.as_str()));
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &env);
    let api = server.api();
    let how = format!(
        "the bucket \"{bucket}\" does not exist (create it: aws s3 mb s3://{bucket}, with \
         --endpoint-url $AWS_ENDPOINT_URL on an S3-compatible store)"
    );
    let warned = server.wait_for_log("the lake is not ready: /readyz answers 503 until it is");
    assert_eq!(warned["level"], "WARN", "{warned}");
    assert_eq!(warned["error"], how.as_str(), "{warned}");

    let http = reqwest::Client::new();
    let (status, body) = readyz(&http, &api).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not ready");
    assert_eq!(body["message"], format!("lake: {how}"));
    assert_eq!(body["checks"]["lake"], how.as_str());
    assert_eq!(body["checks"]["store"], "ok");

    let created = http
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    until_ready(&http, &api).await;
    let (status, lines) = server.stop();
    assert!(status.success(), "{status}: {lines:#?}");
}

/// `storage.database_url` naming a database the Postgres server does not
/// have: startup stops, saying how to create it.
#[test]
#[cfg_attr(
    not(lakehost_has_postgres),
    ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
)]
fn a_missing_database_stops_startup_saying_how_to_create_it() {
    let admin = std::env::var("LAKEHOST_TEST_DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .expect("LAKEHOST_TEST_DATABASE_URL names a Postgres server: eval \"$(.ci/postgres)\"");
    let mut url = url::Url::parse(&admin).unwrap();
    let database = format!("lakehost_missing_{}", std::process::id());
    url.set_path(&database);
    let user = url.username().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = serve_command(
        dir.path(),
        &[("LAKEHOST_STORAGE_DATABASE_URL", url.as_str())],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<Value> = stderr.lines().map(as_json).collect();
    let last = lines.last().expect("a line");
    let message = last["message"].as_str().unwrap();
    let how = format!(
        "the database \"{database}\" does not exist: create it, owned by the role lakehost \
         connects as, with `createdb -O {user} {database}` (or in psql: \
         CREATE DATABASE \"{database}\" OWNER \"{user}\";)"
    );
    assert!(message.contains(&how), "{message}");
    assert!(
        message.ends_with(&format!("database \"{database}\" does not exist")),
        "the cause, Postgres's own words, comes last: {message}"
    );
}
