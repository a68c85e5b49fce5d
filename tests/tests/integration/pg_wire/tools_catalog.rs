//! Catalog queries of psql (`\d+`, `\dt+`, `\df`, `\du`, `\l`), SQLAlchemy 1.4 and 2
//! reflection, Superset and pgjdbc metadata (issue 48).
//!
//! Each tool sends its own catalog queries (tests/python/catalog_tools.py,
//! tests/java/JdbcCatalog.java, psql itself): as an admin, as a
//! PublicConsumer who lists only the insights, and as an own-client
//! analyst whose read of rows not theirs is refused with the spec's text
//! under SQLSTATE 42501.

use std::path::Path;

use lakehost_tests::*;
use serde_json::{Value, json};

use super::{PgApp, admin, jdbc::jdbc_jar, pg_app, psql};

const ADMIN: (&str, &str, &str) = ("demo-admin", "demo-admin-secret", "demo");
const PUBLIC: (&str, &str, &str) = ("demo-public", "demo-public-secret", "demo");
/// Zone lab's trips hold service clients 1 and 3; the analyst has 1 and 2.
const ANALYST_IN_LAB: (&str, &str, &str) =
    ("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");

/// A Superset time-range filter (its Postgres engine's `TO_TIMESTAMP` of
/// each bound) over `table`, whose trips started `trip_id` hours after
/// 1970: trips 100, 101, 200 and 201 start within it, 90100 and 90101 do
/// not.
fn time_range(table: &str, and: &str) -> String {
    format!(
        "SELECT count(*) AS count FROM {table} \
         WHERE to_timestamp(trip_id * 3600) >= \
         TO_TIMESTAMP('1970-01-05 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') \
         AND to_timestamp(trip_id * 3600) < \
         TO_TIMESTAMP('1970-01-10 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US'){and}"
    )
}

