//! ADBC Flight SQL parameters (issue 48): values bound as values,
//! re-execution with new parameters, `executemany`.
//!
//! The handle a `DoPut` answers keeps the original statement and the rows
//! bound to it, so a prepared statement runs again with new values; each
//! value is inlined as its exact literal (quotes, NaN, the infinities,
//! NULL, dates and decimals arrive as bound), and several rows bound to an
//! `INSERT ... VALUES (?, ...)` are one INSERT of them all.

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

/// `args` plus the server's address.
fn with_uri(app: &TestApp, mut args: Value) -> Value {
    args["uri"] = json!(format!(
        "grpc://{}",
        app.flight_addr.expect("flight listener")
    ));
    args
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_prepared_statement_runs_again_with_new_values_exactly_as_bound() {
    let python = test_python();
    let app = flight_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let sql = "SELECT ? AS s, CAST(? AS VARCHAR) AS f, ? AS n, ? AS d, ? AS x";
    let executions = json!([
        ["''", { "float": "nan" }, null, { "date": "2026-01-10" }, { "decimal": "1.50" }],
        ["a''b", { "float": "inf" }, 1, { "date": "1969-12-31" }, { "decimal": "-0.001" }],
        ["it's", { "float": "-inf" }, -7, null, null],
    ]);
    let answer = flight_client(
        &python,
        "adbc_rebind",
        &with_uri(
            &app,
            json!({ "token": admin, "sql": sql, "executions": executions }),
        ),
    )
    .await;
    let results = answer["results"].as_array().expect("results");
    let rows: Vec<&Value> = results.iter().map(|r| &r["rows"]).collect();
    assert_eq!(
        rows,
        [
            &json!([["''", "NaN", null, "2026-01-10", "1.50"]]),
            &json!([["a''b", "inf", 1, "1969-12-31", "-0.001"]]),
            &json!([["it's", "-inf", -7, null, null]]),
        ],
        "{answer}"
    );

    // An own-client analyst re-running a filtered read: their rows, then
    // another client's refused with the spec's text.
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let filtered = "SELECT trip_id FROM demo_lake_v2.trips \
                    WHERE service_client_id = ? ORDER BY trip_id";
    let answer = flight_client(
        &python,
        "adbc_rebind",
        &with_uri(
            &app,
            json!({ "token": analyst, "sql": filtered, "executions": [[1], [2], [901], [1]] }),
        ),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(results[0]["rows"], json!([[100], [101]]), "{answer}");
    let refused = results[1]["error"].as_str().expect("refused");
    assert!(refused.contains(DATA_DENIED), "{answer}");
    assert!(refused.contains("PermissionDenied"), "{answer}");
    // The public service client's rows are everyone's.
    assert_eq!(results[2]["rows"], json!([[90100], [90101]]), "{answer}");
    assert_eq!(results[3]["rows"], json!([[100], [101]]), "{answer}");
}

/// The rows of a sandbox table bound by ADBC, as REST reads them.
const BOUND_ROWS: &str = "SELECT service_client_id, name, CAST(x AS VARCHAR), \
                          CAST(day AS VARCHAR) FROM demo_sandbox.bound \
                          ORDER BY service_client_id";

fn many(app: &TestApp, token: &str, how: &str, rows: Value) -> Value {
    with_uri(
        app,
        json!({
            "token": token,
            "how": how,
            "statements": ["CREATE TABLE IF NOT EXISTS demo_sandbox.bound \
                            (service_client_id BIGINT, name VARCHAR, x DOUBLE, day DATE)"],
            "sql": "INSERT INTO demo_sandbox.bound (service_client_id, name, x, day) VALUES (?, ?, ?, ?)",
            "rows": rows,
        }),
    )
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn rows_bound_to_an_insert_are_one_insert_of_them_all() {
    let python = test_python();
    let app = flight_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let rows = json!([
        [1, "it's", { "float": "nan" }, { "date": "2026-01-10" }],
        [2, "a''b", { "float": "-inf" }, null],
        [3, null, 2.5, { "date": "2026-01-11" }],
    ]);
    let answer = flight_client(&python, "adbc_many", &many(&app, &admin, "execute", rows)).await;
    assert_eq!(answer["rows"], json!([[3]]), "{answer}");
    let written = app.rows_of(ORG_HOST, &admin, BOUND_ROWS).await;
    let cell = |s: Option<&str>| s.map(str::to_string);
    assert_eq!(
        written,
        vec![
            vec![
                cell(Some("1")),
                cell(Some("it's")),
                cell(Some("NaN")),
                cell(Some("2026-01-10"))
            ],
            vec![
                cell(Some("2")),
                cell(Some("a''b")),
                cell(Some("-inf")),
                None
            ],
            vec![
                cell(Some("3")),
                None,
                cell(Some("2.5")),
                cell(Some("2026-01-11"))
            ],
        ]
    );

    // All or none: one row of a client the analyst may not write refuses
    // them all, with the spec's text.
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let rows = json!([[1, "mine", 1.0, null], [2, "not mine", 1.0, null]]);
    let answer = flight_client(&python, "adbc_many", &many(&app, &analyst, "execute", rows)).await;
    let refused = answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(refused.contains(DATA_DENIED), "{answer}");
    assert_eq!(app.rows_of(ORG_HOST, &admin, BOUND_ROWS).await.len(), 3);

    // Several rows bound to a read: refused, saying what to do.
    let answer = flight_client(
        &python,
        "raw_bind",
        &with_uri(
            &app,
            json!({ "token": admin, "sql": "SELECT ?", "types": ["int64"],
                    "batches": [[[1], [2]]] }),
        ),
    )
    .await;
    let refused = answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(
        refused.contains("only to an INSERT ... VALUES (...) with one row of placeholders"),
        "{answer}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn executemany_inserts_all_rows_into_a_sandbox_table() {
    let python = test_python();
    let app = flight_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let rows = json!([[1, "it's", 0.5, null], [2, "''", { "float": "inf" }, null]]);
    let answer = flight_client(
        &python,
        "adbc_many",
        &many(&app, &admin, "executemany", rows),
    )
    .await;
    assert_eq!(answer["rowcount"], 2, "{answer}");
    let written = app.rows_of(ORG_HOST, &admin, BOUND_ROWS).await;
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(written[1][1].as_deref(), Some("''"));
    assert_eq!(written[1][2].as_deref(), Some("inf"));
}
