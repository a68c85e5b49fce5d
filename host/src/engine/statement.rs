//! Statement policy (DESIGN.md "Statements"): one statement per query, parsed by
//! DataFusion's parser, classified as the spec's statementType, and reduced to
//! the action the permission check needs. Anything that can reach the file
//! system or the network by itself (CREATE EXTERNAL TABLE, COPY, SET, RESET,
//! materialized views, functions, ...) is refused here, before any planning.
//!
//! A three-part name's catalog is kept as written: whether it is this
//! session's (`lakehost` or the database its client connected to, see
//! `session::api_database`) is the query service's to decide. DROP's
//! CASCADE and RESTRICT are accepted and mean nothing more: no lake object
//! depends on another (a view over a dropped table fails when read).

use super::expression_limits::{self, ExpressionLimitError, ParseFailure};
use datafusion::sql::{
    parser::Statement as DfStatement,
    sqlparser::ast::{
        AlterTableOperation, ObjectName, ObjectType, RenameTableNameKind, Statement, TableObject,
    },
};

/// The spec's `statementType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementType {
    Dml,
    Ddl,
    Utility,
}

impl StatementType {
    pub fn as_str(self) -> &'static str {
        match self {
            StatementType::Dml => "DML",
            StatementType::Ddl => "DDL",
            StatementType::Utility => "UTILITY",
        }
    }
}

/// A table (or view) named in a statement: `table`, `database.table` or
/// `catalog.database.table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The catalog of a three-part name, as written.
    pub catalog: Option<String>,
    pub database: Option<String>,
    pub table: String,
}

