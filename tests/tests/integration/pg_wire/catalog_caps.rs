//! Issue 45 on the Postgres listener. Catalog statements (`pg_catalog`,
//! `information_schema`) run under the caps jobs have, per org and per
//! caller, within a budget that fits what they read and counts from their
//! start: one caller's slow catalog statements no longer stall another
//! org's clients (finding 2). A write refused while it runs answers as the
//! spec's refusal, SQLSTATE 42501 with its text, not XX000 (finding 9).
//! Asserted by what ended first, never by how long anything took.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use lakehost_tests::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{PgApp, pg_app};

/// A catalog statement over nothing but the catalog's own tables that runs
/// far past any catalog budget (a cross join of four `pg_type`s, every row
/// looked at), and answers with one row.
const SLOW: &str = "SELECT count(*) AS n FROM pg_catalog.pg_type a, pg_catalog.pg_type b, \
                    pg_catalog.pg_type c, pg_catalog.pg_type d \
                    WHERE length(a.typname || b.typname || c.typname || d.typname) > 0";

/// Another org's trivial lookup, as a BI tool sends on connect.
const LOOKUP: &str = "SELECT relname FROM pg_catalog.pg_class WHERE relname = 'pg_class'";

/// Postgres's own text for a statement past its time limit (SQLSTATE 57014).
const TIMEOUT: &str = "canceling statement due to statement timeout";

/// How many slow statements the analyst sends at once: as in the attack,
/// more than the replica's `query.workers` (4 by default).
const FLOOD: usize = 6;

/// The text of a catalog statement refused over its caller's caps
/// (SQLSTATE 53300), with the test server's caps (the defaults).
fn over_caps() -> String {
    let caps = lakehost::Config::default().query;
    format!(
        "too many catalog statements at once: a client runs at most {} and an org at most \
         {} at a time on a server; try again when they have ended",
        caps.max_running_per_caller, caps.max_running_per_org
    )
}

/// `sql` on a psycopg connection of its own, connected now and sent only
/// once the test creates `go` (the client writes `go.ready` when it is
/// connected and waiting). Sends `(label, results)` on `ended` when the
/// client is done.
fn paused_statement(
    python: &Path,
    conn: Value,
    sql: &str,
    go: PathBuf,
    (label, ended): (&'static str, mpsc::UnboundedSender<(&'static str, Value)>),
) {
    let args = json!({
        "conn": conn,
        "autocommit": true,
        "statements": [{ "wait_for_file": go }, { "sql": sql }],
    });
    let python = python.to_path_buf();
    tokio::spawn(async move {
        let answer = pg_client(&python, "run", &args).await;
        let _ = ended.send((label, answer));
    });
}

