//! dbt-postgres against the pg listener (issue 48): a project with a table
//! model, a view model, `ref()`, tests and `docs generate`.
//!
//! The stock `dbt` of `LAKEHOST_TEST_DBT_PYTHON`'s venv (dbt-core and
//! dbt-postgres 1.11, tests/python/requirements-dbt.txt) runs the project
//! of `tests/dbt/` as demo-admin on org demo's database (`demo`, TLS
//! verified): its three-part names (`"demo"."demo_sandbox"."..."`), its
//! view, its renames and `drop ... cascade`. Then REST reads what it built:
//! the admin every row in the models' column order, an own-client analyst
//! their own rows, refused loudly (403) for the others', view included.
//! The column order the models rely on is also checked over plain REST,
//! without dbt.

use std::path::{Path, PathBuf};

use lakehost_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// How long one dbt command may take.
const DBT_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The venv's `dbt`, beside its interpreter.
fn dbt_executable() -> PathBuf {
    let python = PathBuf::from(needed_variable("LAKEHOST_TEST_DBT_PYTHON", ".ci/python"));
    python.with_file_name("dbt")
}

/// `tests/dbt/` copied into `to` (dbt writes its target and logs into the
/// project; the checkout stays clean).
fn copy_project(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_project(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A dbt project ready to run against `app`'s Postgres listener.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new(app: &TestApp, cert: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("dbt");
        copy_project(&source, &dir.path().join("project"));
        let port = app.pg_addr.expect("postgres listener").port();
        let profiles = format!(
            "lakehost:\n  target: demo\n  outputs:\n    demo:\n      type: postgres\n      \
             host: localhost\n      port: {port}\n      user: demo-admin\n      \
             password: demo-admin-secret\n      dbname: demo\n      schema: demo_sandbox\n      \
             threads: 1\n      connect_timeout: 10\n      sslmode: verify-full\n      \
             sslrootcert: {}\n",
            cert.display()
        );
        std::fs::write(dir.path().join("profiles.yml"), profiles).unwrap();
        Project { dir }
    }

    fn project_dir(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// Runs `dbt <command>`; panics with dbt's output unless it succeeds.
    async fn dbt(&self, command: &str) {
        let mut run = tokio::process::Command::new(dbt_executable());
        run.args(command.split_whitespace())
            .arg("--project-dir")
            .arg(self.project_dir())
            .arg("--profiles-dir")
            .arg(self.dir.path())
            .env("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
            .env("DBT_VERSION_CHECK", "false")
            .env("DBT_USE_COLORS", "false")
            .env("DBT_LOG_PATH", self.dir.path().join("logs"))
            .kill_on_drop(true);
        let output = tokio::time::timeout(DBT_TIME_LIMIT, run.output())
            .await
            .unwrap_or_else(|_| panic!("dbt {command} did not end in {DBT_TIME_LIMIT:?}"))
            .unwrap_or_else(|e| panic!("dbt {command} did not start: {e}"));
        assert!(
            output.status.success(),
            "dbt {command}: {}\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A JSON artifact dbt wrote into the project's target folder.
    fn artifact(&self, name: &str) -> Value {
        let path = self.project_dir().join("target").join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap()
    }

    /// The status of each node of the last run_results.json, by node id.
    fn statuses(&self) -> Vec<(String, String)> {
        let results = self.artifact("run_results.json");
        let mut statuses: Vec<(String, String)> = results["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                let id = r["unique_id"].as_str().unwrap().to_string();
                (id, r["status"].as_str().unwrap().to_string())
            })
            .collect();
        statuses.sort();
        statuses
    }
}

/// A REST read's header and rows (NULL as `None`).
async fn read(app: &TestApp, token: &str, sql: &str) -> (Vec<String>, Vec<Vec<Option<String>>>) {
    let (id, resource) = app.run_sql(ORG_HOST, token, sql).await;
    assert_eq!(
        resource["status"]["state"], "SUCCEEDED",
        "{sql}: {resource}"
    );
    let (status, page) = app.result_page(ORG_HOST, token, &id, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let mut rows = page_rows(&page).into_iter();
    let header = rows
        .next()
        .expect("a header row")
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    (header, rows.collect())
}

fn cells(rows: &[&[&str]]) -> Vec<Vec<Option<String>>> {
    rows.iter()
        .map(|row| row.iter().map(|c| Some(c.to_string())).collect())
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_dbt),
    ignore = "needs dbt-postgres: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn dbt_builds_tables_and_views_that_rest_reads_under_the_row_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = localhost_certificate(dir.path());
    let app = spawn_app_with(|config| {
        config.server.pg_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.tls_cert = Some(cert.clone());
        config.server.tls_key = Some(key.clone());
    })
    .await;
    seed_demo_lake(&app).await;
    // The models' source: rows of service clients 1 and 3 (the analyst
    // below has 1 and 2).
    app.import(None, "demo_lake_v2", "rides", &[trips_batch(&[1, 3], 2)])
        .await;
    let project = Project::new(&app, &cert);

    project.dbt("debug").await;
    project.dbt("run").await;
    let models = ["city_counts", "trips_by_client", "trips_view"];
    let built: Vec<(String, String)> = models
        .iter()
        .map(|m| (format!("model.lakehost_dbt.{m}"), "success".to_string()))
        .collect();
    assert_eq!(project.statuses(), built);

    project.dbt("test").await;
    let tests = project.statuses();
    assert_eq!(tests.len(), 7, "{tests:?}");
    assert!(
        tests.iter().all(|(_, status)| status == "pass"),
        "{tests:?}"
    );

    project.dbt("docs generate").await;
    let catalog = project.artifact("catalog.json");
    let node = |model: &str| catalog["nodes"][format!("model.lakehost_dbt.{model}")].clone();
    let columns = |model: &str| {
        let columns = node(model)["columns"].clone();
        let mut named: Vec<(i64, String)> = columns
            .as_object()
            .unwrap_or_else(|| panic!("{model}: {catalog}"))
            .values()
            .map(|c| {
                (
                    c["index"].as_i64().unwrap(),
                    c["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        named.sort();
        named.into_iter().map(|(_, name)| name).collect::<Vec<_>>()
    };
    // Tables made by SQL keep their statement's column order, though
    // service_client_id is stored in the folders rather than the files.
    assert_eq!(
        columns("trips_by_client"),
        ["trip_id", "service_client_id", "city", "fare"]
    );
    assert_eq!(
        columns("city_counts"),
        ["city", "service_client_id", "trips"]
    );
    assert_eq!(
        columns("trips_view"),
        ["trip_id", "city", "service_client_id"]
    );
    assert_eq!(node("trips_view")["metadata"]["type"], "VIEW", "{catalog}");

    // The admin reads every row, in each model's column order.
    let admin = app.client_token("demo", "demo-admin").await;
    let (header, rows) = read(
        &app,
        &admin,
        "SELECT * FROM demo_sandbox.trips_by_client ORDER BY trip_id",
    )
    .await;
    assert_eq!(header, ["trip_id", "service_client_id", "city", "fare"]);
    let fares: Vec<f64> = rows
        .iter()
        .map(|row| row[3].as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(fares, [0.0, 1.5, 0.0, 1.5]);
    let others: Vec<Vec<Option<String>>> = rows.iter().map(|row| row[..3].to_vec()).collect();
    assert_eq!(
        others,
        cells(&[
            &["100", "1", "city-0"],
            &["101", "1", "city-1"],
            &["300", "3", "city-0"],
            &["301", "3", "city-1"],
        ])
    );
    let view = "SELECT * FROM demo_sandbox.trips_view ORDER BY trip_id";
    let (header, rows) = read(&app, &admin, view).await;
    assert_eq!(header, ["trip_id", "city", "service_client_id"]);
    assert_eq!(
        rows,
        cells(&[
            &["100", "city-0", "1"],
            &["101", "city-1", "1"],
            &["300", "city-0", "3"],
            &["301", "city-1", "3"],
        ])
    );
    let (header, rows) = read(
        &app,
        &admin,
        "SELECT * FROM demo_sandbox.city_counts ORDER BY city, service_client_id",
    )
    .await;
    assert_eq!(header, ["city", "service_client_id", "trips"]);
    assert_eq!(
        rows,
        cells(&[
            &["city-0", "1", "1"],
            &["city-0", "3", "1"],
            &["city-1", "1", "1"],
            &["city-1", "3", "1"],
        ])
    );

    // An own-client analyst (service clients 1 and 2) reads their rows of
    // the table and of the view, and is refused loudly for client 3's.
    let analyst = app.client_token("demo", "demo-own-analyst").await;
    for sql in [
        "SELECT trip_id FROM demo_sandbox.trips_view WHERE service_client_id = 1 ORDER BY trip_id",
        "SELECT trip_id FROM demo_sandbox.trips_by_client WHERE service_client_id = 1 \
         ORDER BY trip_id",
    ] {
        let (_, rows) = read(&app, &analyst, sql).await;
        assert_eq!(rows, cells(&[&["100"], &["101"]]), "{sql}");
    }
    for sql in [
        "SELECT * FROM demo_sandbox.trips_view",
        "SELECT count(*) FROM demo_sandbox.trips_view WHERE service_client_id = 3",
        "SELECT * FROM demo_sandbox.trips_by_client",
        "SELECT city, sum(trips) FROM demo_sandbox.city_counts GROUP BY city",
    ] {
        let (status, body) = app
            .submit(ORG_HOST, &analyst, &json!({ "query": sql }))
            .await;
        assert_eq!(
            (status, body),
            (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED })),
            "{sql}"
        );
    }
}

/// What the models above rely on, over plain REST and without dbt: tables
/// made by CREATE TABLE AS and CREATE TABLE list their columns in the
/// statement's order (`service_client_id` in the middle though it is stored
/// in the folders) in `SELECT *`, projections and information_schema, keep
/// it through INSERT and RENAME, and keep the row rules.
#[tokio::test]
async fn tables_made_by_sql_keep_their_statements_column_order_over_rest() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    app.import(None, "demo_lake_v2", "rides", &[trips_batch(&[1, 3], 2)])
        .await;
    let admin = app.client_token("demo", "demo-admin").await;
    for sql in [
        "CREATE TABLE demo_sandbox.ordered AS \
         SELECT trip_id, service_client_id, city FROM demo_lake_v2.rides",
        "CREATE TABLE demo_sandbox.declared (trip_id BIGINT, service_client_id BIGINT, city TEXT)",
        "INSERT INTO demo_sandbox.declared \
         SELECT trip_id, service_client_id, city FROM demo_sandbox.ordered WHERE trip_id < 200",
        "INSERT INTO demo_sandbox.declared VALUES (900, 3, 'lima')",
        "ALTER TABLE demo_sandbox.declared RENAME TO renamed",
    ] {
        app.rows_of(ORG_HOST, &admin, sql).await;
    }
    let (header, rows) = read(
        &app,
        &admin,
        "SELECT * FROM demo_sandbox.ordered ORDER BY trip_id",
    )
    .await;
    assert_eq!(header, ["trip_id", "service_client_id", "city"]);
    assert_eq!(
        rows,
        cells(&[
            &["100", "1", "city-0"],
            &["101", "1", "city-1"],
            &["300", "3", "city-0"],
            &["301", "3", "city-1"],
        ])
    );
    let (header, rows) = read(
        &app,
        &admin,
        "SELECT * FROM demo_sandbox.renamed ORDER BY trip_id",
    )
    .await;
    assert_eq!(header, ["trip_id", "service_client_id", "city"]);
    assert_eq!(
        rows,
        cells(&[
            &["100", "1", "city-0"],
            &["101", "1", "city-1"],
            &["900", "3", "lima"],
        ])
    );
    let (header, rows) = read(
        &app,
        &admin,
        "SELECT city, service_client_id FROM demo_sandbox.ordered WHERE trip_id > 200 \
         ORDER BY trip_id",
    )
    .await;
    assert_eq!(header, ["city", "service_client_id"]);
    assert_eq!(rows, cells(&[&["city-0", "3"], &["city-1", "3"]]));
    let columns = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT table_name, column_name FROM information_schema.columns \
             WHERE table_schema = 'demo_sandbox' AND table_name IN ('ordered', 'renamed') \
             ORDER BY table_name, ordinal_position",
        )
        .await;
    let listed = ["ordered", "renamed"]
        .iter()
        .flat_map(|table| ["trip_id", "service_client_id", "city"].map(|column| [*table, column]))
        .collect::<Vec<_>>();
    let listed: Vec<&[&str]> = listed.iter().map(|pair| &pair[..]).collect();
    assert_eq!(columns, cells(&listed));

    // An own-client analyst (clients 1 and 2): their rows in the same
    // order with their filter, refused loudly when a read reaches client 3.
    let analyst = app.client_token("demo", "demo-own-analyst").await;
    let (header, rows) = read(
        &app,
        &analyst,
        "SELECT * FROM demo_sandbox.ordered WHERE service_client_id = 1 ORDER BY trip_id",
    )
    .await;
    assert_eq!(header, ["trip_id", "service_client_id", "city"]);
    assert_eq!(
        rows,
        cells(&[&["100", "1", "city-0"], &["101", "1", "city-1"]])
    );
    for sql in [
        "SELECT * FROM demo_sandbox.ordered",
        "SELECT city, trip_id FROM demo_sandbox.renamed WHERE service_client_id > 2",
    ] {
        let (status, body) = app
            .submit(ORG_HOST, &analyst, &json!({ "query": sql }))
            .await;
        assert_eq!(
            (status, body),
            (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED })),
            "{sql}"
        );
    }
}
