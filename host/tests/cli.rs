//! The `lakehost` binary as a newcomer runs it: `serve` with the embedded default
//! (on a free port), and startup refused with a message naming a bad key.

use std::process::Stdio;

mod common;

use common::{lakehost, serve};

#[test]
fn bad_keys_stop_startup_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("LAKEHOST_SERVER_LISTN", "127.0.0.1:0")], "server.listn"),
        // The demo principals' well-known secrets serve loopback only.
        (
            &[("LAKEHOST_SERVER_LISTEN", "0.0.0.0:0")],
            "idp.clients[0].client_secret",
        ),
        (
            &[("LAKEHOST_SERVER_REQUEST_TIMEOUT_S", "soon")],
            "server.request_timeout_s",
        ),
        (&[("LAKEHOST_AUTH_LEEWAY_S", "300")], "auth.leeway_s"),
    ];
    for (vars, key) in cases {
        let output = lakehost()
            .arg("serve")
            .current_dir(dir.path())
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{key}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("`{key}`")), "{key}: {stderr}");
    }
    // A config file with an unknown key names the key too.
    let file = dir.path().join("lakehost.toml");
    std::fs::write(&file, "[storage]\ndata_dri = \"x\"\n").unwrap();
    let output = lakehost()
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("`storage.data_dri`"));
}

#[test]
fn serve_starts_with_the_embedded_default_and_prints_how_to_get_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut lines, base) = serve(dir.path(), &[], Stdio::null());
    let addr = base.strip_prefix("http://").unwrap().to_string();
    let rest: Vec<String> = lines.by_ref().take(6).map(|l| l.unwrap()).collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("grant_type=client_credentials")),
        "{rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.trim_start().starts_with("Metrics:") && l.ends_with("/metrics")),
        "{rest:?}"
    );
    // The embedded default keeps its data under ./lakehost-data.
    assert!(
        dir.path()
            .join("lakehost-data/idp/demo/signing-keys.json")
            .exists()
    );
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read as _, Write as _};
    write!(
        stream,
        "GET /v2/openapi.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    drop(server);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"openapi\":\"3.1.0\""));
}

/// A parquet file of `rows` trips for service clients 1 and 2.
fn trips_parquet(path: &std::path::Path, rows: i64) {
    std::fs::write(path, common::parquet("trip_id", rows, 2)).unwrap();
}

#[test]
fn pipeline_dry_run_prints_each_steps_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trips.parquet");
    trips_parquet(&file, 3);
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines/load.toml");
    let run = |check_sum: &str| {
        lakehost()
            .args([
                "pipeline",
                "dry-run",
                "--table",
                "trips",
                "--check-sum",
                check_sum,
                "--manifest",
            ])
            .arg(&manifest)
            .arg(&file)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };

    let passed = run(r#"{"count(*)": 3, "sum(trip_id)": 3}"#);
    let stdout = String::from_utf8_lossy(&passed.stdout);
    assert_eq!(
        passed.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&passed.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "step validate_parquet: PASS",
            "step enforce_service_clients: PASS",
            "step verify_checksums: PASS",
            "step match_schema: PASS",
            "step insert: PASS",
            "rows appended: 3 (into a scratch lake that is now deleted)",
        ]
    );

    let failed = run(r#"{"count(*)": 4}"#);
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert_eq!(failed.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "step verify_checksums: FAIL CheckSumError\n  CHECKSUM_MISMATCH: Checksum mismatch for count(*): expected 4, actual 3 [FAIL]"
        ),
        "{stdout}"
    );
    assert!(
        !stdout.contains("step insert"),
        "stops at the failure: {stdout}"
    );

    let refused = run("{}");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("At least one check_sum is required")
    );
}

