//! Query permissions over HTTP: each role against each database kind, reads
//! across service clients, and the Zone API's own lake and roles.
//!
//! The expected outcome of every statement is derived here from the spec's
//! capability table ("Roles", "Data scoping in queries"), not copied from the
//! server: refusals are checked at submission (403 with the exact friendly
//! body), allowed statements run to SUCCEEDED and their rows are checked.

use lakehost_tests::*;
use serde_json::{Value, json};

const ZONE_HOST: &str = "lab.demo.api.localhost";

/// No role of this service, then the spec's five roles, lowest first.
const NOBODY: &str = "Nobody";
const PUBLIC: &str = "PublicConsumer";
const OWN_CONSUMER: &str = "OwnServiceClientConsumer";
const OWN_ANALYST: &str = "OwnServiceClientAnalyst";
const ALL_ANALYST: &str = "AllServiceClientAnalyst";
const ADMIN: &str = "ZoneAdmin";
const ROLES: [&str; 6] = [
    NOBODY,
    PUBLIC,
    OWN_CONSUMER,
    OWN_ANALYST,
    ALL_ANALYST,
    ADMIN,
];

type Rows = Vec<Vec<Option<String>>>;
/// The rows of a SUCCEEDED query, or the status and body POST /query refused it with.
type Outcome = Result<Rows, (StatusCode, Value)>;

const START_ERROR: &str =
    "An error occurred (InvalidRequestException) when calling the StartQueryExecution operation: ";

/// Submits `sql`; when accepted, waits for it and requires SUCCEEDED.
async fn outcome(app: &TestApp, host: &str, token: &str, sql: &str) -> Outcome {
    let (status, body) = app.submit(host, token, &json!({ "query": sql })).await;
    if status != StatusCode::ACCEPTED {
        return Err((status, body));
    }
    let id = body["queryId"].as_str().expect("queryId");
    let resource = app.wait_for(host, token, id, None).await;
    assert_eq!(
        resource["status"]["state"], "SUCCEEDED",
        "{sql}: {resource}"
    );
    let (status, page) = app.result_page(host, token, id, None).await;
    assert_eq!(status, StatusCode::OK, "{sql}: {page}");
    Ok(page_rows(&page).into_iter().skip(1).collect())
}

/// The 403 of POST /query with one of the spec's friendly messages.
fn forbidden(message: &str) -> Outcome {
    Err((StatusCode::FORBIDDEN, json!({ "message": message })))
}

fn rows(cells: &[&[&str]]) -> Rows {
    cells
        .iter()
        .map(|row| row.iter().map(|c| Some(c.to_string())).collect())
        .collect()
}

/// One row, one cell: a count (also the `rows` result of CREATE TABLE AS and INSERT).
fn count(n: i64) -> Outcome {
    Ok(vec![vec![Some(n.to_string())]])
}

/// Requires a 400 of the engine at submission; returns the engine's message.
async fn invalid(app: &TestApp, host: &str, token: &str, sql: &str) -> String {
    let (status, body) = app.submit(host, token, &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{sql}: {body}");
    let message = body["message"].as_str().expect("message");
    assert_eq!(body, json!({ "message": message }), "{sql}");
    message
        .strip_prefix(START_ERROR)
        .unwrap_or_else(|| panic!("{sql}: {message}"))
        .to_string()
}

/// What reading a table that does not exist (any more) gives: the engine's 400.
fn missing(table: &str) -> Outcome {
    let (database, name) = table.split_once('.').expect("db.table");
    Err((
        StatusCode::BAD_REQUEST,
        json!({
            "message": format!(
                "{START_ERROR}Error during planning: table 'lakehost.{database}.{name}' not found"
            )
        }),
    ))
}

async fn assert_missing(app: &TestApp, token: &str, table: &str) {
    let sql = format!("SELECT * FROM {table}");
    assert_eq!(
        outcome(app, ORG_HOST, token, &sql).await,
        missing(table),
        "{sql}"
    );
}

fn admin(app: &TestApp) -> String {
    app.token_for(&[ADMIN], "[0]")
}

/// The database families and the spec's rules for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lake,
    Insights,
    DataInput,
    Sandbox,
}

/// Whose rows a caller may read in a database.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    /// The roles cannot read the database at all.
    NoDatabase,
    Only(Vec<i64>),
    All,
}

/// The spec's read capabilities: own = the claim's ids plus 901; a claim with
/// 0 means all service clients for every role but PublicConsumer.
fn read_scope(role: &str, claim: &[i64], kind: Kind) -> Scope {
    let claims_all = claim.contains(&0);
    let mut own: Vec<i64> = claim.iter().copied().filter(|&id| id != 0).collect();
    own.push(901);
    let own = if claims_all {
        Scope::All
    } else {
        Scope::Only(own)
    };
    match (role, kind) {
        (ALL_ANALYST | ADMIN, _) => Scope::All,
        (OWN_ANALYST, _) | (OWN_CONSUMER, Kind::Insights) => own,
        (PUBLIC, Kind::Insights) => Scope::Only(vec![901]),
        _ => Scope::NoDatabase,
    }
}

