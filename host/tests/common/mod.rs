//! What the host crate's process tests share (`cli.rs`, `crash.rs`,
//! `replicas.rs`): a small parquet file to load, and a token of the embedded
//! provider's demo admin. Each test file uses some of it.
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    sync::Arc,
};

use serde_json::{Value, json};

use datafusion::{
    arrow::{
        array::{Int64Array, RecordBatch},
        datatypes::{DataType, Field, Schema},
    },
    parquet::arrow::ArrowWriter,
};

/// A parquet file of `rows` rows: `first_column` counting from 0, and
/// `service_client_id` cycling through 1..=`service_clients`.
pub fn parquet(first_column: &str, rows: i64, service_clients: i64) -> Vec<u8> {
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new(first_column, DataType::Int64, false),
            Field::new("service_client_id", DataType::Int64, false),
        ])),
        vec![
            Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(
                (0..rows)
                    .map(|i| 1 + i % service_clients)
                    .collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    bytes
}

/// A token of the embedded provider's `demo-admin` client from the server at
/// `base` (client credentials).
pub async fn demo_admin_token(http: &reqwest::Client, base: &str) -> String {
    demo_client_token(http, base, "demo-admin").await
}

/// A token of the embedded provider's demo client `client_id` (its secret
/// is `<client_id>-secret`) from the server at `base`.
pub async fn demo_client_token(http: &reqwest::Client, base: &str, client_id: &str) -> String {
    let reply: serde_json::Value = http
        .post(format!("{base}/realms/demo/protocol/openid-connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("client_secret", &format!("{client_id}-secret")),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    reply["access_token"].as_str().unwrap().to_string()
}

/// The `lakehost` binary with only the variables each test sets.
pub fn lakehost() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lakehost"));
    // Only the variables each test sets.
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

/// A server process stopped when the test ends, also when an assertion fails.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub type Output = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// `lakehost serve` with the embedded default in `dir`, on free ports, with
/// `env` besides; the server, the rest of its standard output and its
/// `http://host:port`.
pub fn serve(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> (KillOnDrop, Output, String) {
    let mut server = KillOnDrop(
        lakehost()
            .arg("serve")
            .current_dir(dir)
            .env("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0")
            .env("LAKEHOST_STORAGE_S3_LISTEN", "127.0.0.1:0")
            .env("LAKEHOST_SERVER_METRICS_LISTEN", "127.0.0.1:0")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(server.0.stdout.take().unwrap()).lines();
    let first = banner_text(lines.next().unwrap().unwrap());
    let base = first
        .strip_prefix("lakehost listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    (server, lines, base)
}

/// Sends the request and reads its JSON body.
pub async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// Creates an APPEND_ONLY load of `table` at `api` and uploads `parquet` as
/// its one file by the descriptor's form; the load's id.
pub async fn staged_load(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    table: &str,
    parquet: Vec<u8>,
) -> String {
    let load = json_of(
        http.post(format!("{api}/v2/load"))
            .bearer_auth(token)
            .json(&json!({"load_type": "APPEND_ONLY", "table_name": table})),
    )
    .await;
    let id = load["loadId"]
        .as_str()
        .unwrap_or_else(|| panic!("POST {api}/v2/load: {load}"))
        .to_string();
    let descriptor = json_of(
        http.post(format!("{api}/v2/load/{id}/file"))
            .bearer_auth(token),
    )
    .await;
    let mut form = reqwest::multipart::Form::new();
    for (name, value) in descriptor["presigned_url"]["fields"].as_object().unwrap() {
        form = form.text(name.clone(), value.as_str().unwrap().to_string());
    }
    form = form.part("file", reqwest::multipart::Part::bytes(parquet));
    let uploaded = http
        .post(descriptor["presigned_url"]["url"].as_str().unwrap())
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 204, "the upload of load {id}");
    id
}

/// [`staged_load`], then its commit with `check_sum`; the load's id.
pub async fn commit_parquet(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    table: &str,
    parquet: Vec<u8>,
    check_sum: Value,
) -> String {
    let id = staged_load(http, api, token, table, parquet).await;
    let committed = http
        .post(format!("{api}/v2/load/{id}/commit"))
        .bearer_auth(token)
        .json(&json!({"check_sum": check_sum}))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 202);
    id
}

/// `n` distinct free ports on 127.0.0.1 (held together while chosen, so no
/// two are the same; another process could still take one before it is
/// bound).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A command of a step author's toolchain in `dir`, with none of this
/// build's settings (they are for the host), as a shell the author opens
/// would run it.
pub fn author(program: impl AsRef<std::ffi::OsStr>, dir: &std::path::Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_MANIFEST_DIR",
    ] {
        command.env_remove(var);
    }
    command
}

/// A banner line's text: with `log_format = "json"` each banner line is a
/// JSON object whose `message` is the text line.
pub fn banner_text(line: String) -> String {
    serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|json| json["message"].as_str().map(str::to_owned))
        .unwrap_or(line)
}