/// Runs `command` of tests/python/catalog_tools.py with `python`.
async fn catalog_tools(python: &Path, command: &str, args: &Value) -> Value {
    let output = tokio::process::Command::new(python)
        .arg(python_dir().join("catalog_tools.py"))
        .arg(command)
        .arg(args.to_string())
        .output()
        .await
        .expect("python runs");
    assert!(
        output.status.success(),
        "catalog_tools.py {command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "catalog_tools.py {command} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// psql's output of `command` (unaligned, tuples only) for `who`, which
/// must succeed.
async fn psql_ok(pg: &PgApp, who: (&str, &str, &str), command: &str) -> String {
    let (ok, out, err) = psql(pg, who, &["-At", "-c", command]).await;
    assert!(ok, "{command}: {err}");
    assert!(err.is_empty(), "{command}: {err}");
    out
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_describes_lists_and_sizes_only_what_the_caller_may_read() {
    let pg = pg_app().await;
    let (ok, out, err) = psql(&pg, ADMIN, &["-c", "\\d+ demo_lake_v2.trips"]).await;
    assert!(ok && err.is_empty(), "{err}");
    assert!(out.contains("Table \"demo_lake_v2.trips\""), "{out}");
    assert!(
        out.contains("| Storage  | Compression | Stats target |"),
        "{out}"
    );
    let trip_id = out.lines().find(|l| l.trim_start().starts_with("trip_id"));
    let cells: Vec<&str> = trip_id
        .unwrap_or_else(|| panic!("{out}"))
        .split('|')
        .map(str::trim)
        .collect();
    assert_eq!(
        cells[..6],
        ["trip_id", "bigint", "", "not null", "", "plain"]
    );

    // Tables with their size: unknown (the catalog never reads the lake).
    let listed = psql_ok(&pg, ADMIN, "\\dt+").await;
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        [
            "demo_data_input|raw|table|postgres|permanent|||",
            "demo_insights|summary|table|postgres|permanent|||",
            "demo_lake_v2|trips|table|postgres|permanent|||",
            "demo_sandbox|scratch|table|postgres|permanent|||",
        ],
        "{listed}"
    );
    // No functions or roles of the lake's own; one database, the one
    // connected to (no `postgres` that refuses connections).
    assert_eq!(psql_ok(&pg, ADMIN, "\\df").await, "");
    let (ok, out, err) = psql(&pg, ADMIN, &["-c", "\\df"]).await;
    assert!(
        ok && out.contains("List of functions") && out.contains("(0 rows)"),
        "{out}{err}"
    );
    let (ok, out, err) = psql(&pg, ADMIN, &["-c", "\\du"]).await;
    assert!(ok && out.contains("List of roles"), "{out}{err}");
    let databases = psql_ok(&pg, ADMIN, "\\l").await;
    let names: Vec<&str> = databases
        .lines()
        .filter_map(|line| line.split('|').next())
        .collect();
    assert_eq!(names, ["demo"], "{databases}");

    // A PublicConsumer lists and describes the insights only.
    let listed = psql_ok(&pg, PUBLIC, "\\dt+").await;
    assert_eq!(
        listed, "demo_insights|summary|table|postgres|permanent|||\n",
        "{listed}"
    );
    let (ok, _, err) = psql(&pg, PUBLIC, &["-c", "\\d+ demo_lake_v2.trips"]).await;
    assert!(!ok, "{err}");
    assert!(
        err.contains("Did not find any relation named \"demo_lake_v2.trips\""),
        "{err}"
    );

    // The own-client analyst in zone lab: the zone's database and tables;
    // reading the trips of a client not theirs is refused loudly.
    let databases = psql_ok(&pg, ANALYST_IN_LAB, "\\l").await;
    assert!(databases.starts_with("lab.demo|"), "{databases}");
    assert_eq!(databases.lines().count(), 1, "{databases}");
    let listed = psql_ok(&pg, ANALYST_IN_LAB, "\\dt+").await;
    assert_eq!(listed, "lab_lake|trips|table|postgres|permanent|||\n");
    let (ok, out, err) = psql(&pg, ANALYST_IN_LAB, &["-c", "\\d+ lab_lake.trips"]).await;
    assert!(ok && out.contains("service_client_id"), "{out}{err}");
    let (ok, _, err) = psql(
        &pg,
        ANALYST_IN_LAB,
        &["-c", "SELECT count(*) FROM lab_lake.trips"],
    )
    .await;
    assert!(!ok, "{err}");
    assert!(err.contains(&format!("ERROR:  {DATA_DENIED}")), "{err}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn sqlalchemy_2_reflects_tables_and_pandas_reads_them() {
    let python = test_python();
    let pg = pg_app().await;
    let args =
        |conn: Value, schema: &str| json!({ "conn": conn, "schema": schema, "table": "trips" });
    let answer = catalog_tools(&python, "sqlalchemy2", &args(admin(&pg), "demo_lake_v2")).await;
    // A lake table has no keys, indexes or unique constraints: reflected
    // as none, not as an error.
    assert_eq!(
        answer["autoload"],
        json!({
            "columns": ["trip_id", "fare", "city", "service_client_id", "svc$load_id"],
            "primary_key": [],
            "indexes": [],
            "unique_constraints": [],
        }),
        "{answer}"
    );
    let inspector = &answer["inspector"];
    assert_eq!(
        inspector["pk"],
        json!({"constrained_columns": [], "name": null}),
        "{answer}"
    );
    assert_eq!(inspector["foreign_keys"], json!([]), "{answer}");
    assert_eq!(inspector["indexes"], json!([]), "{answer}");
    assert_eq!(inspector["unique_constraints"], json!([]), "{answer}");
    assert_eq!(inspector["tables"], json!(["trips"]), "{answer}");
    assert_eq!(
        answer["read_sql_table"],
        json!({
            "columns": ["trip_id", "fare", "city", "service_client_id", "svc$load_id"],
            "rows": 6,
        }),
        "{answer}"
    );

    // A PublicConsumer: the lake's tables are not there to reflect.
    let public = pg.conn("demo-public", "demo-public-secret", "demo");
    let answer = catalog_tools(&python, "sqlalchemy2", &args(public, "demo_lake_v2")).await;
    assert_eq!(answer["autoload"]["kind"], "NoSuchTableError", "{answer}");
    assert_eq!(answer["inspector"]["tables"], json!([]), "{answer}");

    // The analyst reflects the zone's trips; pandas reading them whole (a
    // client not theirs) is refused with the spec's text.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let answer = catalog_tools(&python, "sqlalchemy2", &args(analyst, "lab_lake")).await;
    assert_eq!(answer["autoload"]["primary_key"], json!([]), "{answer}");
    assert_eq!(answer["read_sql_table"]["error"], DATA_DENIED, "{answer}");
    assert_eq!(answer["read_sql_table"]["sqlstate"], "42501", "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_superset),
    ignore = "needs Superset's drivers: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn superset_reflects_over_psycopg2_and_filters_time_ranges() {
    let python = superset_python();
    let pg = pg_app().await;
    let args = |conn: Value, schema: &str, sql: String| json!({ "conn": conn, "schema": schema, "table": "trips", "sql": sql });
    let answer = catalog_tools(
        &python,
        "superset",
        &args(
            admin(&pg),
            "demo_lake_v2",
            time_range("demo_lake_v2.trips", ""),
        ),
    )
    .await;
    assert_eq!(answer["sqlalchemy"], "1.4.54", "{answer}");
    let inspector = &answer["inspector"];
    assert_eq!(
        inspector["columns"][0],
        json!({"name": "trip_id", "type": "BIGINT", "nullable": false}),
        "{answer}"
    );
    assert_eq!(
        inspector["pk"],
        json!({"constrained_columns": [], "name": null}),
        "{answer}"
    );
    assert_eq!(inspector["foreign_keys"], json!([]), "{answer}");
    assert_eq!(inspector["indexes"], json!([]), "{answer}");
    assert_eq!(inspector["views"], json!([]), "{answer}");
    assert_eq!(answer["rows"], json!([[4]]), "{answer}");

    // A bound that is not a date in its format: a clear error.
    let bad = time_range("demo_lake_v2.trips", "")
        .replace("1970-01-05 00:00:00.000000", "1970-13-45 00:00:00.000000");
    let answer = catalog_tools(&python, "superset", &args(admin(&pg), "demo_lake_v2", bad)).await;
    assert!(
        answer["rows"]["error"].as_str().is_some_and(|m| m.contains(
            "\"1970-13-45 00:00:00.000000\" does not match the format \"YYYY-MM-DD HH24:MI:SS.US\""
        )),
        "{answer}"
    );

    // The analyst's chart over the zone's trips: their client's rows, and
    // the loud refusal without the filter.
    let analyst = || pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let sql = time_range("lab_lake.trips", " AND service_client_id = 1");
    let answer = catalog_tools(&python, "superset", &args(analyst(), "lab_lake", sql)).await;
    assert_eq!(answer["inspector"]["tables"], json!(["trips"]), "{answer}");
    assert_eq!(answer["rows"], json!([[2]]), "{answer}");
    let sql = time_range("lab_lake.trips", "");
    let answer = catalog_tools(&python, "superset", &args(analyst(), "lab_lake", sql)).await;
    assert_eq!(answer["rows"]["error"], DATA_DENIED, "{answer}");
    assert_eq!(answer["rows"]["sqlstate"], "42501", "{answer}");
}

/// What JdbcCatalog.java prints for `who`'s functions and procedures named
/// like `name` in `schema`.
async fn jdbc_catalog(pg: &PgApp, who: (&str, &str, &str), schema: &str, name: &str) -> Value {
    let (user, password, database) = who;
    let url = format!(
        "jdbc:postgresql://localhost:{}/{database}?sslmode=verify-full&sslrootcert={}",
        pg.app.pg_addr.expect("postgres listener").port(),
        pg.cert_path.display()
    );
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/JdbcCatalog.java");
    let output = tokio::process::Command::new("java")
        .arg("-cp")
        .arg(jdbc_jar())
        .arg(client)
        .args([url.as_str(), user, password, schema, name])
        .output()
        .await
        .expect("java runs");
    assert!(
        output.status.success(),
        "JdbcCatalog.java failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "JdbcCatalog.java printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs pgjdbc and a JDK: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn pgjdbc_lists_functions_and_procedures() {
    let pg = pg_app().await;
    // The lake has no functions or procedures of its own.
    for who in [ADMIN, PUBLIC, ANALYST_IN_LAB] {
        let answer = jdbc_catalog(&pg, who, "%", "lakehost%").await;
        for call in [
            "functions",
            "function_columns",
            "procedures",
            "procedure_columns",
        ] {
            assert_eq!(answer[call], json!({"rows": []}), "{call}: {answer}");
        }
    }
    // Postgres' own, listed as DBeaver's navigator asks for them.
    let answer = jdbc_catalog(&pg, ADMIN, "pg_catalog", "abs").await;
    let functions = answer["functions"]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(!functions.is_empty(), "{answer}");
    assert!(
        functions
            .iter()
            .all(|row| *row == json!(["pg_catalog", "abs"])),
        "{answer}"
    );
    assert_eq!(answer["procedures"], json!({"rows": []}), "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_dbt),
    ignore = "needs dbt-postgres: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn dbt_lists_relations_and_reads_the_catalog() {
    let python =
        std::path::PathBuf::from(needed_variable("LAKEHOST_TEST_DBT_PYTHON", ".ci/python"));
    let pg = pg_app().await;
    let answer = catalog_tools(
        &python,
        "dbt",
        &json!({ "conn": admin(&pg), "schema": "demo_lake_v2" }),
    )
    .await;
    assert_eq!(
        answer["relations"]["rows"],
        json!([["demo", "trips", "demo_lake_v2", "table"]]),
        "{answer}"
    );
    let catalog = answer["catalog"]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    let columns: Vec<Value> = catalog
        .iter()
        .map(|row| json!([row[2], row[3], row[5], row[6], row[7]]))
        .collect();
    assert_eq!(
        columns,
        [
            json!(["trips", "BASE TABLE", "trip_id", 1, "bigint"]),
            json!(["trips", "BASE TABLE", "fare", 2, "double precision"]),
            json!(["trips", "BASE TABLE", "city", 3, "text"]),
            json!(["trips", "BASE TABLE", "service_client_id", 4, "bigint"]),
            json!(["trips", "BASE TABLE", "svc$load_id", 5, "text"]),
        ],
        "{answer}"
    );

    // A PublicConsumer: nothing of the lake's databases.
    let public = pg.conn("demo-public", "demo-public-secret", "demo");
    let answer = catalog_tools(
        &python,
        "dbt",
        &json!({ "conn": public, "schema": "demo_lake_v2" }),
    )
    .await;
    assert_eq!(answer["relations"]["rows"], json!([]), "{answer}");
    assert_eq!(answer["catalog"]["rows"], json!([]), "{answer}");

    // The analyst in zone lab: the zone's trips, under the zone's name.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let answer = catalog_tools(
        &python,
        "dbt",
        &json!({ "conn": analyst, "schema": "lab_lake" }),
    )
    .await;
    assert_eq!(
        answer["relations"]["rows"],
        json!([["lab.demo", "trips", "lab_lake", "table"]]),
        "{answer}"
    );
    assert_eq!(
        answer["catalog"]["rows"].as_array().map(Vec::len),
        Some(5),
        "{answer}"
    );
}
