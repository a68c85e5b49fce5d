//! COPY ... TO STDOUT, cursors (DECLARE/FETCH/CLOSE: psql FETCH_COUNT,
//! psycopg named cursors) and clients that stop reading early (issue 48).
//! psql and psycopg 3 as they are; the analyst refused loudly (SQLSTATE
//! 42501, the spec's text) by COPY and by cursors as by any read; COPY FROM,
//! server files, cursors outside a transaction and unknown cursors answered
//! with a clear SQLSTATE; a cursor closed early leaves its job SUCCEEDED.

use lakehost_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{LAB_TRIPS, PgApp, admin, pg_app, psql};

const ADMIN: (&str, &str, &str) = ("demo-admin", "demo-admin-secret", "demo");
const LAB_ANALYST: (&str, &str, &str) = ("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");

/// What tests/python/pg_cursor_client.py prints for `command`.
async fn cursor_client(command: &str, args: &Value) -> Value {
    let python = test_python();
    let output = tokio::process::Command::new(python)
        .arg(python_dir().join("pg_cursor_client.py"))
        .arg(command)
        .arg(args.to_string())
        .current_dir(python_dir())
        .output()
        .await
        .expect("python runs");
    assert!(
        output.status.success(),
        "pg_cursor_client.py {command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

/// The job `id` once it ended, as the admin reads it over REST.
async fn ended_job(pg: &PgApp, id: &str) -> Value {
    let token = pg.app.client_token("demo", "demo-admin").await;
    let (status, _) = pg.app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(status, StatusCode::OK);
    pg.app.wait_for(ORG_HOST, &token, id, None).await
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_copies_to_a_file_and_to_stdout_in_text_and_csv() {
    let pg = pg_app().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trips.tsv");
    let copy = format!(
        "\\copy (SELECT trip_id, NULLIF(city, 'city-1') AS city FROM demo_lake_v2.trips \
         ORDER BY trip_id) TO '{}'",
        file.display()
    );
    let (ok, _, err) = psql(&pg, ADMIN, &["-q", "-c", &copy]).await;
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "100\tcity-0\n101\t\\N\n200\tcity-0\n201\t\\N\n90100\tcity-0\n90101\t\\N\n"
    );
    let (ok, out, err) = psql(
        &pg,
        ADMIN,
        &[
            "-q",
            "-c",
            "COPY (SELECT trip_id, city, 'a,\"b' AS odd FROM demo_lake_v2.trips \
             WHERE trip_id < 200 ORDER BY trip_id) TO STDOUT WITH (FORMAT csv, HEADER)",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "trip_id,city,odd\n100,city-0,\"a,\"\"b\"\n101,city-1,\"a,\"\"b\"\n"
    );
    let (ok, out, err) = psql(
        &pg,
        ADMIN,
        &[
            "-q",
            "-c",
            "COPY (SELECT trip_id, NULLIF(city, 'city-1') AS city FROM demo_lake_v2.trips \
             WHERE trip_id < 200 ORDER BY trip_id) TO STDOUT WITH (DELIMITER '|', NULL 'none')",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "100|city-0\n101|none\n");

    // The analyst's COPY of rows not theirs is refused as the read is.
    let (ok, _, err) = psql(
        &pg,
        LAB_ANALYST,
        &["-c", &format!("COPY ({LAB_TRIPS}) TO STDOUT")],
    )
    .await;
    assert!(!ok);
    assert!(err.contains(&format!("ERROR:  {DATA_DENIED}")), "{err}");
    let lab_copy = format!(
        "\\copy ({LAB_TRIPS}) TO '{}'",
        dir.path().join("no.tsv").display()
    );
    let (ok, _, err) = psql(&pg, LAB_ANALYST, &["-c", &lab_copy]).await;
    assert!(!ok);
    assert!(err.contains(&format!("ERROR:  {DATA_DENIED}")), "{err}");

    // What lakehost does not do, and what to do instead.
    let (ok, _, err) = psql(&pg, ADMIN, &["-c", "COPY demo_sandbox.scratch FROM STDIN"]).await;
    assert!(!ok);
    assert!(
        err.contains("ERROR:  COPY FROM is not supported: lakehost loads data through its uploads"),
        "{err}"
    );
    let (ok, _, err) = psql(
        &pg,
        ADMIN,
        &["-c", "COPY demo_lake_v2.trips TO '/tmp/trips.csv'"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("use psql's \\copy, or COPY ... TO STDOUT"),
        "{err}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn psycopg_copies_a_table_to_stdout() {
    let pg = pg_app().await;
    let answer = cursor_client(
        "copy",
        &json!({
            "conn": admin(&pg),
            "sql": "COPY demo_insights.summary (trip_id, service_client_id) TO STDOUT (FORMAT csv)",
        }),
    )
    .await;
    let mut lines: Vec<&str> = answer["data"].as_str().expect("data").lines().collect();
    lines.sort();
    assert_eq!(lines, ["100,1", "200,2", "90100,901"], "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_fetch_count_reads_every_row_through_a_cursor() {
    let pg = pg_app().await;
    let (ok, out, err) = psql(
        &pg,
        ADMIN,
        &[
            "-At",
            "-c",
            "\\set FETCH_COUNT 2",
            "-c",
            "SELECT trip_id, city FROM demo_lake_v2.trips ORDER BY trip_id",
            "-c",
            "SHOW lakehost.last_query_id",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..6],
        [
            "100|city-0",
            "101|city-1",
            "200|city-0",
            "201|city-1",
            "90100|city-0",
            "90101|city-1"
        ],
        "{out}"
    );
    let job = ended_job(&pg, lines[6]).await;
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");

    let (ok, _, err) = psql(
        &pg,
        LAB_ANALYST,
        &["-At", "-c", "\\set FETCH_COUNT 2", "-c", LAB_TRIPS],
    )
    .await;
    assert!(!ok);
    assert!(err.contains(&format!("ERROR:  {DATA_DENIED}")), "{err}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn psycopg_named_cursors_fetch_in_steps_and_an_early_close_succeeds() {
    let pg = pg_app().await;
    let sql = "SELECT trip_id FROM demo_lake_v2.trips ORDER BY trip_id";
    let answer = cursor_client(
        "named",
        &json!({ "conn": admin(&pg), "sql": sql, "step": 2 }),
    )
    .await;
    assert_eq!(
        answer["fetches"],
        json!([[[100], [101]], [[200], [201]], [[90100], [90101]]]),
        "{answer}"
    );
    let job = ended_job(&pg, answer["query_id"].as_str().unwrap()).await;
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");

    // Closed after its first step: the client ended it as it wished.
    // 6^7 rows: more than the few batches a read holds in flight, so the
    // read is still running when the cursor closes.
    let big = "SELECT a.trip_id FROM demo_lake_v2.trips a, demo_lake_v2.trips b, \
               demo_lake_v2.trips c, demo_lake_v2.trips d, demo_lake_v2.trips e, \
               demo_lake_v2.trips f, demo_lake_v2.trips g";
    let answer = cursor_client(
        "named",
        &json!({ "conn": admin(&pg), "sql": big, "step": 3, "stop_after": 1 }),
    )
    .await;
    let fetches = answer["fetches"].as_array().expect("fetches");
    assert_eq!(fetches.len(), 1, "{answer}");
    assert_eq!(fetches[0].as_array().unwrap().len(), 3, "{answer}");
    let job = ended_job(&pg, answer["query_id"].as_str().unwrap()).await;
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");
    assert!(job["status"]["stateChangeReason"].is_null(), "{job}");

    let analyst = pg.conn(LAB_ANALYST.0, LAB_ANALYST.1, LAB_ANALYST.2);
    let answer = cursor_client(
        "named",
        &json!({ "conn": analyst, "sql": LAB_TRIPS, "step": 2 }),
    )
    .await;
    assert_eq!(answer["error"], DATA_DENIED, "{answer}");
    assert_eq!(answer["sqlstate"], "42501");
    assert_eq!(answer["stage"], "declare");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn bad_cursor_commands_get_postgres_sqlstates() {
    let python = test_python();
    let pg = pg_app().await;
    // Outside a transaction block (autocommit): as Postgres, 25P01.
    let answer = pg_client(
        &python,
        "run",
        &json!({
            "conn": admin(&pg),
            "autocommit": true,
            "statements": [
                { "sql": "DECLARE c CURSOR FOR SELECT 1" },
                { "sql": "COPY demo_sandbox.scratch FROM STDIN" },
            ],
        }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(results[0]["sqlstate"], "25P01", "{answer}");
    assert_eq!(
        results[0]["error"],
        "DECLARE CURSOR can only be used in transaction blocks"
    );
    assert_eq!(results[1]["sqlstate"], "0A000", "{answer}");
    // In one (psycopg sends BEGIN first).
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                { "sql": "FETCH FORWARD 2 FROM nowhere" },
                { "sql": "DECLARE c SCROLL CURSOR FOR SELECT 1" },
                { "sql": "DECLARE c CURSOR WITH HOLD FOR SELECT 1" },
                { "sql": "DECLARE c CURSOR FOR SELECT 1 AS one" },
                { "sql": "FETCH BACKWARD 1 FROM c" },
                // Two open cursors hold the caller's two running statements
                // (query.max_running_per_caller): a third is refused, not
                // left waiting on its own session.
                { "sql": "DECLARE a CURSOR FOR SELECT 1 AS one" },
                { "sql": "DECLARE b CURSOR FOR SELECT 2 AS two" },
                { "sql": "SELECT 3 AS three" },
                { "sql": "SELECT 4 AS four" },
            ]),
        )
        .await;
    assert_eq!(results[0]["sqlstate"], "34000", "{}", results[0]);
    assert_eq!(results[0]["error"], "cursor \"nowhere\" does not exist");
    assert_eq!(results[1]["sqlstate"], "0A000", "{}", results[1]);
    assert_eq!(results[2]["sqlstate"], "0A000", "{}", results[2]);
    assert_eq!(results[3]["status"], "DECLARE CURSOR", "{}", results[3]);
    assert_eq!(results[4]["sqlstate"], "55000", "{}", results[4]);
    assert_eq!(results[6]["status"], "DECLARE CURSOR", "{}", results[6]);
    assert_eq!(results[7]["sqlstate"], "53400", "{}", results[7]);
    assert!(
        results[7]["error"]
            .as_str()
            .unwrap()
            .contains("CLOSE a cursor, or COMMIT, first"),
        "{}",
        results[7]
    );
    // The refusal rolled the transaction back, closing them.
    assert_eq!(results[8]["rows"], json!([[4]]), "{}", results[8]);
}
