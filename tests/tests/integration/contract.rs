//! The OpenAPI contract, checked from outside: schemathesis (pinned in
//! tests/python/requirements.txt) reads the document each kind of host serves
//! and runs every check in every phase against the real server, the stateful
//! phase following the document's links (submit → status, result, CSV,
//! cancel; create load → status, file, commit). Its configuration and the
//! spec-prescribed exclusions are in tests/python/schemathesis.toml; the
//! generator of SQL text in tests/python/schemathesis_hooks.py.

use lakehost_tests::*;
use serde_json::{Value, json};

const ZONE_HOST: &str = "lab.demo.api.localhost";
const HEALTH: [&str; 2] = ["/livez", "/readyz"];
/// Fixed so a failure replays; `LAKEHOST_TEST_CONTRACT_SEED` picks another.
const DEFAULT_SEED: &str = "22";

/// The paths of the document `host` serves.
async fn document_of(app: &TestApp, host: &str) -> Value {
    let (status, doc) = app.get(host, "/v2/openapi.json", None).await;
    assert_eq!(status, 200, "{host}: {doc}");
    doc
}

fn paths_of(doc: &Value) -> Vec<String> {
    doc["paths"].as_object().unwrap().keys().cloned().collect()
}

/// Whether the document has links for a stateful phase to follow.
#[derive(Clone, Copy, PartialEq)]
enum Links {
    Followed,
    None,
}

/// Runs schemathesis on `doc` against `host` with `token`; panics with its
/// report unless it found nothing (and, with links, its stateful phase ran).
async fn schemathesis(
    python: &std::path::Path,
    app: &TestApp,
    (host, token): (&str, &str),
    doc: &Value,
    links: Links,
) {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("openapi.json");
    std::fs::write(&schema, doc.to_string()).unwrap();
    let seed = std::env::var("LAKEHOST_TEST_CONTRACT_SEED").unwrap_or(DEFAULT_SEED.into());
    let config = python_dir().join("schemathesis.toml");
    let output = tokio::process::Command::new(python)
        .args(["-m", "schemathesis.cli", "--config-file"])
        .arg(&config)
        .arg("run")
        .arg(&schema)
        .args(["--url", &app.base])
        .args(["-H", &format!("Host: {host}")])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--seed", &seed, "--no-color", "--report-dir"])
        .arg(dir.path().join("report"))
        .current_dir(dir.path())
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("PYTHONPATH", python_dir())
        .output()
        .await
        .expect("schemathesis runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis on {host} (seed {seed}) found problems:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let scenarios = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Scenarios:"))
        .and_then(|count| count.trim().parse::<u32>().ok());
    if links == Links::Followed {
        assert!(
            scenarios.is_some_and(|n| n > 0),
            "{host}: the stateful phase ran no scenario:\n{report}"
        );
    }
}

#[tokio::test]
async fn each_hosts_document_lists_what_that_host_answers() {
    let app = spawn_app().await;
    let org = paths_of(&document_of(&app, ORG_HOST).await);
    assert!(org.contains(&"/v2/query".to_string()), "{org:?}");
    assert!(org.contains(&SECURITY_METADATA.to_string()), "{org:?}");
    assert!(!org.iter().any(|p| p.starts_with("/dailyRun")), "{org:?}");

    let zone = paths_of(&document_of(&app, ZONE_HOST).await);
    assert!(zone.contains(&"/v2/load".to_string()), "{zone:?}");
    assert!(!zone.contains(&SECURITY_METADATA.to_string()), "{zone:?}");
    assert!(!zone.iter().any(|p| p.starts_with("/dailyRun")), "{zone:?}");

    let dailyrun = paths_of(&document_of(&app, DAILYRUN_HOST).await);
    assert!(!dailyrun.is_empty());
    assert!(
        dailyrun
            .iter()
            .all(|p| p.starts_with("/dailyRun/") || HEALTH.contains(&p.as_str())),
        "{dailyrun:?}"
    );
    // Every host lists the health checks.
    for paths in [&org, &zone, &dailyrun] {
        assert!(
            HEALTH.iter().all(|h| paths.iter().any(|p| p == h)),
            "{paths:?}"
        );
    }

    // Every path a document lists is answered on its host (not the 404 of
    // a path the host does not serve), and the database enum is the host's.
    for (host, token, paths) in [
        (ORG_HOST, app.token_for(&["ZoneAdmin"], "[1]"), &org),
        (
            ZONE_HOST,
            app.zone_token_for("lab", &["ZoneAdmin"], "[1]"),
            &zone,
        ),
    ] {
        for path in paths.iter().filter(|p| !p.contains('{')) {
            let (status, body) = app.get(host, path, Some(&token)).await;
            assert!(
                status != 404 || body["message"] != "Not Found",
                "{host}{path}: {status} {body}"
            );
        }
    }
    let databases = |doc: &Value| {
        doc.pointer("/components/schemas/QueryRequest/properties/database/enum")
            .cloned()
    };
    assert_eq!(
        databases(&document_of(&app, ORG_HOST).await),
        Some(json!([
            "demo_lake_v2",
            "demo_insights",
            "demo_data_input",
            "demo_sandbox",
            null
        ]))
    );
    assert_eq!(
        databases(&document_of(&app, ZONE_HOST).await),
        Some(json!([
            "lab_lake",
            "lab_insights",
            "lab_data_input",
            "lab_sandbox",
            null
        ]))
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn schemathesis_finds_nothing_on_any_host() {
    let python = test_python();
    let app = spawn_app().await;
    seed_demo_lake(&app).await;

    let org_doc = document_of(&app, ORG_HOST).await;
    let org_token = app.token_for(&["ZoneAdmin"], "[1]");
    schemathesis(
        &python,
        &app,
        (ORG_HOST, &org_token),
        &org_doc,
        Links::Followed,
    )
    .await;

    let zone_doc = document_of(&app, ZONE_HOST).await;
    let zone_token = app.zone_token_for("lab", &["ZoneAdmin"], "[1]");
    schemathesis(
        &python,
        &app,
        (ZONE_HOST, &zone_token),
        &zone_doc,
        Links::Followed,
    )
    .await;

    let dailyrun_doc = document_of(&app, DAILYRUN_HOST).await;
    let dailyrun_token = app.daily_token();
    schemathesis(
        &python,
        &app,
        (DAILYRUN_HOST, &dailyrun_token),
        &dailyrun_doc,
        Links::None,
    )
    .await;

    // A caller of the lowest role meets the 403s the document lists.
    let consumer = app.token_for(&["PublicConsumer"], "[1]");
    schemathesis(
        &python,
        &app,
        (ORG_HOST, &consumer),
        &org_doc,
        Links::Followed,
    )
    .await;
}
