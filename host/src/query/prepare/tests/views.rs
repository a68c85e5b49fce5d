//! Views and three-part names in `prepare`'s table: who may create, replace,
//! rename and drop a view (CREATE TABLE's rule), that a view's SELECT is
//! checked as its creator and read as its reader (a view never widens
//! access), and that a three-part name's catalog is `lakehost` or the
//! connection's database only.

use datafusion::{arrow::array::AsArray as _, physical_plan::collect, prelude::SessionContext};

use super::catalog::{Catalog, ORG};
use super::{Alter, CreateTableAs};
use super::{
    CREATE, CreateTable, DATA, Decision, Drop, EXECUTE, Insert, Nothing, PerRole, Read, STATEMENT,
    all, analysts, decision, invalid,
};
use crate::{auth::Role, query::prepare::Prepared, store::catalog::views::LakeView};

const FOREIGN: &str = "catalog 'other' is not this connection's database: name tables as \
                       table, database.table, lakehost.database.table or demo.database.table";

/// A catalog with views committed as a worker commits them (the entry
/// ZoneAdmin's CREATE VIEW prepares): `demo_sandbox.shared_view` over
/// `shared` (service clients 1 and 2), `demo_sandbox.stale` over a table
/// dropped since.
async fn with_views() -> Catalog {
    let catalog = Catalog::seeded().await;
    for sql in [
        "CREATE VIEW demo_sandbox.shared_view AS SELECT n, service_client_id FROM demo_sandbox.shared",
        "CREATE VIEW demo_sandbox.stale AS SELECT n FROM demo_sandbox.empty",
    ] {
        let Ok(Prepared::CreateTable { table }) = catalog.prepare(Role::ZoneAdmin, sql).await
        else {
            panic!("{sql} did not prepare a view");
        };
        let view = LakeView::from_catalog_entry(&table)
            .unwrap()
            .expect("a view's entry");
        catalog.store.put_view(&view).await.unwrap();
    }
    let sandbox = catalog
        .store
        .database(ORG, None, "demo_sandbox")
        .await
        .unwrap()
        .unwrap();
    catalog
        .store
        .drop_table(&sandbox.id, "empty", 0)
        .await
        .unwrap();
    catalog
}

