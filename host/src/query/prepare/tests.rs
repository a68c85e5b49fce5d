//! `prepare`'s decisions as one table: each statement against each role of
//! `Role::ALL`, with the decision the spec's capability table gives (planned
//! as what, or refused with which error). The statements run as
//! `QueryService::plan` runs them (classified, then prepared in a session of
//! the caller), on a catalog in SQLite whose files are never opened: every
//! decision is made at planning.

mod catalog;
mod views;

use super::{Denial, Prepared, QueryError};
use crate::auth::Role;
use catalog::{Catalog, ORG};

/// What `prepare` decided, as the table states it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    /// Allowed, planned as this `Prepared` variant.
    Read,
    Nothing,
    CreateTable,
    CreateTableAs,
    Insert,
    Drop,
    Alter,
    /// One of the spec's permission refusals (403 over REST).
    Denied(Denial),
    /// `QueryError::Invalid` with this exact text (400 over REST).
    Invalid(String),
    /// `QueryError::Conflict` with this exact text.
    Conflict(String),
    /// Any other error: never expected by a row.
    Other(String),
}

use Decision::{Alter, CreateTable, CreateTableAs, Drop, Insert, Nothing, Read};
const EXECUTE: Decision = Decision::Denied(Denial::Execute);
const DATA: Decision = Decision::Denied(Denial::Data);
const STATEMENT: Decision = Decision::Denied(Denial::Statement);
const CREATE: Decision = Decision::Denied(Denial::CreateTable);

fn invalid(message: &str) -> Decision {
    Decision::Invalid(message.into())
}

fn conflict(message: &str) -> Decision {
    Decision::Conflict(message.into())
}

fn decision(outcome: Result<Prepared, QueryError>) -> Decision {
    match outcome {
        Ok(Prepared::Read { .. }) => Read,
        Ok(Prepared::Nothing) => Nothing,
        Ok(Prepared::CreateTable { .. }) => CreateTable,
        Ok(Prepared::CreateTableAs { .. }) => CreateTableAs,
        Ok(Prepared::Insert { .. }) => Insert,
        Ok(Prepared::Drop { .. }) => Drop,
        Ok(Prepared::Alter { .. }) => Alter,
        Err(QueryError::Denied(denial)) => Decision::Denied(denial),
        Err(QueryError::Invalid(message)) => Decision::Invalid(message),
        Err(QueryError::Conflict(message)) => Decision::Conflict(message),
        Err(other) => Decision::Other(format!("{other:?}")),
    }
}

/// One decision per role, in the order of `Role::ALL`: PublicConsumer,
/// OwnServiceClientConsumer, OwnServiceClientAnalyst,
/// AllServiceClientAnalyst, ZoneAdmin.
type PerRole = [Decision; Role::ALL.len()];

fn all(decision: Decision) -> PerRole {
    std::array::from_fn(|_| decision.clone())
}

/// The same decision for the three roles that may write the sandbox
/// (OwnServiceClientAnalyst and above); the two consumers are refused
/// `refused` first.
fn analysts(refused: Decision, decision: Decision) -> PerRole {
    [
        refused.clone(),
        refused,
        decision.clone(),
        decision.clone(),
        decision,
    ]
}