/// CREATE TABLE (AS) and INSERT.
fn may_write(role: &str, kind: Kind) -> bool {
    match kind {
        Kind::Sandbox => [OWN_ANALYST, ALL_ANALYST, ADMIN].contains(&role),
        _ => [ALL_ANALYST, ADMIN].contains(&role),
    }
}

/// DROP TABLE and ALTER TABLE.
fn may_drop_or_alter(role: &str, kind: Kind) -> bool {
    match kind {
        Kind::Sandbox => may_write(role, kind),
        _ => role == ADMIN,
    }
}

/// `SELECT count(*)` of a table holding `per_client` rows, narrowed to
/// `filter` (the partition filter) when given.
fn expected_count(scope: &Scope, per_client: &[(i64, i64)], filter: Option<&[i64]>) -> Outcome {
    let touched: Vec<(i64, i64)> = per_client
        .iter()
        .copied()
        .filter(|(client, _)| filter.is_none_or(|f| f.contains(client)))
        .collect();
    match scope {
        Scope::NoDatabase => forbidden(EXECUTE_DENIED),
        Scope::Only(ids) if touched.iter().any(|(client, _)| !ids.contains(client)) => {
            forbidden(DATA_DENIED)
        }
        _ => count(touched.iter().map(|(_, n)| n).sum()),
    }
}

/// A seeded table: name, kind, rows per service client.
type Seeded = (&'static str, Kind, &'static [(i64, i64)]);

/// The seeded demo tables.
const TABLES: [Seeded; 4] = [
    (
        "demo_lake_v2.trips",
        Kind::Lake,
        &[(1, 2), (2, 2), (901, 2)],
    ),
    (
        "demo_insights.summary",
        Kind::Insights,
        &[(1, 1), (2, 1), (901, 1)],
    ),
    ("demo_data_input.raw", Kind::DataInput, &[(1, 1), (2, 1)]),
    ("demo_sandbox.scratch", Kind::Sandbox, &[(1, 1), (2, 1)]),
];

fn kind_of(database: &str) -> Kind {
    TABLES
        .iter()
        .find(|(table, ..)| table.starts_with(&format!("{database}.")))
        .map(|(_, kind, _)| *kind)
        .unwrap_or_else(|| panic!("unknown database {database}"))
}

