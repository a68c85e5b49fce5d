//! Catalog queries on the Postgres listener: psql's `\dt`, `\dn` and `\d`,
//! SQLAlchemy's connect and inspector queries, and `pg_catalog` and
//! `information_schema` queries sent by hand. Each lists only what the
//! caller may read; none reads the lake; limits hold.

use lakehost_tests::*;
use serde_json::{Value, json};

use super::{admin, pg_app, psql};

/// The four databases of the embedded default's org.
pub(super) const DEMO_DATABASES: [&str; 4] = [
    "demo_data_input",
    "demo_insights",
    "demo_lake_v2",
    "demo_sandbox",
];

/// SQLAlchemy on `conn`: `sql` run, then the inspector's schemas, the
/// tables of `demo_lake_v2` and the columns of its `trips`.
async fn sqlalchemy(python: &std::path::Path, conn: Value, sql: &str) -> Value {
    pg_client(
        python,
        "sqlalchemy",
        &json!({ "conn": conn, "sql": sql, "schema": "demo_lake_v2", "table": "trips" }),
    )
    .await
}

/// The lake databases among `schemas` (Postgres' own schemas left out).
fn lake_schemas(schemas: &Value) -> Vec<&str> {
    schemas
        .as_array()
        .unwrap_or_else(|| panic!("no schemas: {schemas}"))
        .iter()
        .filter_map(Value::as_str)
        .filter(|name| !["public", "pg_catalog", "information_schema"].contains(name))
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn sqlalchemy_connects_and_inspects_only_what_the_caller_may_read() {
    let python = test_python();
    let pg = pg_app().await;
    let answer = sqlalchemy(
        &python,
        admin(&pg),
        "SELECT count(*) FROM demo_lake_v2.trips",
    )
    .await;
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(answer["rows"], json!([[6]]), "{answer}");
    assert_eq!(lake_schemas(&answer["schemas"]), DEMO_DATABASES, "{answer}");
    assert_eq!(answer["tables"], json!(["trips"]), "{answer}");
    let columns = &answer["columns"];
    assert_eq!(
        columns[0],
        json!({"name": "trip_id", "type": "BIGINT", "nullable": false})
    );
    assert_eq!(columns[1]["name"], "fare");
    assert_eq!(columns[1]["type"], "DOUBLE PRECISION");
    assert_eq!(columns[2]["name"], "city");

    // A PublicConsumer reads the insights only: the lake's databases are
    // not listed, nor are their tables or columns.
    let public = pg.conn("demo-public", "demo-public-secret", "demo");
    let answer = sqlalchemy(
        &python,
        public,
        "SELECT count(*) FROM demo_insights.summary WHERE service_client_id = 901",
    )
    .await;
    assert_eq!(answer["rows"], json!([[1]]), "{answer}");
    assert_eq!(
        lake_schemas(&answer["schemas"]),
        ["demo_insights"],
        "{answer}"
    );
    assert_eq!(answer["tables"], json!([]), "{answer}");
    // No such table, as SQLAlchemy tells a table that is not there.
    assert_eq!(answer["error"]["step"], "columns", "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn catalog_queries_answer_from_the_visible_catalog_and_never_read_the_lake() {
    let python = test_python();
    let pg = pg_app().await;
    let public = pg.conn("demo-public", "demo-public-secret", "demo");
    // Each call doubles the quotes: the 7th would return 384 MB, past the
    // per-call cap.
    let doubling = format!(
        "SELECT length({}repeat('\"', 3000000){}) FROM pg_catalog.pg_namespace",
        "quote_ident(".repeat(7),
        ")".repeat(7)
    );
    // Deeper than the catalog's nesting cap (the Postgres dialect's parser
    // takes time that doubles with each level).
    let nested = format!(
        "SELECT {}'x'{} FROM pg_catalog.pg_namespace",
        "quote_ident(".repeat(40),
        ")".repeat(40)
    );
    let long_chain = format!(
        "SELECT {} AS n FROM pg_catalog.pg_namespace",
        vec!["1"; 20_000].join("+")
    );
    let results = pg
        .run(
            &python,
            public,
            json!([
                { "sql": "SELECT table_schema, table_name FROM information_schema.tables \
                          WHERE table_schema NOT IN ('pg_catalog', 'information_schema') \
                          ORDER BY 1, 2" },
                { "sql": "SELECT current_database(), current_schema()" },
                { "sql": "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'demo%' \
                          ORDER BY 1" },
                // Catalog tables with a lake table: refused, not answered
                // from placeholders.
                { "sql": "SELECT count(*) FROM pg_catalog.pg_class c \
                          JOIN demo_insights.summary s ON true" },
                { "sql": "SELECT relname FROM pg_class WHERE relname IN \
                          (SELECT 'x' FROM demo_insights.summary)" },
                // Only queries.
                { "sql": "CREATE TABLE pg_catalog.mine AS SELECT 1" },
                { "sql": "DROP TABLE information_schema.tables" },
                // The limits: rows, expression size.
                { "sql": "SELECT a.oid FROM pg_catalog.pg_type a, pg_catalog.pg_type b" },
                { "sql": long_chain },
                // The session goes on.
                { "sql": "SELECT to_regtype('int4') IS NOT NULL AS known, \
                          to_regtype('no_such_type') IS NULL AS unknown" },
                // SELECT INTO would create a table: not a query.
                { "sql": "SELECT oid INTO mine FROM pg_catalog.pg_type" },
                // A function of scalars over many rows: one value a row.
                { "sql": "SELECT count(json_build_object('a', (SELECT 1))) AS n \
                          FROM pg_catalog.pg_namespace" },
                // Output that doubles at each level is stopped at the
                // per-call cap, not built.
                { "sql": doubling },
                { "sql": nested },
                // Scalar subqueries (rewritten as first_value) answer.
                { "sql": "SELECT (SELECT (SELECT count(*) FROM pg_catalog.pg_namespace)) AS n" },
            ]),
        )
        .await;
    // Only the insights, the one database a PublicConsumer reads.
    assert_eq!(
        results[0]["rows"],
        json!([["demo_insights", "summary"]]),
        "{}",
        results[0]
    );
    assert_eq!(
        results[1]["rows"],
        json!([["demo", "public"]]),
        "{}",
        results[1]
    );
    assert_eq!(
        results[2]["rows"],
        json!([["demo_insights"]]),
        "{}",
        results[2]
    );
    for refused in &results[3..5] {
        assert_eq!(refused["sqlstate"], "0A000", "{refused}");
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("cannot read lake tables"),
            "{refused}"
        );
    }
    for refused in &results[5..7] {
        assert_eq!(refused["sqlstate"], "0A000", "{refused}");
        assert!(
            refused["error"].as_str().unwrap().contains("only queries"),
            "{refused}"
        );
    }
    assert_eq!(results[7]["sqlstate"], "54000", "{}", results[7]);
    assert_eq!(results[8]["sqlstate"], "42601", "{}", results[8]);
    assert_eq!(results[9]["rows"], json!([[true, true]]), "{}", results[9]);
    assert_eq!(results[10]["sqlstate"], "0A000", "{}", results[10]);
    assert_eq!(results[11]["sqlstate"], Value::Null, "{}", results[11]);
    assert!(
        results[11]["rows"][0][0].as_i64() > Some(1),
        "{}",
        results[11]
    );
    assert_eq!(results[12]["sqlstate"], "53200", "{}", results[12]);
    assert!(
        results[12]["error"]
            .as_str()
            .unwrap()
            .contains("quote_ident"),
        "{}",
        results[12]
    );
    assert_eq!(results[13]["sqlstate"], "42601", "{}", results[13]);
    assert!(
        results[13]["error"]
            .as_str()
            .unwrap()
            .contains("nests parentheses"),
        "{}",
        results[13]
    );
    assert!(
        results[14]["rows"][0][0].as_i64() > Some(1),
        "{}",
        results[14]
    );

    // A zone's session sees the zone's databases under its own name.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let results = pg
        .run(
            &python,
            analyst,
            json!([
                { "sql": "SELECT current_database()" },
                { "sql": "SELECT table_schema, table_name FROM information_schema.tables \
                          WHERE table_schema = 'lab_lake'" },
            ]),
        )
        .await;
    assert_eq!(results[0]["rows"], json!([["lab.demo"]]), "{}", results[0]);
    assert_eq!(
        results[1]["rows"],
        json!([["lab_lake", "trips"]]),
        "{}",
        results[1]
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_lists_and_describes_only_what_the_caller_may_read() {
    let pg = pg_app().await;
    let admin = ("demo-admin", "demo-admin-secret", "demo");
    let lines = |out: &str| out.lines().map(str::to_string).collect::<Vec<_>>();
    let (ok, out, err) = psql(&pg, admin, &["-At", "-c", "\\dt"]).await;
    assert!(ok, "{err}");
    let tables: Vec<String> = lines(&out)
        .iter()
        .map(|line| {
            line.rsplit_once('|')
                .map_or("", |(table, _owner)| table)
                .to_string()
        })
        .collect();
    assert_eq!(
        tables,
        [
            "demo_data_input|raw|table",
            "demo_insights|summary|table",
            "demo_lake_v2|trips|table",
            "demo_sandbox|scratch|table",
        ],
        "{out}"
    );
    let (ok, out, err) = psql(&pg, admin, &["-At", "-c", "\\dn"]).await;
    assert!(ok, "{err}");
    let schemas: Vec<String> = lines(&out)
        .iter()
        .filter_map(|line| line.split('|').next())
        .filter(|name| name.starts_with("demo_"))
        .map(str::to_string)
        .collect();
    assert_eq!(schemas, DEMO_DATABASES, "{out}");
    // `\d` by schema and name, and by a bare name.
    for name in ["demo_lake_v2.trips", "trips"] {
        let (ok, out, err) = psql(&pg, admin, &["-A", "-c", &format!("\\d {name}")]).await;
        assert!(ok, "{err}");
        let described = lines(&out);
        assert_eq!(described[0], "Table \"demo_lake_v2.trips\"", "{out}");
        assert_eq!(described[1], "Column|Type|Collation|Nullable|Default");
        assert_eq!(described[2], "trip_id|bigint||not null|");
        assert_eq!(described[3], "fare|double precision|||");
        assert_eq!(described[4], "city|text|||");
    }

    // A PublicConsumer reads the insights only: nothing else is listed or
    // described.
    let public = ("demo-public", "demo-public-secret", "demo");
    let (ok, out, err) = psql(&pg, public, &["-At", "-c", "\\dt"]).await;
    assert!(ok, "{err}");
    assert_eq!(lines(&out).len(), 1, "{out}");
    assert!(out.starts_with("demo_insights|summary|table|"), "{out}");
    let (ok, _, err) = psql(&pg, public, &["-c", "\\d demo_lake_v2.trips"]).await;
    assert!(!ok);
    assert!(
        err.contains("Did not find any relation named \"demo_lake_v2.trips\""),
        "{err}"
    );
}