/// Waits until each of `files` exists (bounded, so a client that never
/// connects fails the test instead of hanging it).
async fn wait_for_files(files: &[PathBuf]) {
    let waited = tokio::time::timeout(Duration::from_secs(120), async {
        while !files.iter().all(|file| file.exists()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the clients never connected: {files:?}");
}

/// The one statement's result of a `paused_statement`'s answer.
fn result_of(answer: &Value) -> &Value {
    &answer["results"][0]
}

/// The `go` file named `name`, and the `.ready` file its client writes.
fn go_files(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (dir.join(name), dir.join(format!("{name}.ready")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn one_callers_slow_catalog_statements_leave_room_for_another_orgs_lookup() {
    let python = test_python();
    let pg: PgApp = pg_app().await;
    let dir = tempfile::tempdir().unwrap();
    let (ended_tx, mut ended) = mpsc::unbounded_channel();

    // Another org's BI tool is connected, its lookup ready to send.
    let (lookup_go, lookup_ready) = go_files(dir.path(), "lookup");
    let other = pg.conn("other-admin", "other-admin-secret", "other");
    paused_statement(
        &python,
        other,
        LOOKUP,
        lookup_go.clone(),
        ("lookup", ended_tx.clone()),
    );
    // An own-client analyst of the demo org, on several connections.
    let mut flood = Vec::new();
    for i in 0..FLOOD {
        let (go, ready) = go_files(dir.path(), &format!("slow-{i}"));
        let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "demo");
        paused_statement(
            &python,
            analyst,
            SLOW,
            go.clone(),
            ("slow", ended_tx.clone()),
        );
        flood.push((go, ready));
    }
    drop(ended_tx);
    let mut ready: Vec<PathBuf> = flood.iter().map(|(_, ready)| ready.clone()).collect();
    ready.push(lookup_ready);
    wait_for_files(&ready).await;

    // The analyst's slow statements go first and take what they may; the
    // lookup follows once they are in (the pause orders the sends, nothing
    // is asserted on it).
    for (go, _) in &flood {
        std::fs::write(go, b"").unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::write(&lookup_go, b"").unwrap();

    let mut order = Vec::new();
    while let Ok(Some((label, answer))) =
        tokio::time::timeout(Duration::from_secs(300), ended.recv()).await
    {
        order.push((label, answer));
    }
    assert_eq!(order.len(), FLOOD + 1, "a client never ended: {order:?}");

    // The lookup answered while every slow statement was still there:
    // today it waited for the first of them to time out.
    let labels: Vec<&str> = order.iter().map(|(label, _)| *label).collect();
    assert_eq!(labels[0], "lookup", "what ended first: {labels:?}");
    let lookup = result_of(&order[0].1);
    assert_eq!(lookup["rows"], json!([["pg_class"]]), "{}", order[0].1);

    // Each slow statement was cut at the catalog's budget, or refused when
    // its caller's share stayed full for as long: never answered.
    let over_caps = over_caps();
    let mut timed_out = 0;
    for (_, answer) in &order[1..] {
        let result = result_of(answer);
        match result["sqlstate"].as_str() {
            Some("57014") => {
                assert_eq!(result["error"], TIMEOUT, "{answer}");
                timed_out += 1;
            }
            Some("53300") => assert_eq!(result["error"], over_caps.as_str(), "{answer}"),
            _ => panic!("a slow catalog statement ended otherwise: {answer}"),
        }
    }
    // At least the caller's share ran (to its budget).
    let per_caller = lakehost::Config::default().query.max_running_per_caller;
    assert!(timed_out >= per_caller, "{order:?}");

    // The cut statements stopped and gave their places back (before, they
    // ran on unseen): the analyst's next catalog statement answers.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "demo");
    let results = pg.run(&python, analyst, json!([{ "sql": LOOKUP }])).await;
    assert_eq!(results[0]["rows"], json!([["pg_class"]]), "{}", results[0]);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_write_refused_while_it_runs_is_the_specs_refusal_under_42501() {
    let python = test_python();
    let pg = pg_app().await;
    // The analyst writes the sandbox, with service clients 1 and 2 only.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "demo");
    let results = pg
        .run(
            &python,
            analyst,
            json!([
                // Rows of service client 3, known only once they are made.
                { "sql": "CREATE TABLE demo_sandbox.leak AS SELECT 1 AS x, 3 AS service_client_id" },
                { "sql": "SHOW lakehost.last_query_id" },
                { "sql": "CREATE TABLE demo_sandbox.mine AS SELECT 1 AS x, 1 AS service_client_id" },
                { "sql": "INSERT INTO demo_sandbox.mine VALUES (2, 3)" },
                // A row of no service client.
                { "sql": "INSERT INTO demo_sandbox.mine SELECT 3, CAST(NULL AS BIGINT)" },
                { "sql": "SELECT x, service_client_id FROM demo_sandbox.mine" },
            ]),
        )
        .await;
    for refused in [&results[0], &results[3], &results[4]] {
        assert_eq!(refused["sqlstate"], "42501", "{refused}");
        assert_eq!(refused["error"], DATA_DENIED, "{refused}");
        assert_eq!(refused["severity"], "ERROR", "{refused}");
    }
    assert_eq!(results[2]["rows"], json!([[1]]), "{}", results[2]);
    assert_eq!(results[5]["rows"], json!([[1, 1]]), "{}", results[5]);

    // Refused while it ran, not when it was sent: its job FAILED so.
    let id = results[1]["rows"][0][0].as_str().expect("a query id");
    let token = pg.app.client_token("demo", "demo-own-analyst").await;
    let job = pg.app.wait_for(ORG_HOST, &token, id, None).await;
    assert_eq!(job["status"]["state"], "FAILED", "{job}");
    assert_eq!(job["status"]["stateChangeReason"], DATA_DENIED, "{job}");
}