#[tokio::test]
async fn each_role_reads_what_the_capability_table_allows() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let filter: &[i64] = &[1, 901];
    let mut failures = Vec::new();
    for claim in ["[1]", "[0]"] {
        let claim_ids: &[i64] = if claim == "[1]" { &[1] } else { &[0] };
        for role in ROLES {
            let token = app.token_for(&[role], claim);
            for (table, kind, per_client) in TABLES {
                let scope = read_scope(role, claim_ids, kind);
                for (sql, filter) in [
                    (format!("SELECT count(*) FROM {table}"), None),
                    (
                        format!("SELECT count(*) FROM {table} WHERE service_client_id IN (1, 901)"),
                        Some(filter),
                    ),
                ] {
                    let expected = expected_count(&scope, per_client, filter);
                    let actual = outcome(&app, ORG_HOST, &token, &sql).await;
                    if actual != expected {
                        failures.push(format!(
                            "{role} {claim} `{sql}`: expected {expected:?}, got {actual:?}"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Capabilities of several roles add up; a claim may list several clients.
    for (roles, claim, sql, expected) in [
        (
            &[OWN_ANALYST][..],
            "[1 2]",
            "SELECT count(*) FROM demo_lake_v2.trips",
            count(6),
        ),
        (
            &[OWN_ANALYST][..],
            "[2]",
            "SELECT count(*) FROM demo_lake_v2.trips WHERE service_client_id IN (1, 901)",
            forbidden(DATA_DENIED),
        ),
        (
            &[PUBLIC, OWN_CONSUMER][..],
            "[2]",
            "SELECT count(*) FROM demo_insights.summary WHERE service_client_id IN (2, 901)",
            count(2),
        ),
        (
            &[PUBLIC, OWN_CONSUMER][..],
            "[2]",
            "SELECT count(*) FROM demo_lake_v2.trips WHERE service_client_id = 901",
            forbidden(EXECUTE_DENIED),
        ),
        (
            &[PUBLIC, ALL_ANALYST][..],
            "[2]",
            "SELECT count(*) FROM demo_data_input.raw",
            count(2),
        ),
        (
            &[NOBODY, OWN_ANALYST][..],
            "[1]",
            "SELECT count(*) FROM demo_sandbox.scratch WHERE service_client_id = 1",
            count(1),
        ),
    ] {
        let token = app.token_for(roles, claim);
        assert_eq!(
            outcome(&app, ORG_HOST, &token, sql).await,
            expected,
            "{roles:?} {claim} `{sql}`"
        );
    }

    // No recognised role: a query without a table still runs.
    let nobody = app.token_for(&[NOBODY], "[1]");
    assert_eq!(outcome(&app, ORG_HOST, &nobody, "SELECT 1").await, count(1));
}

#[tokio::test]
async fn own_client_analyst_cannot_read_other_clients_rows_by_any_route() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = app.token_for(&[OWN_ANALYST], "[1]");
    let trips = "demo_lake_v2.trips";
    let mine = "service_client_id IN (1, 901)";
    for sql in [
        format!("SELECT * FROM {trips}"),
        format!("SELECT count(*) FROM {trips} WHERE service_client_id = 1 OR fare > 0"),
        format!(
            "SELECT count(*) FROM {trips} a JOIN {trips} b ON a.trip_id = b.trip_id \
             WHERE a.service_client_id = 1"
        ),
        format!("SELECT trip_id FROM {trips} WHERE {mine} UNION ALL SELECT trip_id FROM {trips}"),
        format!("WITH t AS (SELECT * FROM {trips}) SELECT count(*) FROM t"),
        format!("SELECT count(*) FROM {trips}"),
        format!("EXPLAIN SELECT * FROM {trips}"),
    ] {
        assert_eq!(
            outcome(&app, ORG_HOST, &token, &sql).await,
            forbidden(DATA_DENIED),
            "{sql}"
        );
    }

    // The same reads with the caller's filter on every table reference.
    let own_trips = rows(&[&["100"], &["101"], &["90100"], &["90101"]]);
    for (sql, expected) in [
        (
            format!("SELECT trip_id FROM {trips} WHERE {mine} ORDER BY trip_id"),
            Ok(own_trips),
        ),
        (
            format!(
                "SELECT trip_id FROM {trips} WHERE {mine} AND (service_client_id = 1 OR fare > 0) \
                 ORDER BY trip_id"
            ),
            Ok(rows(&[&["100"], &["101"], &["90101"]])),
        ),
        (
            format!(
                "SELECT count(*) FROM {trips} a JOIN {trips} b ON a.trip_id = b.trip_id \
                 WHERE a.{mine} AND b.{mine}"
            ),
            count(4),
        ),
        (
            format!(
                "SELECT count(*) FROM (SELECT trip_id FROM {trips} WHERE {mine} \
                 UNION ALL SELECT trip_id FROM {trips} WHERE {mine})"
            ),
            count(8),
        ),
        (
            format!("WITH t AS (SELECT * FROM {trips} WHERE {mine}) SELECT count(*) FROM t"),
            count(4),
        ),
        (
            format!("SELECT count(*) FROM {trips} WHERE {mine}"),
            count(4),
        ),
    ] {
        assert_eq!(
            outcome(&app, ORG_HOST, &token, &sql).await,
            expected,
            "{sql}"
        );
    }
    let explained = outcome(
        &app,
        ORG_HOST,
        &token,
        &format!("EXPLAIN SELECT * FROM {trips} WHERE {mine}"),
    )
    .await
    .expect("EXPLAIN of a permitted read");
    assert!(!explained.is_empty());
}

#[tokio::test]
async fn create_table_as_follows_the_role_and_the_database() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let mut failures = Vec::new();
    for (n, role) in ROLES.into_iter().enumerate() {
        let token = app.token_for(&[role], "[1]");
        // The SELECT must be readable by the role, or the read is what is refused.
        let reads_sandbox = read_scope(role, &[1], Kind::Sandbox) != Scope::NoDatabase;
        let (source, readback, written) = if reads_sandbox {
            (
                "SELECT trip_id, fare, service_client_id FROM demo_sandbox.scratch \
                 WHERE service_client_id = 1",
                "trip_id, service_client_id",
                rows(&[&["100", "1"]]),
            )
        } else {
            (
                "SELECT 1 AS x, 901 AS service_client_id",
                "x, service_client_id",
                rows(&[&["1", "901"]]),
            )
        };
        for database in ["demo_sandbox", "demo_lake_v2", "demo_insights"] {
            let table = format!("{database}.t_{n}");
            let sql = format!("CREATE TABLE {table} AS {source}");
            let allowed = may_write(role, kind_of(database));
            let expected = if allowed {
                count(1)
            } else {
                forbidden(CREATE_DENIED)
            };
            let actual = outcome(&app, ORG_HOST, &token, &sql).await;
            if actual != expected {
                failures.push(format!(
                    "{role} `{sql}`: expected {expected:?}, got {actual:?}"
                ));
                continue;
            }
            if allowed {
                let back = outcome(
                    &app,
                    ORG_HOST,
                    &token,
                    &format!("SELECT {readback} FROM {table}"),
                )
                .await;
                if back != Ok(written.clone()) {
                    failures.push(format!("{role}: {table} reads back as {back:?}"));
                }
            } else {
                assert_missing(&app, &admin(&app), &table).await;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The result page of CREATE TABLE AS: one column `rows`.
    let token = admin(&app);
    let id = app
        .submit_sql(
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.counted AS \
             SELECT trip_id, service_client_id FROM demo_lake_v2.trips",
        )
        .await;
    let done = app.wait_for(ORG_HOST, &token, &id, None).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let (status, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page_rows(&page), rows(&[&["rows"], &["6"]]));
}

#[tokio::test]
async fn created_tables_need_a_service_client_column_and_a_plain_name() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    for sql in [
        "CREATE TABLE demo_sandbox.no_owner AS SELECT 1 AS x",
        "CREATE TABLE demo_sandbox.text_owner AS SELECT 1 AS x, 'a' AS service_client_id",
        "CREATE TABLE demo_sandbox.no_owner (x BIGINT)",
        "CREATE TABLE demo_sandbox.\"Bad-Name\" AS SELECT 1 AS x, 1 AS service_client_id",
    ] {
        invalid(&app, ORG_HOST, &token, sql).await;
    }
    assert_missing(&app, &token, "demo_sandbox.no_owner").await;
    assert_missing(&app, &token, "demo_sandbox.text_owner").await;

    // One length cap for table names, as loads have: 128 characters pass,
    // 129 are refused with the rule in the message, and nothing is created.
    let longest = "t".repeat(128);
    let sql =
        format!("CREATE TABLE demo_sandbox.{longest} AS SELECT 1 AS x, 1 AS service_client_id");
    assert_eq!(outcome(&app, ORG_HOST, &token, &sql).await, count(1));
    let too_long = "t".repeat(129);
    let sql =
        format!("CREATE TABLE demo_sandbox.{too_long} AS SELECT 1 AS x, 1 AS service_client_id");
    assert_eq!(
        invalid(&app, ORG_HOST, &token, &sql).await,
        format!(
            "table name '{too_long}' is not allowed: use lowercase letters, digits and \
             underscores (at most 128), not starting or ending with an underscore"
        )
    );
    assert_missing(&app, &token, &format!("demo_sandbox.{too_long}")).await;
}

#[tokio::test]
async fn creating_an_existing_table_conflicts_or_is_refused() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let ctas = "CREATE TABLE demo_sandbox.scratch AS SELECT 1 AS x, 1 AS service_client_id";
    let (status, body) = app
        .submit(ORG_HOST, &token, &json!({ "query": ctas }))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["message"].as_str().expect("message");
    assert_eq!(body, json!({ "message": message }));
    assert!(
        message.contains("demo_sandbox.scratch") && message.contains("already holds data"),
        "{message}"
    );

    // An existing table without files: 409 naming the table too.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.empty (x BIGINT, service_client_id BIGINT)"
        )
        .await,
        Ok(vec![])
    );
    let (status, body) = app
        .submit(
            ORG_HOST,
            &token,
            &json!({ "query": "CREATE TABLE demo_sandbox.empty AS SELECT 1 AS x, 1 AS service_client_id" }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("demo_sandbox.empty")),
        "{body}"
    );

    // Plain CREATE TABLE of an existing table: 400; IF NOT EXISTS: nothing to do.
    let message = invalid(
        &app,
        ORG_HOST,
        &token,
        "CREATE TABLE demo_sandbox.scratch (x BIGINT, service_client_id BIGINT)",
    )
    .await;
    assert!(message.contains("demo_sandbox.scratch"), "{message}");
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &token,
            "CREATE TABLE IF NOT EXISTS demo_sandbox.scratch (x BIGINT, service_client_id BIGINT)"
        )
        .await,
        Ok(vec![])
    );
    // The table is untouched.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &token,
            "SELECT trip_id, service_client_id FROM demo_sandbox.scratch ORDER BY trip_id"
        )
        .await,
        Ok(rows(&[&["100", "1"], &["200", "2"]]))
    );
}