/// The table: a statement, and what each role gets. The catalog it runs on
/// is `Catalog::seeded`.
fn table() -> Vec<(&'static str, PerRole)> {
    let name_rule = "table name 'bad_' is not allowed: use lowercase letters, digits and \
                     underscores (at most 128), not starting or ending with an underscore";
    vec![
        // Reads: the session's scan decides by database kind and by the
        // service clients of the files a read keeps.
        ("SELECT 1", all(Read)),
        ("SHOW TABLES", all(Read)),
        (
            "SELECT count(*) FROM demo_lake_v2.trips",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        (
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 901)",
            [EXECUTE, EXECUTE, Read, Read, Read],
        ),
        (
            "EXPLAIN SELECT * FROM demo_lake_v2.trips",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        (
            "SELECT * FROM demo_insights.summary",
            [DATA, DATA, DATA, Read, Read],
        ),
        (
            "SELECT * FROM demo_insights.summary WHERE service_client_id = 1",
            [DATA, Read, Read, Read, Read],
        ),
        (
            "SELECT * FROM demo_insights.summary WHERE service_client_id = 901",
            all(Read),
        ),
        (
            "SELECT * FROM demo_data_input.raw WHERE service_client_id = 1",
            [EXECUTE, EXECUTE, Read, Read, Read],
        ),
        (
            "SELECT * FROM demo_sandbox.mine",
            [EXECUTE, EXECUTE, Read, Read, Read],
        ),
        (
            "SELECT * FROM demo_sandbox.shared",
            [EXECUTE, EXECUTE, DATA, Read, Read],
        ),
        // An unknown table or database: the engine's planning error, for all.
        (
            "SELECT * FROM demo_lake_v2.nope",
            all(invalid(
                "Error during planning: table 'lakehost.demo_lake_v2.nope' not found",
            )),
        ),
        (
            "SELECT * FROM nodb.t",
            all(invalid(
                "Error during planning: table 'lakehost.nodb.t' not found",
            )),
        ),
        // Writes of rows, per database kind: the sandbox to analysts, the
        // other kinds to AllServiceClientAnalyst and ZoneAdmin.
        (
            "INSERT INTO demo_lake_v2.trips VALUES (5, 1)",
            [STATEMENT, STATEMENT, STATEMENT, Insert, Insert],
        ),
        (
            "INSERT INTO demo_insights.summary VALUES (5, 1)",
            [STATEMENT, STATEMENT, STATEMENT, Insert, Insert],
        ),
        (
            "INSERT INTO demo_data_input.raw VALUES (5, 1)",
            [STATEMENT, STATEMENT, STATEMENT, Insert, Insert],
        ),
        (
            "INSERT INTO demo_sandbox.mine VALUES (5, 1)",
            analysts(STATEMENT, Insert),
        ),
        // The rows an INSERT reads are checked as a read is.
        (
            "INSERT INTO demo_sandbox.mine SELECT n, service_client_id FROM demo_lake_v2.trips",
            [STATEMENT, STATEMENT, DATA, Insert, Insert],
        ),
        (
            "INSERT INTO demo_sandbox.nope VALUES (5, 1)",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.nope' does not exist"),
            ),
        ),
        // CREATE TABLE [AS], per database kind, then what an existing table,
        // a bad name or a missing service_client_id column means.
        (
            "CREATE TABLE demo_sandbox.fresh AS SELECT 1 AS service_client_id, 2 AS n",
            analysts(CREATE, CreateTableAs),
        ),
        (
            "CREATE TABLE demo_lake_v2.fresh AS SELECT 1 AS service_client_id",
            [CREATE, CREATE, CREATE, CreateTableAs, CreateTableAs],
        ),
        (
            "CREATE TABLE demo_insights.fresh AS SELECT 1 AS service_client_id",
            [CREATE, CREATE, CREATE, CreateTableAs, CreateTableAs],
        ),
        (
            "CREATE TABLE demo_data_input.fresh AS SELECT 1 AS service_client_id",
            [CREATE, CREATE, CREATE, CreateTableAs, CreateTableAs],
        ),
        (
            "CREATE TABLE fresh AS SELECT 1 AS service_client_id",
            [CREATE, CREATE, CREATE, CreateTableAs, CreateTableAs],
        ),
        (
            "CREATE TABLE demo_sandbox.fresh (service_client_id BIGINT, n BIGINT)",
            analysts(CREATE, CreateTable),
        ),
        (
            "CREATE TABLE demo_sandbox.fresh AS \
             SELECT service_client_id, n FROM demo_lake_v2.trips",
            [CREATE, CREATE, DATA, CreateTableAs, CreateTableAs],
        ),
        (
            "CREATE TABLE demo_sandbox.mine (service_client_id BIGINT, n BIGINT)",
            analysts(CREATE, invalid("Table 'demo_sandbox.mine' already exists")),
        ),
        (
            "CREATE TABLE IF NOT EXISTS demo_sandbox.mine (service_client_id BIGINT, n BIGINT)",
            analysts(CREATE, Nothing),
        ),
        (
            "CREATE TABLE demo_sandbox.mine AS SELECT 1 AS service_client_id",
            analysts(
                CREATE,
                conflict(
                    "Target location of table 'demo_sandbox.mine' already holds data \
                     (1 files); drop the table first",
                ),
            ),
        ),
        (
            "CREATE TABLE demo_sandbox.empty AS SELECT 1 AS service_client_id",
            analysts(
                CREATE,
                conflict("Table 'demo_sandbox.empty' already exists"),
            ),
        ),
        (
            "CREATE TABLE demo_sandbox.Bad_ AS SELECT 1 AS service_client_id",
            analysts(CREATE, invalid(name_rule)),
        ),
        (
            "CREATE TABLE demo_sandbox.fresh AS SELECT 1 AS n",
            analysts(
                CREATE,
                invalid(
                    "a lake table needs a service_client_id column: \
                     every lake row belongs to a service client",
                ),
            ),
        ),
        (
            "CREATE TABLE nodb.fresh (service_client_id BIGINT)",
            all(invalid("Database 'nodb' does not exist")),
        ),
        // DROP TABLE: the sandbox to analysts who read every row of the
        // table, the other kinds to ZoneAdmin; one refusal refuses all.
        (
            "DROP TABLE demo_lake_v2.trips",
            [STATEMENT, STATEMENT, STATEMENT, STATEMENT, Drop],
        ),
        (
            "DROP TABLE demo_insights.summary",
            [STATEMENT, STATEMENT, STATEMENT, STATEMENT, Drop],
        ),
        (
            "DROP TABLE demo_data_input.raw",
            [STATEMENT, STATEMENT, STATEMENT, STATEMENT, Drop],
        ),
        ("DROP TABLE demo_sandbox.mine", analysts(STATEMENT, Drop)),
        (
            "DROP TABLE demo_sandbox.shared",
            [STATEMENT, STATEMENT, DATA, Drop, Drop],
        ),
        (
            "DROP TABLE demo_sandbox.mine, demo_lake_v2.trips",
            [STATEMENT, STATEMENT, STATEMENT, STATEMENT, Drop],
        ),
        (
            "DROP TABLE demo_sandbox.nope",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.nope' does not exist"),
            ),
        ),
        (
            "DROP TABLE IF EXISTS demo_sandbox.nope",
            analysts(STATEMENT, Drop),
        ),
        // ALTER TABLE: the rights of DROP, then the change itself.
        (
            "ALTER TABLE demo_sandbox.mine RENAME TO renamed",
            analysts(STATEMENT, Alter),
        ),
        (
            "ALTER TABLE demo_lake_v2.trips RENAME TO renamed",
            [STATEMENT, STATEMENT, STATEMENT, STATEMENT, Alter],
        ),
        (
            "ALTER TABLE demo_sandbox.shared ADD COLUMN note VARCHAR",
            [STATEMENT, STATEMENT, DATA, Alter, Alter],
        ),
        (
            "ALTER TABLE demo_sandbox.mine ADD COLUMN n BIGINT",
            analysts(STATEMENT, invalid("column 'n' already exists")),
        ),
        (
            "ALTER TABLE demo_sandbox.mine RENAME TO shared",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.shared' already exists"),
            ),
        ),
        (
            "ALTER TABLE demo_sandbox.mine RENAME TO demo_lake_v2.moved",
            analysts(
                STATEMENT,
                invalid("ALTER TABLE ... RENAME TO cannot move a table to another database"),
            ),
        ),
        (
            "ALTER TABLE demo_sandbox.nope RENAME TO renamed",
            analysts(
                STATEMENT,
                invalid("Table 'demo_sandbox.nope' does not exist"),
            ),
        ),
        (
            "ALTER TABLE demo_sandbox.mine DROP COLUMN n",
            analysts(
                STATEMENT,
                invalid("ALTER TABLE supports RENAME TO <table> and ADD COLUMN <column> <type>"),
            ),
        ),
        // What could reach files or settings is refused for every role,
        // before any permission or planning.
        (
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            all(invalid("COPY statements are not allowed")),
        ),
        (
            "COPY demo_lake_v2.trips TO '/tmp/x.parquet'",
            all(invalid("COPY statements are not allowed")),
        ),
        (
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc/'",
            all(invalid("CREATE EXTERNAL TABLE statements are not allowed")),
        ),
        (
            "SET datafusion.execution.batch_size = 1",
            all(invalid("SET statements are not allowed")),
        ),
        (
            "CREATE MATERIALIZED VIEW v AS SELECT 1",
            all(invalid(
                "CREATE MATERIALIZED VIEW statements are not allowed",
            )),
        ),
        (
            "EXPLAIN ANALYZE SELECT 1",
            all(invalid("EXPLAIN ANALYZE statements are not allowed")),
        ),
        (
            "DELETE FROM demo_sandbox.mine",
            all(invalid("DELETE statements are not allowed")),
        ),
        // Exactly one statement per query.
        (
            "SELECT 1; SELECT 2",
            all(invalid("exactly one SQL statement is allowed per query")),
        ),
        (
            "SELECT 1; DROP TABLE demo_sandbox.mine",
            all(invalid("exactly one SQL statement is allowed per query")),
        ),
    ]
}

#[tokio::test]
async fn every_role_gets_the_decision_of_the_capability_table() {
    let catalog = Catalog::seeded().await;
    let mut wrong = Vec::new();
    let table = table();
    for (sql, expected) in &table {
        for (role, expected) in Role::ALL.into_iter().zip(expected) {
            let actual = decision(catalog.prepare(role, sql).await);
            if actual != *expected {
                wrong.push(format!(
                    "{role:?} / {sql}\n    expected {expected:?}\n    got      {actual:?}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} decisions differ:\n{}",
        wrong.len(),
        table.len() * Role::ALL.len(),
        wrong.join("\n")
    );
}

/// `prepare` only plans: the catalog is the same after every statement of
/// the table, so the rows do not depend on their order.
#[tokio::test]
async fn preparing_changes_nothing_in_the_catalog() {
    let catalog = Catalog::seeded().await;
    let before = catalog.store.catalog_of(ORG, None).await.unwrap();
    for (sql, _) in table() {
        let _ = catalog.prepare(Role::ZoneAdmin, sql).await;
    }
    let after = catalog.store.catalog_of(ORG, None).await.unwrap();
    assert_eq!(format!("{before:?}"), format!("{after:?}"));
}
