//! A Flight SQL session opened with a client id and secret outlives its
//! handshake token (issue 48): ADBC (tests/python/flight_session_client.py)
//! handshakes once, the server's clock moves past the realm token's
//! lifetime, and the same session still queries, renewed through the
//! client-credentials flow; the analyst's session is still refused loudly.

use std::time::{Duration, Instant};

use lakehost_tests::*;
use serde_json::{Value, json};

async fn flight_app() -> TestApp {
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    seed_demo_lake(&app).await;
    app
}

/// Runs `statements` in one ADBC session of `(client id, secret)`, with
/// `headers`; at the session's pause, moves the server's clock past the
/// realm token's lifetime (300 s) and short of the session's idle end.
async fn session_across_expiry(
    app: &TestApp,
    (username, password): (&str, &str),
    headers: Value,
    statements: Value,
) -> Value {
    let python = test_python();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut steps = vec![statements[0].clone(), json!({ "wait_for_file": go })];
    steps.extend(statements.as_array().unwrap()[1..].iter().cloned());
    let args = json!({
        "uri": format!("grpc://{}", app.flight_addr.expect("flight listener")),
        "username": username,
        "password": password,
        "headers": headers,
        "statements": steps,
    });
    let client = tokio::spawn(async move {
        let output = tokio::process::Command::new(python)
            .arg(python_dir().join("flight_session_client.py"))
            .arg("run")
            .arg(args.to_string())
            .output()
            .await
            .expect("python runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    });
    let ready = dir.path().join("go.ready");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the session never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.clock.advance(chrono::Duration::seconds(600));
    std::fs::write(&go, b"").unwrap();
    client.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn an_adbc_session_outlives_its_handshake_token() {
    let app = flight_app().await;
    let count = "SELECT count(*) AS n FROM demo_lake_v2.trips";
    let answer = session_across_expiry(
        &app,
        ("demo-admin", "demo-admin-secret"),
        json!({}),
        json!([{ "sql": count }, { "sql": count }]),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(results[0]["rows"], json!([[6]]), "{answer}");
    assert_eq!(results[1]["rows"], json!([[6]]), "{answer}");

    // The analyst's renewed session is refused as the first token was.
    let lab = "SELECT trip_id FROM lab_lake.trips ORDER BY trip_id";
    let answer = session_across_expiry(
        &app,
        ("demo-own-analyst", "demo-own-analyst-secret"),
        json!({ "x-lakehost-zone": "lab" }),
        json!([{ "sql": lab }, { "sql": lab }]),
    )
    .await;
    let results = &answer["results"];
    for result in results.as_array().unwrap() {
        let error = result["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        assert!(error.contains(DATA_DENIED), "{answer}");
    }
    assert_eq!(results.as_array().unwrap().len(), 2, "{answer}");
}