#[tokio::test]
async fn insert_follows_the_role_and_the_database() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let admin = admin(&app);
    let databases = ["demo_sandbox", "demo_lake_v2"];
    for database in databases {
        let sql = format!("CREATE TABLE {database}.ins (trip_id BIGINT, service_client_id BIGINT)");
        assert_eq!(outcome(&app, ORG_HOST, &admin, &sql).await, Ok(vec![]));
    }
    let mut failures = Vec::new();
    let mut inserted: Vec<(&str, i64)> = Vec::new();
    for (n, role) in ROLES.into_iter().enumerate() {
        let token = app.token_for(&[role], "[1]");
        for database in databases {
            let id = 1000 + n as i64;
            let sql = format!("INSERT INTO {database}.ins VALUES ({id}, 1)");
            let allowed = may_write(role, kind_of(database));
            let expected = if allowed {
                count(1)
            } else {
                forbidden(STATEMENT_DENIED)
            };
            let actual = outcome(&app, ORG_HOST, &token, &sql).await;
            if actual != expected {
                failures.push(format!(
                    "{role} `{sql}`: expected {expected:?}, got {actual:?}"
                ));
            }
            if allowed {
                inserted.push((database, id));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for database in databases {
        let expected: Rows = inserted
            .iter()
            .filter(|(db, _)| *db == database)
            .map(|(_, id)| vec![Some(id.to_string()), Some("1".into())])
            .collect();
        assert!(!expected.is_empty());
        let sql = format!("SELECT trip_id, service_client_id FROM {database}.ins ORDER BY trip_id");
        assert_eq!(
            outcome(&app, ORG_HOST, &admin, &sql).await,
            Ok(expected),
            "{sql}"
        );
    }

    // INSERT ... SELECT, into a table made by SQL and into a loaded one.
    let analyst = app.token_for(&[OWN_ANALYST], "[1]");
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "INSERT INTO demo_sandbox.ins SELECT trip_id, service_client_id \
             FROM demo_sandbox.scratch WHERE service_client_id = 1"
        )
        .await,
        count(1)
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "INSERT INTO demo_sandbox.scratch (trip_id, fare, city, service_client_id) \
             SELECT trip_id + 50, fare, city, service_client_id FROM demo_sandbox.scratch \
             WHERE service_client_id = 1"
        )
        .await,
        count(1)
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "SELECT trip_id FROM demo_sandbox.scratch WHERE service_client_id IN (1, 901) \
             ORDER BY trip_id"
        )
        .await,
        Ok(rows(&[&["100"], &["150"]]))
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "SELECT count(*) FROM demo_sandbox.ins WHERE service_client_id = 1 AND trip_id = 100"
        )
        .await,
        count(1)
    );
}