/// What a statement does, as far as permissions go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// SELECT / WITH / VALUES, EXPLAIN of one, SHOW and DESCRIBE.
    Read,
    Insert {
        table: TableName,
    },
    CreateTable {
        table: TableName,
        as_select: bool,
        if_not_exists: bool,
    },
    DropTables {
        tables: Vec<TableName>,
        if_exists: bool,
    },
    AlterTable {
        table: TableName,
        change: AlterChange,
    },
    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] <view> AS <query>`.
    CreateView {
        view: TableName,
        /// The SELECT, as the parser prints it.
        query: String,
        or_replace: bool,
        if_not_exists: bool,
    },
    DropViews {
        views: Vec<TableName>,
        if_exists: bool,
    },
}

/// The ALTER TABLE forms lakehost runs; anything else is refused after the
/// permission check (so a caller without the right learns that first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterChange {
    /// `RENAME TO <table>` within the same database.
    RenameTo(TableName),
    /// `ADD [COLUMN] <column definition>`, as SQL text.
    AddColumn(String),
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub statement_type: StatementType,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// The engine's own parse error.
    #[error("{0}")]
    Parse(String),
    #[error("exactly one SQL statement is allowed per query")]
    NotOneStatement,
    /// A statement lakehost never runs.
    #[error("{0} statements are not allowed")]
    Refused(String),
    #[error("table name {0} is not of the form table, database.table or catalog.database.table")]
    BadTableName(String),
    #[error(transparent)]
    TooComplex(#[from] ExpressionLimitError),
}

pub fn classify(sql: &str) -> Result<Classified, StatementError> {
    let mut statements =
        expression_limits::parse_datafusion_statements(sql).map_err(|failure| match failure {
            ParseFailure::TooComplex(limit) => StatementError::TooComplex(limit),
            ParseFailure::Syntax(message) => StatementError::Parse(message),
        })?;
    if statements.len() != 1 {
        return Err(StatementError::NotOneStatement);
    }
    match statements.pop_front().expect("one statement") {
        DfStatement::Statement(statement) => classify_sql(&statement),
        DfStatement::CreateExternalTable(_) => Err(refused("CREATE EXTERNAL TABLE")),
        DfStatement::CopyTo(_) => Err(refused("COPY")),
        DfStatement::Reset(_) => Err(refused("RESET")),
        DfStatement::Explain(explain) if explain.options.analyze => Err(refused("EXPLAIN ANALYZE")),
        DfStatement::Explain(explain) => match *explain.statement {
            DfStatement::Statement(inner) => explain_of(&inner),
            _ => Err(refused("EXPLAIN of this statement")),
        },
    }
}

/// `sql` as the parser prints it back: one spelling for statements that
/// differ only in whitespace, comments or keyword case (result reuse keys on
/// it). `None` when it does not parse as one statement.
pub fn canonical_sql(sql: &str) -> Option<String> {
    let mut statements = expression_limits::parse_datafusion_statements(sql).ok()?;
    (statements.len() == 1).then(|| statements.pop_front().expect("one statement").to_string())
}

fn refused(what: &str) -> StatementError {
    StatementError::Refused(what.to_string())
}

/// EXPLAIN is UTILITY, and only of statements that may run themselves; it
/// never runs the inner statement (EXPLAIN ANALYZE is refused).
fn explain_of(inner: &Statement) -> Result<Classified, StatementError> {
    let classified = classify_sql(inner)?;
    if classified.action != Action::Read {
        return Err(refused("EXPLAIN of a write"));
    }
    Ok(Classified {
        statement_type: StatementType::Utility,
        action: Action::Read,
    })
}

fn classify_sql(statement: &Statement) -> Result<Classified, StatementError> {
    expression_limits::check(statement)?;
    let classified = |statement_type, action| {
        Ok(Classified {
            statement_type,
            action,
        })
    };
    match statement {
        Statement::Query(_) => classified(StatementType::Dml, Action::Read),
        Statement::Explain {
            statement, analyze, ..
        } => {
            if *analyze {
                return Err(refused("EXPLAIN ANALYZE"));
            }
            explain_of(statement)
        }
        Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. } => classified(StatementType::Utility, Action::Read),
        Statement::Insert(insert) => {
            let TableObject::TableName(name) = &insert.table else {
                return Err(refused("INSERT INTO a table function"));
            };
            classified(
                StatementType::Dml,
                Action::Insert {
                    table: table_name(name)?,
                },
            )
        }
        Statement::CreateTable(create) => {
            if create.external || create.temporary || create.or_replace || create.location.is_some()
            {
                return Err(refused(
                    "CREATE EXTERNAL, TEMPORARY, OR REPLACE or LOCATION",
                ));
            }
            classified(
                StatementType::Ddl,
                Action::CreateTable {
                    table: table_name(&create.name)?,
                    as_select: create.query.is_some(),
                    if_not_exists: create.if_not_exists,
                },
            )
        }
        Statement::CreateView(create) => views::classify_create(create),
        Statement::Drop {
            object_type: ObjectType::View,
            names,
            if_exists,
            ..
        } => classified(
            StatementType::Ddl,
            Action::DropViews {
                views: names.iter().map(table_name).collect::<Result<_, _>>()?,
                if_exists: *if_exists,
            },
        ),
        Statement::Drop {
            object_type: ObjectType::Table,
            names,
            if_exists,
            ..
        } => classified(
            StatementType::Ddl,
            Action::DropTables {
                tables: names.iter().map(table_name).collect::<Result<_, _>>()?,
                if_exists: *if_exists,
            },
        ),
        Statement::AlterTable(alter) => {
            let change = match alter.operations.as_slice() {
                [AlterTableOperation::RenameTable { table_name: kind }] => {
                    let (RenameTableNameKind::To(name) | RenameTableNameKind::As(name)) = kind;
                    AlterChange::RenameTo(table_name(name)?)
                }
                [AlterTableOperation::AddColumn { column_def, .. }] => {
                    AlterChange::AddColumn(column_def.to_string())
                }
                _ => AlterChange::Unsupported(statement.to_string()),
            };
            classified(
                StatementType::Ddl,
                Action::AlterTable {
                    table: table_name(&alter.name)?,
                    change,
                },
            )
        }
        other => {
            let text = other.to_string();
            let keyword = text
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_uppercase();
            Err(StatementError::Refused(keyword))
        }
    }
}

mod views;

fn table_name(name: &ObjectName) -> Result<TableName, StatementError> {
    let parts: Option<Vec<String>> = name
        .0
        .iter()
        .map(|part| {
            // Unquoted names are case-insensitive, as in DataFusion's planner.
            part.as_ident().map(|ident| match ident.quote_style {
                None => ident.value.to_lowercase(),
                Some(_) => ident.value.clone(),
            })
        })
        .collect();
    let bad = || StatementError::BadTableName(name.to_string());
    match parts.ok_or_else(bad)?.as_slice() {
        [table] => Ok(TableName {
            catalog: None,
            database: None,
            table: table.clone(),
        }),
        [database, table] => Ok(TableName {
            catalog: None,
            database: Some(database.clone()),
            table: table.clone(),
        }),
        [catalog, database, table] => Ok(TableName {
            catalog: Some(catalog.clone()),
            database: Some(database.clone()),
            table: table.clone(),
        }),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(sql: &str) -> (StatementType, Action) {
        let c = classify(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        (c.statement_type, c.action)
    }

    fn name(database: Option<&str>, table: &str) -> TableName {
        TableName {
            catalog: None,
            database: database.map(String::from),
            table: table.into(),
        }
    }

    #[test]
    fn statement_types() {
        assert_eq!(kind("SELECT 1"), (StatementType::Dml, Action::Read));
        assert_eq!(
            kind("WITH t AS (SELECT 1) SELECT * FROM t"),
            (StatementType::Dml, Action::Read)
        );
        assert_eq!(
            kind("EXPLAIN SELECT 1"),
            (StatementType::Utility, Action::Read)
        );
        assert_eq!(kind("SHOW TABLES"), (StatementType::Utility, Action::Read));
        assert_eq!(
            kind("DESCRIBE trips"),
            (StatementType::Utility, Action::Read)
        );
        assert_eq!(
            kind("INSERT INTO demo_sandbox.t SELECT 1"),
            (
                StatementType::Dml,
                Action::Insert {
                    table: name(Some("demo_sandbox"), "t")
                }
            )
        );
        assert_eq!(
            kind("CREATE TABLE lakehost.demo_sandbox.t AS SELECT 1 AS a"),
            (
                StatementType::Ddl,
                Action::CreateTable {
                    table: TableName {
                        catalog: Some("lakehost".into()),
                        ..name(Some("demo_sandbox"), "t")
                    },
                    as_select: true,
                    if_not_exists: false
                }
            )
        );
        assert_eq!(
            kind("CREATE TABLE t (a INT)"),
            (
                StatementType::Ddl,
                Action::CreateTable {
                    table: name(None, "t"),
                    as_select: false,
                    if_not_exists: false
                }
            )
        );
        assert_eq!(
            kind("DROP TABLE demo_lake_v2.trips"),
            (
                StatementType::Ddl,
                Action::DropTables {
                    tables: vec![name(Some("demo_lake_v2"), "trips")],
                    if_exists: false
                }
            )
        );
        assert_eq!(
            kind("ALTER TABLE demo_sandbox.t RENAME TO u"),
            (
                StatementType::Ddl,
                Action::AlterTable {
                    table: name(Some("demo_sandbox"), "t"),
                    change: AlterChange::RenameTo(name(None, "u"))
                }
            )
        );
        assert!(matches!(
            kind("ALTER TABLE t ADD COLUMN note VARCHAR").1,
            Action::AlterTable {
                change: AlterChange::AddColumn(ref def),
                ..
            } if def == "note VARCHAR"
        ));
    }

    #[test]
    fn statements_that_reach_files_or_settings_are_refused() {
        for sql in [
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc/'",
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            "SET datafusion.execution.batch_size = 1",
            "RESET datafusion.execution.batch_size",
            "CREATE MATERIALIZED VIEW v AS SELECT 1",
            "CREATE TEMPORARY TABLE t (a INT)",
            "CREATE OR REPLACE TABLE t (a INT)",
            "EXPLAIN ANALYZE SELECT 1",
            "EXPLAIN INSERT INTO t SELECT 1",
            "CREATE FUNCTION f() RETURNS INT RETURN 1",
            "DROP MATERIALIZED VIEW v",
            "DELETE FROM t",
            "UPDATE t SET a = 1",
        ] {
            assert!(
                matches!(classify(sql), Err(StatementError::Refused(_))),
                "{sql}: {:?}",
                classify(sql)
            );
        }
    }

    #[test]
    fn one_parsable_statement() {
        assert_eq!(
            classify("SELECT 1; SELECT 2"),
            Err(StatementError::NotOneStatement)
        );
        assert_eq!(classify(""), Err(StatementError::NotOneStatement));
        assert!(matches!(classify("SELEC 1"), Err(StatementError::Parse(_))));
        // Names inside queries are resolved by the session, not here.
        assert!(classify("SELECT * FROM a.b.c.d").is_ok());
        assert!(matches!(
            classify("DROP TABLE x.other.a.b"),
            Err(StatementError::BadTableName(_))
        ));
    }
}