fn rows() -> Vec<(&'static str, PerRole)> {
    let stale = "Error during planning: view demo_sandbox.stale no longer plans (Error during \
                 planning: table 'lakehost.demo_sandbox.empty' not found): create it again \
                 (CREATE OR REPLACE VIEW)";
    vec![
        // Three-part names: `lakehost` or the connection's database, in every kind.
        (
            "SELECT count(*) FROM demo.demo_lake_v2.trips",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        (
            r#"SELECT count(*) FROM "demo"."demo_lake_v2"."trips" WHERE service_client_id = 1"#,
            [EXECUTE, EXECUTE, Read, Read, Read],
        ),
        (
            "SELECT count(*) FROM other.demo_lake_v2.trips",
            all(invalid(&format!("Error during planning: {FOREIGN}"))),
        ),
        (
            "INSERT INTO demo.demo_sandbox.mine VALUES (5, 1)",
            analysts(STATEMENT, Insert),
        ),
        (
            "INSERT INTO other.demo_sandbox.mine VALUES (5, 1)",
            all(invalid(FOREIGN)),
        ),
        (
            r#"CREATE TABLE "demo"."demo_sandbox"."fresh" AS SELECT 1 AS service_client_id"#,
            analysts(CREATE, CreateTableAs),
        ),
        (
            "CREATE TABLE other.demo_sandbox.fresh AS SELECT 1 AS service_client_id",
            all(invalid(FOREIGN)),
        ),
        (
            r#"drop table if exists "demo"."demo_sandbox"."mine" cascade"#,
            analysts(STATEMENT, Drop),
        ),
        ("DROP TABLE other.demo_sandbox.mine", all(invalid(FOREIGN))),
        (
            "ALTER TABLE demo.demo_sandbox.mine RENAME TO renamed",
            analysts(STATEMENT, Alter),
        ),
        // CREATE VIEW: CREATE TABLE's rule, the SELECT checked as its creator.
        (
            "CREATE VIEW demo_sandbox.fresh AS SELECT n FROM demo_sandbox.mine",
            analysts(CREATE, CreateTable),
        ),
        (
            r#"create view "demo"."demo_sandbox"."fresh__dbt_tmp" as (select 1 as a);"#,
            analysts(CREATE, CreateTable),
        ),
        (
            "CREATE VIEW demo_lake_v2.fresh AS SELECT 1 AS a",
            [CREATE, CREATE, CREATE, CreateTable, CreateTable],
        ),
        (
            "CREATE VIEW demo_sandbox.fresh AS SELECT * FROM demo_sandbox.shared",
            [CREATE, CREATE, DATA, CreateTable, CreateTable],
        ),
        (
            "CREATE VIEW demo_sandbox.mine AS SELECT 1 AS a",
            analysts(
                CREATE,
                invalid(
                    "Table 'demo_sandbox.mine' already exists (a view cannot replace a table: drop it first)",
                ),
            ),
        ),
        (
            "CREATE VIEW demo_sandbox.shared_view AS SELECT 1 AS a",
            analysts(
                CREATE,
                invalid("View 'demo_sandbox.shared_view' already exists"),
            ),
        ),
        (
            "CREATE OR REPLACE VIEW demo_sandbox.shared_view AS SELECT 1 AS a",
            analysts(CREATE, CreateTable),
        ),
        (
            "CREATE VIEW IF NOT EXISTS demo_sandbox.shared_view AS SELECT 1 AS a",
            analysts(CREATE, Nothing),
        ),
        (
            "CREATE OR REPLACE VIEW demo_sandbox.shared_view AS SELECT * FROM demo_sandbox.shared_view",
            [
                CREATE,
                CREATE,
                DATA,
                invalid("View 'demo_sandbox.shared_view' cannot read itself"),
                invalid("View 'demo_sandbox.shared_view' cannot read itself"),
            ],
        ),
        (
            "CREATE TABLE demo_sandbox.shared_view AS SELECT 1 AS service_client_id",
            analysts(
                CREATE,
                invalid("View 'demo_sandbox.shared_view' already exists (drop it first)"),
            ),
        ),
        // Reading a view: the reader's access to its base tables, never more.
        (
            "SELECT * FROM demo_sandbox.shared_view",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        (
            "SELECT n FROM demo_sandbox.shared_view WHERE service_client_id = 1",
            [EXECUTE, EXECUTE, Read, Read, Read],
        ),
        (
            "SELECT n FROM demo.demo_sandbox.shared_view WHERE service_client_id = 2",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        ("SELECT * FROM demo_sandbox.stale", all(invalid(stale))),
        // DROP VIEW and a view's rename: CASCADE accepted, a table is no view.
        (
            "DROP VIEW demo_sandbox.shared_view CASCADE",
            analysts(STATEMENT, Drop),
        ),
        (
            "DROP VIEW demo_sandbox.nope",
            analysts(
                STATEMENT,
                invalid("View 'demo_sandbox.nope' does not exist"),
            ),
        ),
        (
            "DROP VIEW IF EXISTS demo_sandbox.nope",
            analysts(STATEMENT, Drop),
        ),
        (
            "DROP VIEW other.demo_sandbox.shared_view",
            all(invalid(FOREIGN)),
        ),
        (
            "DROP TABLE demo_sandbox.shared_view",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.shared_view' does not exist"),
            ),
        ),
        (
            "ALTER TABLE demo_sandbox.shared_view RENAME TO renamed",
            analysts(STATEMENT, Alter),
        ),
        (
            "ALTER TABLE demo_sandbox.shared_view RENAME TO mine",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.mine' already exists"),
            ),
        ),
        (
            "ALTER TABLE demo_sandbox.shared_view ADD COLUMN x INT",
            analysts(
                STATEMENT,
                invalid(
                    "'demo_sandbox.shared_view' is a view: ALTER only renames it (CREATE OR REPLACE VIEW changes its columns)",
                ),
            ),
        ),
    ]
}

#[tokio::test]
async fn views_and_three_part_names_get_the_decisions_of_the_table() {
    let catalog = with_views().await;
    let mut wrong = Vec::new();
    let rows = rows();
    for (sql, expected) in &rows {
        for (role, expected) in Role::ALL.into_iter().zip(expected) {
            let actual: Decision = decision(catalog.prepare(role, sql).await);
            if actual != *expected {
                wrong.push(format!(
                    "{role:?} / {sql}\n    expected {expected:?}\n    got      {actual:?}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} decisions differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Views are listed with the tables, as views (information_schema, and so
/// the Postgres catalog built on it).
#[tokio::test]
async fn views_are_listed_as_views() {
    let catalog = with_views().await;
    let sql = "SELECT table_name, table_type FROM information_schema.tables \
               WHERE table_schema = 'demo_sandbox' ORDER BY table_name";
    let Ok(Prepared::Read { plan, .. }) = catalog.prepare(Role::ZoneAdmin, sql).await else {
        panic!("{sql} did not plan");
    };
    let batches = collect(plan, SessionContext::new().task_ctx())
        .await
        .unwrap();
    let mut listed = Vec::new();
    for batch in &batches {
        let (names, types) = (
            batch.column(0).as_string::<i32>(),
            batch.column(1).as_string::<i32>(),
        );
        for row in 0..batch.num_rows() {
            listed.push(format!("{} {}", names.value(row), types.value(row)));
        }
    }
    assert_eq!(
        listed,
        [
            "mine BASE TABLE",
            "shared BASE TABLE",
            "shared_view VIEW",
            "stale VIEW"
        ]
    );
}