#[tokio::test]
async fn drop_and_alter_follow_the_role_and_the_database() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let admin = admin(&app);
    let databases = ["demo_sandbox", "demo_lake_v2"];
    for n in 0..ROLES.len() {
        for database in databases {
            let sql = format!(
                "CREATE TABLE {database}.m_{n} AS SELECT trip_id, service_client_id \
                 FROM demo_sandbox.scratch WHERE service_client_id = 1"
            );
            assert_eq!(outcome(&app, ORG_HOST, &admin, &sql).await, count(1));
        }
    }
    let mut failures = Vec::new();
    let mut check = |what: &str, actual: &Outcome, expected: &Outcome| {
        if actual != expected {
            failures.push(format!("{what}: expected {expected:?}, got {actual:?}"));
        }
    };
    let read = |columns: &str, table: &str| format!("SELECT {columns} FROM {table}");
    for (n, role) in ROLES.into_iter().enumerate() {
        let token = app.token_for(&[role], "[1]");
        for database in databases {
            let allowed = may_drop_or_alter(role, kind_of(database));
            let expected = if allowed {
                Ok(vec![])
            } else {
                forbidden(STATEMENT_DENIED)
            };
            // Follow-up checks track what did happen, so one wrong answer
            // does not hide the others.
            let mut table = format!("{database}.m_{n}");

            let sql = format!("ALTER TABLE {table} ADD COLUMN note VARCHAR");
            let added = outcome(&app, ORG_HOST, &token, &sql).await;
            check(&format!("{role} `{sql}`"), &added, &expected);
            if added.is_ok() {
                // Rows written before the change read the new column as NULL.
                let sql = read("trip_id, note", &table);
                let actual = outcome(&app, ORG_HOST, &admin, &sql).await;
                check(&sql, &actual, &Ok(vec![vec![Some("100".into()), None]]));
            }

            let sql = format!("ALTER TABLE {table} RENAME TO m_{n}_moved");
            let renamed = outcome(&app, ORG_HOST, &token, &sql).await;
            check(&format!("{role} `{sql}`"), &renamed, &expected);
            if renamed.is_ok() {
                let old = read("trip_id", &table);
                let actual = outcome(&app, ORG_HOST, &admin, &old).await;
                check(&old, &actual, &missing(&table));
                table = format!("{database}.m_{n}_moved");
            }
            let sql = read("trip_id", &table);
            let actual = outcome(&app, ORG_HOST, &admin, &sql).await;
            check(&sql, &actual, &Ok(rows(&[&["100"]])));

            let sql = format!("DROP TABLE {table}");
            let dropped = outcome(&app, ORG_HOST, &token, &sql).await;
            check(&format!("{role} `{sql}`"), &dropped, &expected);
            let sql = read("trip_id", &table);
            let actual = outcome(&app, ORG_HOST, &admin, &sql).await;
            let after = if dropped.is_ok() {
                missing(&table)
            } else {
                Ok(rows(&[&["100"]]))
            };
            check(&sql, &actual, &after);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A missing table: DROP is a 400, DROP IF EXISTS does nothing.
    let message = invalid(&app, ORG_HOST, &admin, "DROP TABLE demo_sandbox.never").await;
    assert!(message.contains("demo_sandbox.never"), "{message}");
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &admin,
            "DROP TABLE IF EXISTS demo_sandbox.never"
        )
        .await,
        Ok(vec![])
    );
}