#[test]
fn the_tools_keep_compiled_steps_in_the_users_cache_and_load_them_next_time() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let pipelines = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let cache = dir.path().join("cache");
    let check = || {
        let output = lakehost()
            .args(["pipeline", "check"])
            .arg(pipelines.join("load.toml"))
            .env("LAKEHOST_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    // The compiled form of each file, by name, with the inode it has: a step
    // compiled again is written under a new name and renamed over it.
    let kept = || {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(cache.join("compiled-steps"))
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, entry.metadata().unwrap().ino())
            })
            .collect();
        files.sort();
        files
    };

    let first = check();
    let after_first = kept();
    // The five built-in load steps, each compiled once, no partial files.
    assert_eq!(after_first.len(), 5, "{after_first:?}");
    assert!(
        after_first.iter().all(|(name, _)| name.ends_with(".cwasm")),
        "{after_first:?}"
    );
    let second = check();
    assert_eq!(second, first);
    assert_eq!(
        kept(),
        after_first,
        "the second run loaded what the first compiled"
    );

    // A cache folder that cannot be made (a file is in the way): the check
    // still runs, compiling, and says why nothing was kept.
    let in_the_way = dir.path().join("a-file");
    std::fs::write(&in_the_way, b"not a folder").unwrap();
    let output = lakehost()
        .args(["pipeline", "check"])
        .arg(pipelines.join("load.toml"))
        .env("LAKEHOST_CACHE_DIR", &in_the_way)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), first);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no cache of compiled steps"),
        "{output:?}"
    );
    assert_eq!(std::fs::read(&in_the_way).unwrap(), b"not a folder");

    // An empty LAKEHOST_CACHE_DIR keeps nothing anywhere.
    let output = lakehost()
        .args(["pipeline", "check"])
        .arg(pipelines.join("load.toml"))
        .env("LAKEHOST_CACHE_DIR", "")
        .env("HOME", dir.path().join("home"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!dir.path().join("home").exists());
}

#[test]
fn pipeline_check_judges_every_step_without_running_any() {
    let dir = tempfile::tempdir().unwrap();
    let pipelines = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let check = |args: &[&str], manifest: &std::path::Path| {
        let output = lakehost()
            .args(["pipeline", "check"])
            .args(args)
            .arg(manifest)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.code(), stdout)
    };

    let (code, stdout) = check(&[], &pipelines.join("load.toml"));
    assert_eq!(code, Some(0), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "step validate_parquet (builtin:validate_parquet): ok",
            "step enforce_service_clients (builtin:enforce_service_clients): ok",
            "step verify_checksums (builtin:verify_checksums): ok",
            "step match_schema (builtin:match_schema): ok",
            "step insert (builtin:insert): ok",
        ]
    );
    assert!(
        lines[5].ends_with("load.toml: usable as the load steps"),
        "{stdout}"
    );
    let (code, stdout) = check(&["--daily"], &pipelines.join("daily.toml"));
    assert_eq!(code, Some(0), "{stdout}");

    // A load manifest is not a daily one: the first step's key says why.
    let (code, stdout) = check(&["--daily"], &pipelines.join("load.toml"));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("steps[0].component") && stdout.contains("validate_parquet"),
        "{stdout}"
    );

    // Every broken step is named, the usable ones pass, the server's
    // folders stay out of the messages.
    std::fs::write(dir.path().join("garbage.wasm"), b"\0asm not really").unwrap();
    let manifest = dir.path().join("load.toml");
    std::fs::write(
        &manifest,
        r#"version = 1
[[steps]]
name = "broken"
component = "garbage.wasm"
grants = ["log"]
[[steps]]
name = "missing"
component = "missing.wasm"
[[steps]]
name = "checks"
component = "builtin:verify_checksums"
grants = ["staged-sql"]
[[steps]]
name = "insert"
component = "builtin:insert"
grants = ["staged-sql", "lake-append", "log"]
"#,
    )
    .unwrap();
    let (code, stdout) = check(&[], &manifest);
    assert_eq!(code, Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with("step broken (garbage.wasm): not a usable component"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("step missing (missing.wasm): No such file"),
        "{stdout}"
    );
    assert_eq!(lines[2], "step checks (builtin:verify_checksums): ok");
    assert_eq!(lines[3], "step insert (builtin:insert): ok");
    let folder = dir.path().display().to_string();
    assert!(
        !lines[..2].iter().any(|line| line.contains(&folder)),
        "{stdout}"
    );

    // A step importing a capability its grants lack (every call of it
    // answers not-granted) is told, and a load manifest with nothing that
    // writes the rows is refused.
    let insert = "[[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\n\
                  grants = [\"staged-sql\", \"lake-append\", \"log\"]\n";
    std::fs::write(
        &manifest,
        format!(
            "version = 1\n[[steps]]\nname = \"v\"\ncomponent = \"builtin:validate_parquet\"\n\
             grants = [\"log\"]\n{insert}"
        ),
    )
    .unwrap();
    let (code, stdout) = check(&[], &manifest);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.starts_with(
            "step v (builtin:validate_parquet): ok; it imports staged-files without the grant"
        ),
        "{stdout}"
    );
    std::fs::write(
        &manifest,
        "version = 1\n[[steps]]\nname = \"v\"\ncomponent = \"builtin:validate_parquet\"\n\
         grants = [\"staged-files\", \"log\"]\n",
    )
    .unwrap();
    let (code, stdout) = check(&[], &manifest);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("steps: no step is granted `lake-append`"),
        "{stdout}"
    );

    // A real component of the other world, as a file: refused by its world.
    let (_, daily_step) = lakehost::pipeline::builtin::component("sql_transform").unwrap();
    std::fs::write(dir.path().join("daily.wasm"), daily_step).unwrap();
    std::fs::write(
        &manifest,
        format!(
            "version = 1\n[[steps]]\nname = \"other_world\"\ncomponent = \"daily.wasm\"\n{insert}"
        ),
    )
    .unwrap();
    let (code, stdout) = check(&[], &manifest);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.starts_with("step other_world (daily.wasm): imports do not match the step world")
            || stdout
                .starts_with("step other_world (daily.wasm): exports do not match the step world"),
        "{stdout}"
    );

    // A grant the pipeline kind does not have, and a file that is no
    // manifest, are the manifest's own errors.
    std::fs::write(
        &manifest,
        "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ngrants = [\"lake-sql\"]\n",
    )
    .unwrap();
    let (code, stdout) = check(&[], &manifest);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("steps[0].grants"), "{stdout}");
    let (code, stdout) = check(&[], &dir.path().join("nowhere.toml"));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("cannot read"), "{stdout}");
}

