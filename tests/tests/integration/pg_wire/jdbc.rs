//! The PostgreSQL JDBC driver (pgjdbc 42.5, the driver DBeaver and Metabase
//! connect with) on the Postgres listener, through tests/java/JdbcClient.java:
//! connect over TLS with a client id and secret, browse with
//! `DatabaseMetaData` and DBeaver's own catalog queries (only what the caller
//! may read is listed), run plain and prepared statements, and get the
//! spec's refusals under SQLSTATE 42501.

use std::path::{Path, PathBuf};

use lakehost_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{LAB_TRIPS, PgApp, TRIPS, catalog::DEMO_DATABASES, pg_app};

/// The pgjdbc jar (`LAKEHOST_TEST_JDBC_JAR`, which `.ci/jdbc` installs and
/// sets with a JDK), for tests marked
/// `#[cfg_attr(not(lakehost_has_jdbc), ignore = ...)]`: a missing jar or
/// `java` fails them.
pub(super) fn jdbc_jar() -> PathBuf {
    let jar = PathBuf::from(needed_variable("LAKEHOST_TEST_JDBC_JAR", ".ci/jdbc"));
    assert!(
        jar.is_file(),
        "LAKEHOST_TEST_JDBC_JAR names no file: {}",
        jar.display()
    );
    let java = std::process::Command::new("java").arg("-version").output();
    assert!(
        java.is_ok_and(|o| o.status.success()),
        "java does not run (.ci/jdbc installs a JDK)"
    );
    jar
}