#[tokio::test]
async fn writing_rows_of_another_client_fails_and_leaves_nothing() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = app.token_for(&[OWN_ANALYST], "[1]");
    let admin = admin(&app);

    // The rows come from no table: the write itself is refused while running.
    let id = app
        .submit_sql(
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.leak AS SELECT 1 AS x, 2 AS service_client_id",
        )
        .await;
    let done = app.wait_for(ORG_HOST, &token, &id, None).await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    assert_eq!(done["status"]["stateChangeReason"], DATA_DENIED, "{done}");
    assert_missing(&app, &admin, "demo_sandbox.leak").await;

    // The rows come from a table the analyst may not read: refused at submission.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.leak AS SELECT * FROM demo_sandbox.scratch"
        )
        .await,
        forbidden(DATA_DENIED)
    );
    assert_missing(&app, &admin, "demo_sandbox.leak").await;

    // The same for INSERT into the analyst's own sandbox table.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.mine AS SELECT 1 AS x, 1 AS service_client_id"
        )
        .await,
        count(1)
    );
    let id = app
        .submit_sql(
            ORG_HOST,
            &token,
            "INSERT INTO demo_sandbox.mine VALUES (2, 2)",
        )
        .await;
    let done = app.wait_for(ORG_HOST, &token, &id, None).await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    assert_eq!(done["status"]["stateChangeReason"], DATA_DENIED, "{done}");
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &admin,
            "SELECT x, service_client_id FROM demo_sandbox.mine"
        )
        .await,
        Ok(rows(&[&["1", "1"]]))
    );
}

#[tokio::test]
async fn statements_that_reach_files_or_settings_are_refused() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let tables = "SELECT table_schema, table_name FROM information_schema.tables \
                  WHERE table_catalog = 'lakehost' AND table_schema <> 'information_schema' ORDER BY table_schema, table_name";
    let before = outcome(&app, ORG_HOST, &token, tables).await;
    assert!(before.as_ref().is_ok_and(|t| t.len() == 4), "{before:?}");
    let copy_target = std::env::temp_dir().join(format!("lakehost-{}.csv", uuid_like()));
    for sql in [
        "CREATE EXTERNAL TABLE demo_sandbox.etc STORED AS CSV LOCATION '/etc/'".to_string(),
        "CREATE EXTERNAL TABLE etc STORED AS CSV LOCATION '/etc/'".to_string(),
        format!("COPY (SELECT 1) TO '{}'", copy_target.display()),
        "SET datafusion.execution.batch_size = 1".to_string(),
        "SELECT * FROM '/etc/passwd'".to_string(),
        "CREATE MATERIALIZED VIEW demo_sandbox.v AS SELECT 1 AS x, 1 AS service_client_id"
            .to_string(),
    ] {
        invalid(&app, ORG_HOST, &token, &sql).await;
    }
    assert!(
        !copy_target.exists(),
        "COPY wrote {}",
        copy_target.display()
    );
    assert_eq!(outcome(&app, ORG_HOST, &token, tables).await, before);
}

#[tokio::test]
async fn the_zone_api_has_its_own_lake_roles_and_queries() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let zone_admin = app.zone_token_for("lab", &[ADMIN], "[1]");
    // lab_lake is the default database: 2 rows each of service clients 1 and 3.
    assert_eq!(
        outcome(&app, ZONE_HOST, &zone_admin, "SELECT count(*) FROM trips").await,
        count(4)
    );
    assert_eq!(
        outcome(
            &app,
            ZONE_HOST,
            &zone_admin,
            "SELECT count(*) FROM lab_lake.trips WHERE service_client_id = 3"
        )
        .await,
        count(2)
    );
    // Roles come from the zone's client: the same rules as on the org.
    let analyst = app.zone_token_for("lab", &[OWN_ANALYST], "[1]");
    assert_eq!(
        outcome(&app, ZONE_HOST, &analyst, "SELECT count(*) FROM trips").await,
        forbidden(DATA_DENIED)
    );
    assert_eq!(
        outcome(
            &app,
            ZONE_HOST,
            &analyst,
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 901)"
        )
        .await,
        count(2)
    );
    let consumer = app.zone_token_for("lab", &[PUBLIC], "[1]");
    assert_eq!(
        outcome(
            &app,
            ZONE_HOST,
            &consumer,
            "SELECT count(*) FROM trips WHERE service_client_id = 901"
        )
        .await,
        forbidden(EXECUTE_DENIED)
    );
    assert_eq!(
        outcome(
            &app,
            ZONE_HOST,
            &analyst,
            "CREATE TABLE lab_lake.t AS SELECT 1 AS x, 1 AS service_client_id"
        )
        .await,
        forbidden(CREATE_DENIED)
    );

    // Each API takes only its own tokens.
    let org_admin = admin(&app);
    let sql = json!({ "query": "SELECT 1" });
    assert_eq!(
        app.submit(ZONE_HOST, &org_admin, &sql).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );
    assert_eq!(
        app.submit(ORG_HOST, &zone_admin, &sql).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );

    // The zone cannot see the org's databases.
    let message = invalid(
        &app,
        ZONE_HOST,
        &zone_admin,
        "SELECT * FROM demo_lake_v2.trips",
    )
    .await;
    assert!(message.contains("not found"), "{message}");

    // A zone query is unknown to the org API (same user).
    let (id, done) = app.run_sql(ZONE_HOST, &zone_admin, "SELECT 1").await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    assert_eq!(
        app.query_status(ORG_HOST, &org_admin, &id).await,
        (
            StatusCode::NOT_FOUND,
            json!({
                "message": format!(
                    "An error occurred (InvalidRequestException) when calling the \
                     GetQueryExecution operation: QueryExecution {id} was not found"
                )
            })
        )
    );
}