#[test]
fn pipeline_wit_writes_the_package_the_server_links() {
    let dir = tempfile::tempdir().unwrap();
    let output = lakehost()
        .args(["pipeline", "wit", "--out", "deps/lakehost"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|line| line == "package lakehost:pipeline@0.1.0"),
        "{stdout}"
    );
    let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    for name in ["pipeline.wit", "README.md"] {
        assert_eq!(
            std::fs::read_to_string(dir.path().join("deps/lakehost").join(name)).unwrap(),
            std::fs::read_to_string(wit.join(name)).unwrap(),
            "{name}"
        );
    }
    // A folder that cannot be made: exit 2, naming it.
    std::fs::write(dir.path().join("taken"), b"a file").unwrap();
    let output = lakehost()
        .args(["pipeline", "wit", "--out", "taken"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("lakehost pipeline wit: taken: "));
}

/// The README's tour against the real binary logging at debug level: its
/// query and load are counted in `/metrics` (the tour's last step), and no
/// secret, token, signature or temporary credential it handed out or
/// received is in the log or the scrape afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tour_is_counted_in_metrics_and_no_secret_reaches_the_log_or_the_scrape() {
    use serde_json::{Value, json};
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (server, mut output, base) = serve(dir.path(), &[("RUST_LOG", "debug")], log.into());
    // The banner's `Metrics: http://<addr>/metrics`.
    let metrics_url = output
        .by_ref()
        .take(6)
        .map(|l| l.unwrap())
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("Metrics:")
                .map(|u| u.trim().to_string())
        })
        .expect("the banner names the metrics address");
    std::thread::spawn(move || output.for_each(drop));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut secrets: Vec<String> = vec!["demo-admin-secret".into()];

    let token = common::demo_admin_token(&http, &base).await;
    secrets.push(token.clone());
    secrets.push(token.rsplit('.').next().unwrap().to_string());
    // A token with a forged signature is refused, and not logged either.
    let forged = format!(
        "{}.AAAAforgedsignatureAAAA",
        token.rsplit_once('.').unwrap().0
    );
    secrets.push("AAAAforgedsignatureAAAA".into());
    let refused = http
        .get(format!("{base}/v2/identity/security_metadata"))
        .bearer_auth(&forged)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(&token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let metadata = call(reqwest::Method::GET, "/v2/identity/security_metadata", None)
        .await
        .unwrap();
    assert_eq!(metadata.status(), 200);

    // A query to its CSV link, fetched.
    let submitted: Value = call(
        reqwest::Method::POST,
        "/v2/query",
        Some(json!({"query": "SELECT 1 AS one"})),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = submitted["queryId"].as_str().unwrap().to_string();
    for _ in 0..200 {
        let state: Value = call(reqwest::Method::GET, &format!("/v2/query/{id}"), None)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if state["status"]["state"] == "SUCCEEDED" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let link = call(reqwest::Method::GET, &format!("/v2/query/{id}/csv"), None)
        .await
        .unwrap();
    assert_eq!(link.status(), 302);
    let location = url::Url::parse(link.headers()["location"].to_str().unwrap()).unwrap();
    let signature = location
        .query_pairs()
        .find(|(k, _)| k == "X-Amz-Signature")
        .unwrap()
        .1
        .to_string();
    secrets.push(signature);
    let csv = http.get(location).send().await.unwrap();
    assert_eq!(csv.text().await.unwrap(), "\"one\"\n\"1\"\n");

    // A load's upload credentials and form signature; a commit that fails.
    let load: Value = call(
        reqwest::Method::POST,
        "/v2/load",
        Some(json!({"load_type": "APPEND_ONLY", "table_name": "trips"})),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let load_id = load["loadId"].as_str().unwrap().to_string();
    let upload: Value = call(
        reqwest::Method::POST,
        &format!("/v2/load/{load_id}/file"),
        None,
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    for key in ["SecretAccessKey", "SessionToken"] {
        secrets.push(upload["sts_credentials"][key].as_str().unwrap().to_string());
    }
    secrets.push(
        upload["presigned_url"]["fields"]["Signature"]
            .as_str()
            .unwrap()
            .to_string(),
    );
    let committed = call(
        reqwest::Method::POST,
        &format!("/v2/load/{load_id}/commit"),
        Some(json!({"check_sum": {"count(*)": 1}})),
    )
    .await
    .unwrap();
    assert_eq!(committed.status(), 202);
    for _ in 0..400 {
        let status: Value = call(reqwest::Method::GET, &format!("/v2/load/{load_id}"), None)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if status["LoadStatus"] != "PROCESSING" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // /metrics (the tour's last step) shows the tour's query and load, and
    // nothing the caller sent.
    let scrape = http
        .get(&metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let has = |name: &str, labels: &[&str]| {
        scrape.lines().any(|line| {
            line.starts_with(&format!("{name}{{")) && labels.iter().all(|l| line.contains(l))
        })
    };
    assert!(
        has(
            "lakehost_queries_ended_total",
            &["state=\"SUCCEEDED\"", "statement_type=\"DML\""]
        ),
        "{scrape}"
    );
    assert!(
        has("lakehost_load_commits_total", &["outcome=\"FAIL\""]),
        "{scrape}"
    );
    assert!(
        has(
            "lakehost_http_requests_total",
            &["route=\"/v2/query\"", "method=\"POST\"", "status=\"202\""]
        ),
        "{scrape}"
    );
    for secret in secrets.iter().chain([&id, &load_id]) {
        assert!(
            !scrape.contains(secret.as_str()),
            "the scrape holds {secret}"
        );
    }

    drop(server);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("DEBUG"), "the log is at debug level");
    for secret in &secrets {
        assert!(
            !logged.contains(secret.as_str()),
            "the log holds a secret: {secret}"
        );
    }
}

/// `server.log_format = "json"`: every line the server logs is one JSON
/// object; each request's line has its method, route template, status,
/// latency and request id (the caller's, when it is a short token), and the
/// query's and load's state changes are lines with their job id, carrying
/// the id of the request that caused them. No token is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_request_ids_and_job_transitions() {
    use serde_json::{Value, json};
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (server, _output, base) = serve(
        dir.path(),
        &[("LAKEHOST_SERVER_LOG_FORMAT", "json")],
        log.into(),
    );
    let http = reqwest::Client::new();
    let token = common::demo_admin_token(&http, &base).await;
    let post = |path: &str, request_id: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .bearer_auth(&token)
            .header("x-request-id", request_id)
            .json(&body)
            .send()
    };
    let get_json = |path: String| {
        let request = http.get(format!("{base}{path}")).bearer_auth(&token);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };

    let submitted: Value = post(
        "/v2/query",
        "log-query-1",
        json!({"query": "SELECT 1 AS one"}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let query_id = submitted["queryId"].as_str().unwrap().to_string();
    let mut state = Value::Null;
    for _ in 0..400 {
        state = get_json(format!("/v2/query/{query_id}")).await;
        if state["status"]["state"] == "SUCCEEDED" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(state["status"]["state"], "SUCCEEDED", "{state}");

    let load: Value = post(
        "/v2/load",
        "log-load-1",
        json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let load_id = load["loadId"].as_str().unwrap().to_string();
    let committed = post(
        &format!("/v2/load/{load_id}/commit"),
        "log-commit-1",
        json!({"check_sum": {"count(*)": 1}}),
    )
    .await
    .unwrap();
    assert_eq!(committed.status(), 202);
    let mut load = Value::Null;
    for _ in 0..400 {
        load = get_json(format!("/v2/load/{load_id}")).await;
        if load["LoadStatus"] != "PROCESSING" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(load["LoadStatus"], "FAIL", "no file was uploaded: {load}");
    drop(server);

    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(!logged.contains(&token), "the log holds the token");
    let lines: Vec<Value> = logged
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for line in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "no {key}: {line}");
        }
    }
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "request finished")
        .collect();
    assert!(requests.len() >= 5, "{logged}");
    for line in &requests {
        let id = line["request_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{line}"));
        assert!(!id.is_empty());
        assert!(
            line["method"].is_string() && line["route"].is_string(),
            "{line}"
        );
        assert!(
            line["status"].is_u64() && line["latency_ms"].is_number(),
            "{line}"
        );
    }
    let one = |what: &str, wanted: &dyn Fn(&Value) -> bool| -> Value {
        let found: Vec<&Value> = lines.iter().filter(|l| wanted(l)).collect();
        assert_eq!(found.len(), 1, "{what}: {found:?}\n{logged}");
        found[0].clone()
    };
    let submit = one("the submit's line", &|l| {
        l["message"] == "request finished" && l["request_id"] == "log-query-1"
    });
    assert_eq!(
        (&submit["method"], &submit["route"], &submit["status"]),
        (&json!("POST"), &json!("/v2/query"), &json!(202))
    );
    let polls = requests
        .iter()
        .filter(|l| l["route"] == "/v2/query/{query_id}")
        .count();
    assert!(polls >= 1, "the poll's line names the template: {logged}");
    assert!(!logged.contains(&format!("\"route\":\"/v2/query/{query_id}\"")));

    // The query's transitions carry the submitting request's id.
    let job = |job: &'static str, id: &str, state: &'static str| {
        let id = id.to_string();
        move |l: &Value| {
            l["message"] == "job state"
                && l["job"] == job
                && l["job_id"] == id.as_str()
                && l["state"] == state
        }
    };
    let running = one("query RUNNING", &job("query", &query_id, "RUNNING"));
    assert_eq!(running["request_id"], "log-query-1", "{running}");
    let succeeded = one("query SUCCEEDED", &job("query", &query_id, "SUCCEEDED"));
    assert_eq!(succeeded["request_id"], "log-query-1", "{succeeded}");
    assert_eq!(succeeded["statement_type"], "DML");
    // The load's: PROCESSING in its commit request, the end in a worker.
    let processing = lines
        .iter()
        .find(|l| job("load", &load_id, "PROCESSING")(l) && l["request_id"] == "log-commit-1");
    assert!(processing.is_some(), "{logged}");
    let failed = one("load FAIL", &job("load", &load_id, "FAIL"));
    assert_eq!(failed["error_type"], "NoFilesUploaded", "{failed}");
}

/// The `built-in pipeline steps ready` line of a JSON log, waited for.
fn builtins_ready_line(log: &std::path::Path) -> serde_json::Value {
    for _ in 0..2400 {
        let logged = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = logged
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["message"] == "built-in pipeline steps ready")
        {
            return line;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!(
        "no `built-in pipeline steps ready` line: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn a_restart_loads_the_compiled_steps_instead_of_compiling_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let json = [("LAKEHOST_SERVER_LOG_FORMAT", "json")];
    let start = |log_name: &str| {
        let log = dir.path().join(log_name);
        let file = std::fs::File::create(&log).unwrap();
        let (server, _output, _base) = serve(dir.path(), &json, file.into());
        let line = builtins_ready_line(&log);
        drop(server);
        line
    };
    let first = start("first.log");
    let compiled = first["compiled"].as_u64().unwrap();
    assert!(compiled > 0, "{first}");
    assert_eq!(first["loaded_compiled"], 0, "{first}");
    let kept = std::fs::read_dir(dir.path().join("lakehost-data/compiled-steps"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert_eq!(kept.len() as u64, compiled, "{kept:?}");
    assert!(kept.iter().all(|name| name.ends_with(".cwasm")), "{kept:?}");

    let second = start("second.log");
    assert_eq!(
        (&second["compiled"], &second["loaded_compiled"]),
        (&serde_json::json!(0), &serde_json::json!(compiled)),
        "{second}"
    );
    println!(
        "built-in steps ready: {} ms compiling, {} ms loading compiled",
        first["ms"], second["ms"]
    );
}