/// What JdbcClient.java prints for `args`, connected to `database` as
/// `(client id, secret, database)` with the server's certificate verified.
pub(super) async fn jdbc(
    jar: &Path,
    pg: &PgApp,
    (user, password, database): (&str, &str, &str),
    mut args: Value,
) -> Value {
    args["url"] = json!(format!(
        "jdbc:postgresql://localhost:{}/{database}?sslmode=verify-full&sslrootcert={}",
        pg.app.pg_addr.expect("postgres listener").port(),
        pg.cert_path.display()
    ));
    args["user"] = json!(user);
    args["password"] = json!(password);
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/JdbcClient.java");
    let output = tokio::process::Command::new("java")
        .arg("-cp")
        .arg(jar)
        .arg(client)
        .arg(args.to_string())
        .output()
        .await
        .expect("java runs");
    assert!(
        output.status.success(),
        "JdbcClient.java failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "JdbcClient.java printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

const ADMIN: (&str, &str, &str) = ("demo-admin", "demo-admin-secret", "demo");
const PUBLIC: (&str, &str, &str) = ("demo-public", "demo-public-secret", "demo");

/// The rows of a metadata call, each as the values of `columns`.
fn picked(rows: &Value, columns: &[&str]) -> Vec<Vec<Value>> {
    rows.as_array()
        .unwrap_or_else(|| panic!("no rows: {rows}"))
        .iter()
        .map(|row| columns.iter().map(|column| row[column].clone()).collect())
        .collect()
}

/// The lake's schemas among `getSchemas` rows (pgjdbc 42.5 labels them in
/// lowercase).
fn lake_schemas(rows: &Value) -> Vec<String> {
    picked(rows, &["table_schem"])
        .into_iter()
        .filter_map(|row| row[0].as_str().map(str::to_string))
        .filter(|name| !["public", "pg_catalog", "information_schema"].contains(&name.as_str()))
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn pgjdbc_database_metadata_lists_only_what_the_caller_may_read() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let browse = json!({ "browse": { "schema": "demo_lake_v2", "table": "trips" } });
    let answer = jdbc(&jar, &pg, ADMIN, browse.clone()).await;
    let meta = &answer["metadata"];
    assert_eq!(meta["product"], "PostgreSQL", "{}", meta["product"]);
    assert_eq!(meta["productVersion"], "15.0");
    assert_eq!(meta["majorVersion"], 15);
    assert_eq!(meta["userName"], "demo-admin");
    assert_eq!(meta["identifierQuote"], "\"");
    assert_eq!(meta["catalogs"], json!([{ "TABLE_CAT": "demo" }]));
    assert_eq!(
        lake_schemas(&meta["schemas"]),
        DEMO_DATABASES,
        "{}",
        meta["schemas"]
    );
    assert_eq!(
        picked(&meta["schemasLike"], &["table_schem"]),
        [[json!("demo_lake_v2")]]
    );
    let tables = ["TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE"];
    assert_eq!(
        picked(&meta["tables"], &tables),
        [
            ["demo_data_input", "raw", "TABLE"],
            ["demo_insights", "summary", "TABLE"],
            ["demo_lake_v2", "trips", "TABLE"],
            ["demo_sandbox", "scratch", "TABLE"],
        ]
        .map(|row| row.map(Value::from)),
        "{}",
        meta["tables"]
    );
    assert_eq!(
        picked(&meta["tablesOfSchema"], &tables),
        [["demo_lake_v2", "trips", "TABLE"].map(Value::from)]
    );
    // A table's columns with their JDBC and Postgres types and nullability;
    // no defaults, no generated columns.
    let columns = [
        "COLUMN_NAME",
        "TYPE_NAME",
        "DATA_TYPE",
        "NULLABLE",
        "ORDINAL_POSITION",
        "COLUMN_DEF",
        "IS_AUTOINCREMENT",
    ];
    assert_eq!(
        picked(&meta["columns"], &columns),
        [
            json!(["trip_id", "int8", -5, 0, 1, null, "NO"]),
            json!(["fare", "float8", 8, 1, 2, null, "NO"]),
            json!(["city", "text", 12, 1, 3, null, "NO"]),
            json!(["service_client_id", "int8", -5, 0, 4, null, "NO"]),
            json!(["svc$load_id", "text", 12, 0, 5, null, "NO"]),
        ]
        .map(|row| row.as_array().unwrap().clone()),
        "{}",
        meta["columns"]
    );
    // A lake has no keys and no indexes: each listing answers, empty.
    for listing in ["primaryKeys", "importedKeys", "exportedKeys", "indexInfo"] {
        assert_eq!(meta[listing], json!([]), "{listing}: {}", meta[listing]);
    }
    // The types, as JDBC types (arrays among them).
    let types = picked(&meta["typeInfo"], &["TYPE_NAME", "DATA_TYPE"]);
    assert!(types.len() > 100, "{types:?}");
    for expected in [
        json!(["int8", -5]),
        json!(["float8", 8]),
        json!(["text", 12]),
        json!(["bool", -7]),
        json!(["timestamptz", 93]),
        json!(["_int4", 2003]),
    ] {
        assert!(
            types.contains(expected.as_array().unwrap()),
            "{expected} missing: {types:?}"
        );
    }
    // getFunctions lists Postgres's built-in functions (lake tables have
    // none of their own), without result or argument types.
    let functions = meta["functions"]
        .as_array()
        .unwrap_or_else(|| panic!("no function list: {}", meta["functions"]));
    assert!(!functions.is_empty(), "{meta}");
    for function in functions {
        assert_eq!(function["function_schem"], "pg_catalog", "{function}");
        assert_eq!(function["function_name"], "upper", "{function}");
    }

    // A PublicConsumer reads the insights only: nothing else is listed, and
    // the lake's table has no columns for it.
    let answer = jdbc(&jar, &pg, PUBLIC, browse).await;
    let meta = &answer["metadata"];
    assert_eq!(
        lake_schemas(&meta["schemas"]),
        ["demo_insights"],
        "{}",
        meta["schemas"]
    );
    assert_eq!(meta["schemasLike"], json!([]), "{}", meta["schemasLike"]);
    assert_eq!(
        picked(&meta["tables"], &tables),
        [["demo_insights", "summary", "TABLE"].map(Value::from)],
        "{}",
        meta["tables"]
    );
    for hidden in ["tablesOfSchema", "columns", "primaryKeys", "indexInfo"] {
        assert_eq!(meta[hidden], json!([]), "{hidden}: {}", meta[hidden]);
    }
}

/// `setMaxRows` (DBeaver's previews): pgjdbc asks for that many rows and
/// closes the portal; the job ended as the client wished, SUCCEEDED, both
/// for a plain and for a prepared statement.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn pgjdbc_set_max_rows_reads_a_preview_and_its_job_succeeds() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let answer = jdbc(
        &jar,
        &pg,
        ADMIN,
        json!({ "statements": [
            { "sql": TRIPS, "max_rows": 2 },
            { "sql": "SHOW lakehost.last_query_id" },
            { "sql": "SELECT trip_id FROM demo_lake_v2.trips WHERE trip_id > ? ORDER BY trip_id",
              "params": [0], "max_rows": 3 },
            { "sql": "SHOW lakehost.last_query_id" },
        ] }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(
        results[0]["rows"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    assert_eq!(
        results[2]["rows"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
    let token = pg.app.client_token("demo", "demo-admin").await;
    for shown in [&results[1], &results[3]] {
        let id = shown["rows"][0][0].as_str().expect("a query id");
        let (status, job) = pg.app.query_status(ORG_HOST, &token, id).await;
        assert_eq!(status, StatusCode::OK, "{job}");
        assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");
    }
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn pgjdbc_runs_statements_binds_parameters_and_gets_the_specs_refusals() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let by_client = "SELECT trip_id, city FROM demo_lake_v2.trips \
                     WHERE service_client_id = ? AND city = ? ORDER BY trip_id";
    // As most apps do: autocommit off, commit at the end.
    let answer = jdbc(
        &jar,
        &pg,
        ADMIN,
        json!({
            "autocommit": false,
            "statements": [
                { "sql": TRIPS },
                // pgjdbc prepares it on the server from the 5th run on and
                // reads its rows in binary.
                { "sql": by_client, "params": [1, "city-0"], "repeat": 6 },
                { "sql": "SHOW lakehost.last_query_id" },
                { "sql": "SELECT ? IS NULL AS missing, ? AS big, ? AS flag",
                  "params": [null, 5_000_000_000_i64, true] },
                { "sql": "SELECT current_schema(), current_database()" },
                { "sql": "SHOW search_path" },
                { "sql": "SELEC nonsense" },
            ],
        }),
    )
    .await;
    assert_eq!(answer["autocommit"], false, "{answer}");
    assert_eq!(answer["commit"], "committed", "{answer}");
    let results = &answer["results"];
    let trips = &results[0];
    assert_eq!(
        trips["columns"],
        json!(["trip_id", "fare", "city", "service_client_id"]),
        "{trips}"
    );
    assert_eq!(trips["types"], json!(["int8", "float8", "text", "int8"]));
    // The same rows as REST reads.
    let token = pg.app.client_token("demo", "demo-admin").await;
    let rest = pg.app.rows_of(ORG_HOST, &token, TRIPS).await;
    let rows = trips["rows"].as_array().unwrap();
    assert_eq!(rows.len(), rest.len(), "{trips}");
    for (row, rest_row) in rows.iter().zip(&rest) {
        assert_eq!(row[0].to_string(), rest_row[0].clone().unwrap());
        let fare = rest_row[1].as_deref().map(|s| s.parse::<f64>().unwrap());
        assert_eq!(row[1].as_f64(), fare);
        assert_eq!(row[2].as_str(), rest_row[2].as_deref());
    }
    assert_eq!(results[1]["rows"], json!([[100, "city-0"]]), "{results}");
    // The parameters were inlined: the job shows what ran.
    let id = results[2]["rows"][0][0].as_str().expect("a query id");
    let (status, job) = pg.app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");
    let ran = job["query"].as_str().unwrap();
    assert!(
        ran.contains("service_client_id =  (1)  AND city =  'city-0'"),
        "{ran}"
    );
    assert_eq!(
        results[3]["rows"],
        json!([[true, 5_000_000_000_i64, true]]),
        "{results}"
    );
    assert_eq!(results[4]["rows"], json!([["public", "demo"]]), "{results}");
    assert_eq!(results[5]["rows"], json!([["public"]]), "{results}");
    assert_eq!(results[6]["sqlstate"], "42601", "{results}");

    // Zone lab's trips hold service clients 1 and 3; the analyst has 1 and
    // 2: refused with the spec's text, the session goes on.
    let analyst = ("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let answer = jdbc(
        &jar,
        &pg,
        analyst,
        json!({ "statements": [
            { "sql": LAB_TRIPS },
            { "sql": "SELECT trip_id FROM lab_lake.trips WHERE service_client_id = ? \
                      ORDER BY trip_id", "params": [1] },
        ] }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(results[0]["error"], DATA_DENIED, "{answer}");
    assert_eq!(results[0]["sqlstate"], "42501");
    assert_eq!(results[0]["severity"], "ERROR");
    assert_eq!(results[1]["rows"], json!([[100], [101]]), "{answer}");

    let answer = jdbc(
        &jar,
        &pg,
        PUBLIC,
        json!({ "statements": [{ "sql": TRIPS }] }),
    )
    .await;
    assert_eq!(answer["results"][0]["error"], EXECUTE_DENIED, "{answer}");
    assert_eq!(answer["results"][0]["sqlstate"], "42501");

    // A wrong secret is refused before any statement.
    let answer = jdbc(
        &jar,
        &pg,
        ("demo-admin", "not-the-secret", "demo"),
        json!({ "statements": [{ "sql": "SELECT 1" }] }),
    )
    .await;
    assert_eq!(answer["connect"]["sqlstate"], "28P01", "{answer}");
    assert_eq!(
        answer["connect"]["error"],
        "password authentication failed for user \"demo-admin\""
    );
}

/// DBeaver 25's own catalog queries on connect and when a schema and a
/// table are opened in its navigator (it binds the oids it listed).
const DBEAVER_SCHEMAS: &str = "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n \
    LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 \
    AND d.classoid='pg_namespace'::regclass ORDER BY nspname";
const DBEAVER_TABLES: &str = "SELECT c.oid,c.*,d.description,\
    pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,  \
    pg_catalog.pg_get_partkeydef(c.oid) as partition_key \
    FROM pg_catalog.pg_class c LEFT OUTER JOIN pg_catalog.pg_description d \
    ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass \
    WHERE c.relnamespace=? AND c.relkind not in ('i','I','c')";
const DBEAVER_COLUMNS: &str = "SELECT c.relname,a.*,\
    pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description,dep.objid \
    FROM pg_catalog.pg_attribute a INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid) \
    LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum) \
    LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid) \
    LEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' \
    and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid \
    WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid=? ORDER BY a.attnum";
/// pgjdbc's lookup of a type it does not know (DBeaver asks it for a
/// result's column types).
const PGJDBC_TYPE: &str = "SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, \
    typname, pg_type.oid FROM pg_catalog.pg_type LEFT JOIN (select ns.oid as nspoid, ns.nspname, \
    r.r from pg_namespace as ns join ( select s.r, (current_schemas(false))[s.r] as nspname \
    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r \
    using ( nspname ) ) as sp ON sp.nspoid = typnamespace WHERE pg_type.oid = ? \
    ORDER BY sp.r, pg_type.oid DESC";

/// The values of column `name` in a statement's result.
fn column<'a>(result: &'a Value, name: &str) -> Vec<&'a Value> {
    let at = result["columns"]
        .as_array()
        .and_then(|columns| columns.iter().position(|c| c == name))
        .unwrap_or_else(|| panic!("no column {name}: {result}"));
    result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row[at])
        .collect()
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn dbeavers_catalog_queries_answer_from_the_visible_catalog() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let namespace_of = "SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = ?";
    let table_of = "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = ? \
                    AND c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace \
                    WHERE nspname = 'demo_lake_v2')";
    let answer = jdbc(
        &jar,
        &pg,
        ADMIN,
        json!({ "statements": [
            { "sql": "SET application_name = 'DBeaver 25.1.5 - Main <demo>'" },
            { "sql": "SELECT current_schema(),session_user" },
            { "sql": DBEAVER_SCHEMAS },
            { "sql": "SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname='demo'" },
            { "sql": "SELECT * FROM pg_catalog.pg_settings where name='standard_conforming_strings'" },
            { "sql": namespace_of, "params": ["demo_lake_v2"] },
            { "sql": DBEAVER_TABLES, "params": [{ "previous": "oid" }] },
            { "sql": table_of, "params": ["trips"] },
            { "sql": DBEAVER_COLUMNS, "params": [{ "previous": "oid" }] },
            // _int4 and aclitem[]: not in pgjdbc's own list of types.
            { "sql": PGJDBC_TYPE, "params": [1007] },
            { "sql": PGJDBC_TYPE, "params": [1034] },
            // Text that is no array, where the catalog reads one: a clear
            // error.
            { "sql": "SELECT (information_schema._pg_expandarray('{a,b}')).x" },
            { "sql": "SELECT relname[1] FROM pg_catalog.pg_class" },
        ] }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(results[0], json!({ "updateCount": 0 }), "{answer}");
    assert_eq!(
        results[1]["rows"],
        json!([["public", "postgres"]]),
        "{answer}"
    );
    let schemas = column(&results[2], "nspname");
    assert_eq!(
        schemas,
        [
            "demo_data_input",
            "demo_insights",
            "demo_lake_v2",
            "demo_sandbox",
            "pg_catalog",
            "public"
        ],
        "{answer}"
    );
    assert_eq!(column(&results[3], "datname"), ["demo"], "{answer}");
    assert_eq!(column(&results[4], "setting"), ["on"], "{answer}");
    assert_eq!(column(&results[6], "relname"), ["trips"], "{answer}");
    assert_eq!(column(&results[6], "relkind"), ["r"], "{answer}");
    assert_eq!(
        column(&results[8], "attname"),
        [
            "trip_id",
            "fare",
            "city",
            "service_client_id",
            "svc$load_id"
        ],
        "{answer}"
    );
    assert_eq!(
        column(&results[8], "attnotnull"),
        [true, false, false, true, true]
    );
    assert_eq!(column(&results[8], "def_value"), [&Value::Null; 5]);
    assert_eq!(results[9]["rows"], json!([[true, "b", "_int4", 1007]]));
    assert_eq!(results[10]["rows"], json!([[true, "b", "_aclitem", 1034]]));
    for refused in &results.as_array().unwrap()[11..13] {
        assert_eq!(refused["sqlstate"], "XX000", "{refused}");
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("is not an array of integers"),
            "{refused}"
        );
    }

    // A PublicConsumer's navigator lists the insights only.
    let answer = jdbc(
        &jar,
        &pg,
        PUBLIC,
        json!({ "statements": [
            { "sql": DBEAVER_SCHEMAS },
            { "sql": namespace_of, "params": ["demo_lake_v2"] },
        ] }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(
        column(&results[0], "nspname"),
        ["demo_insights", "pg_catalog", "public"],
        "{answer}"
    );
    assert_eq!(results[1]["rows"], json!([]), "{answer}");
}

/// Metabase's check of what the user may do with each table, before it
/// syncs them (its Postgres driver's `current-user-table-privileges`).
const METABASE_PRIVILEGES: &str = "with table_privileges as (
 select
   NULL as role,
   t.schemaname as schema,
   t.objectname as table,
   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'update') as update,
   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'select') as select,
   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'insert') as insert,
   pg_catalog.has_table_privilege(     current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'delete') as delete
 from (
   select schemaname, tablename as objectname from pg_catalog.pg_tables
   union
   select schemaname, viewname as objectname from pg_catalog.pg_views
   union
   select schemaname, matviewname as objectname from pg_catalog.pg_matviews
 ) t
 where t.schemaname !~ '^pg_'
   and t.schemaname <> 'information_schema'
   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')
)
select t.*
from table_privileges t";

/// Metabase's table listing for sync (its Postgres driver's
/// `get-tables-sql`, as HoneySQL writes it, values bound).
const METABASE_TABLES: &str = "SELECT n.nspname AS schema, c.relname AS name, \
    CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' \
    WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS type, \
    d.description AS description, stat.n_live_tup AS estimated_row_count \
    FROM pg_catalog.pg_class AS c INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid \
    LEFT JOIN pg_catalog.pg_description AS d ON (c.oid = d.objoid) AND (d.objsubid = ?) \
    AND (d.classoid = 'pg_class'::regclass) \
    LEFT JOIN pg_stat_user_tables AS stat ON (n.nspname = stat.schemaname) \
    AND (c.relname = stat.relname) \
    WHERE (c.relnamespace = n.oid) AND (n.nspname !~ ?) AND (n.nspname <> ?) \
    AND c.relkind in ('r', 'p', 'v', 'f', 'm') AND (n.nspname IN (?, ?)) \
    ORDER BY type ASC, schema ASC, name ASC";

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn metabases_sync_queries_answer_with_the_callers_grants() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let sync = json!({ "statements": [
        { "sql": METABASE_PRIVILEGES },
        { "sql": METABASE_TABLES,
          "params": [0, "^pg_", "information_schema", "demo_insights", "demo_sandbox"] },
        // A name the caller cannot see, or no privilege at all: an error.
        { "sql": "SELECT has_table_privilege('demo_lake_v2.trips', 'SELECT')" },
        { "sql": "SELECT has_schema_privilege('demo_sandbox', 'OWN')" },
    ] });
    // The own-client analyst reads every database and writes the sandbox
    // only; lakehost has no UPDATE or DELETE.
    let analyst = ("demo-own-analyst", "demo-own-analyst-secret", "demo");
    let answer = jdbc(&jar, &pg, analyst, sync.clone()).await;
    let results = &answer["results"];
    assert_eq!(
        results[0]["columns"],
        json!([
            "role", "schema", "table", "update", "select", "insert", "delete"
        ]),
        "{answer}"
    );
    assert_eq!(
        results[0]["rows"],
        json!([
            [null, "demo_data_input", "raw", false, true, false, false],
            [null, "demo_insights", "summary", false, true, false, false],
            [null, "demo_lake_v2", "trips", false, true, false, false],
            [null, "demo_sandbox", "scratch", false, true, true, false],
        ]),
        "{answer}"
    );
    assert_eq!(
        results[1]["rows"],
        json!([
            ["demo_insights", "summary", "TABLE", null, null],
            ["demo_sandbox", "scratch", "TABLE", null, null],
        ]),
        "{answer}"
    );

    // A PublicConsumer reads the insights and writes nothing.
    let answer = jdbc(&jar, &pg, PUBLIC, sync).await;
    let results = &answer["results"];
    assert_eq!(
        results[0]["rows"],
        json!([[null, "demo_insights", "summary", false, true, false, false]]),
        "{answer}"
    );
    assert_eq!(
        results[1]["rows"],
        json!([["demo_insights", "summary", "TABLE", null, null]]),
        "{answer}"
    );
    assert_eq!(results[2]["sqlstate"], "XX000", "{answer}");
    assert!(
        results[2]["error"]
            .as_str()
            .unwrap()
            .contains("relation \"demo_lake_v2.trips\" does not exist"),
        "{answer}"
    );
    assert!(
        results[3]["error"]
            .as_str()
            .unwrap()
            .contains("schema \"demo_sandbox\" does not exist"),
        "{answer}"
    );
}