#[tokio::test]
async fn writes_are_checked_against_the_database_they_land_in() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let analyst = app.token_for(&[OWN_ANALYST], "[1]");
    let admin = admin(&app);
    let mine = "SELECT 1 AS x, 1 AS service_client_id";

    // An unqualified name lands in the request's database (default: the lake).
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            &format!("CREATE TABLE plain AS {mine}")
        )
        .await,
        forbidden(CREATE_DENIED)
    );
    let (status, body) = app
        .submit(
            ORG_HOST,
            &analyst,
            &json!({ "query": format!("CREATE TABLE plain AS {mine}"), "database": "demo_sandbox" }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["queryId"].as_str().unwrap();
    let done = app.wait_for(ORG_HOST, &analyst, id, None).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &admin,
            "SELECT x, service_client_id FROM demo_sandbox.plain"
        )
        .await,
        Ok(rows(&[&["1", "1"]]))
    );
    assert_missing(&app, &admin, "demo_lake_v2.plain").await;

    // The catalog-qualified name is the same database.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            &format!("CREATE TABLE lakehost.demo_lake_v2.qualified AS {mine}")
        )
        .await,
        forbidden(CREATE_DENIED)
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            &format!("CREATE TABLE lakehost.demo_sandbox.qualified AS {mine}")
        )
        .await,
        count(1)
    );

    // INSERT ... SELECT of rows the analyst may not read: refused at submission.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "INSERT INTO demo_sandbox.plain SELECT trip_id, service_client_id \
             FROM demo_lake_v2.trips WHERE service_client_id = 2"
        )
        .await,
        forbidden(DATA_DENIED)
    );

    // DROP of several tables: one the caller may not drop refuses them all.
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &analyst,
            "DROP TABLE demo_sandbox.plain, demo_lake_v2.trips"
        )
        .await,
        forbidden(STATEMENT_DENIED)
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &admin,
            "SELECT count(*) FROM demo_sandbox.plain"
        )
        .await,
        count(1)
    );
    assert_eq!(
        outcome(
            &app,
            ORG_HOST,
            &admin,
            "SELECT count(*) FROM demo_lake_v2.trips"
        )
        .await,
        count(6)
    );

    // A rename cannot move a table out of the sandbox into the lake.
    invalid(
        &app,
        ORG_HOST,
        &analyst,
        "ALTER TABLE demo_sandbox.plain RENAME TO demo_lake_v2.plain",
    )
    .await;
    assert_missing(&app, &admin, "demo_lake_v2.plain").await;
}

/// DROP and ALTER change the whole table: an own-client analyst may change
/// sandbox tables only when every row is one of their clients'.
#[tokio::test]
async fn a_sandbox_table_with_rows_the_caller_cannot_read_cannot_be_dropped_or_altered() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let admin = admin(&app);
    for (table, clients) in [("theirs", "1, 2"), ("mine", "1")] {
        let sql = format!(
            "CREATE TABLE demo_sandbox.{table} AS SELECT trip_id, service_client_id \
             FROM demo_sandbox.scratch WHERE service_client_id IN ({clients})"
        );
        assert!(outcome(&app, ORG_HOST, &admin, &sql).await.is_ok(), "{sql}");
    }
    let own = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    for sql in [
        "DROP TABLE demo_sandbox.theirs",
        "DROP TABLE IF EXISTS demo_sandbox.theirs",
        "DROP TABLE demo_sandbox.mine, demo_sandbox.theirs",
        "ALTER TABLE demo_sandbox.theirs ADD COLUMN note VARCHAR",
        "ALTER TABLE demo_sandbox.theirs RENAME TO gone",
    ] {
        assert_eq!(
            outcome(&app, ORG_HOST, &own, sql).await,
            forbidden(DATA_DENIED),
            "{sql}"
        );
    }
    // Nothing changed: both tables are there, as they were.
    let read =
        "SELECT count(*) FROM demo_sandbox.theirs UNION ALL SELECT count(*) FROM demo_sandbox.mine";
    let before = outcome(&app, ORG_HOST, &admin, read).await;
    assert!(before.is_ok(), "{before:?}");
    // Their own table they may change and drop.
    for sql in [
        "ALTER TABLE demo_sandbox.mine ADD COLUMN note VARCHAR",
        "DROP TABLE demo_sandbox.mine",
    ] {
        assert_eq!(
            outcome(&app, ORG_HOST, &own, sql).await,
            Ok(vec![]),
            "{sql}"
        );
    }
    // An all-client analyst may drop the other.
    let all = app.token_for(&["AllServiceClientAnalyst"], "[1]");
    assert_eq!(
        outcome(&app, ORG_HOST, &all, "DROP TABLE demo_sandbox.theirs").await,
        Ok(vec![])
    );
}

/// A dropped table's files stay on the object store for the query time limit
/// (a query planned on the old file list reads them to its end), then the
/// sweeper deletes them and forgets them.
#[tokio::test]
async fn a_dropped_tables_files_are_deleted_after_the_query_time_limit() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let paths = app.table_file_paths("demo_lake_v2", "trips").await;
    assert!(!paths.is_empty());
    let untouched = app.table_file_paths("demo_insights", "summary").await;

    let admin = admin(&app);
    assert_eq!(
        outcome(&app, ORG_HOST, &admin, "DROP TABLE demo_lake_v2.trips").await,
        Ok(vec![])
    );
    let limit = lakehost::Config::default().query.time_limit_s as i64;
    app.clock.advance(chrono::Duration::seconds(limit - 1));
    assert_eq!(app.retired_files.sweep().await.unwrap(), 0);
    for path in &paths {
        assert!(app.lake_has(path).await, "{path} kept within the limit");
    }

    app.clock.advance(chrono::Duration::seconds(2));
    assert_eq!(app.retired_files.sweep().await.unwrap(), paths.len());
    for path in &paths {
        assert!(!app.lake_has(path).await, "{path} deleted after the limit");
    }
    assert_eq!(app.retired_files.sweep().await.unwrap(), 0, "forgotten");
    // The other tables' files are untouched.
    for path in &untouched {
        assert!(app.lake_has(path).await, "{path}");
    }
}

/// What a killed process left half-written (`<file>#<n>`, which listings
/// hide) is deleted once nothing can still be writing it; finished files and
/// fresh temporary ones stay.
#[tokio::test]
async fn interrupted_writes_are_swept_from_a_local_lake() {
    use lakehost::retired::INTERRUPTED_WRITE_AGE;
    use std::time::{Duration, SystemTime};
    let app = spawn_app().await;
    let dir = app
        .data_dir
        .join("lake/demo_lake_v2/trips/service_client_id=1/svc$load_id=l1");
    std::fs::create_dir_all(&dir).unwrap();
    let long_ago = SystemTime::now() - INTERRUPTED_WRITE_AGE - Duration::from_secs(3600);
    let file = |name: &str, modified: SystemTime| {
        let path = dir.join(name);
        std::fs::write(&path, b"partial").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        path
    };
    let abandoned = file("l1-0.parquet#1", long_ago);
    let in_progress = file("l1-1.parquet#2", SystemTime::now());
    let finished = file("l1-2.parquet", long_ago);
    let swept = app
        .retired_files
        .sweep_interrupted_writes(SystemTime::now() - INTERRUPTED_WRITE_AGE)
        .await
        .unwrap();
    assert_eq!(swept, 1);
    assert!(!abandoned.exists());
    assert!(in_progress.exists() && finished.exists());
}

#[tokio::test]
async fn catalog_listings_show_only_the_databases_a_caller_may_read() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let tables = "SELECT table_schema || '.' || table_name FROM information_schema.tables \
                  WHERE table_catalog = 'lakehost' AND table_schema <> 'information_schema' \
                  ORDER BY 1";
    let columns = "SELECT DISTINCT table_schema || '.' || table_name FROM information_schema.columns \
                   WHERE table_catalog = 'lakehost' AND table_schema <> 'information_schema' \
                   ORDER BY 1";
    let mut failures = Vec::new();
    for role in ROLES.into_iter().filter(|role| *role != NOBODY) {
        let token = app.token_for(&[role], "[1]");
        let mut readable: Vec<&str> = TABLES
            .iter()
            .filter(|(_, kind, _)| !matches!(read_scope(role, &[1], *kind), Scope::NoDatabase))
            .map(|(table, ..)| *table)
            .collect();
        readable.sort_unstable();
        let expected = Ok(readable
            .iter()
            .map(|table| vec![Some(table.to_string())])
            .collect::<Rows>());
        for sql in [tables, columns] {
            let listed = outcome(&app, ORG_HOST, &token, sql).await;
            if listed != expected {
                failures.push(format!(
                    "{role}: `{sql}`: expected {expected:?}, got {listed:?}"
                ));
            }
        }
        // A table left out of the listing still answers with the spec's
        // refusal, not "table not found".
        for (table, kind, per_client) in TABLES {
            let scope = read_scope(role, &[1], kind);
            if matches!(scope, Scope::NoDatabase) {
                let sql = format!("SELECT count(*) FROM {table}");
                let actual = outcome(&app, ORG_HOST, &token, &sql).await;
                let expected = expected_count(&scope, per_client, None);
                if actual != expected {
                    failures.push(format!(
                        "{role}: `{sql}`: expected {expected:?}, got {actual:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The public consumer of this seed lists something, so the test is not
    // passing on empty listings alone.
    assert!(
        TABLES
            .iter()
            .any(|(_, kind, _)| !matches!(read_scope(PUBLIC, &[1], *kind), Scope::NoDatabase))
    );
}
