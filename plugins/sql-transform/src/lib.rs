//! The daily run's SQL transform (issue "Daily run", pipelines/daily.toml):
//! refreshes tables of the org's insights database from SQL over its lake,
//! one table after the other, each replaced in one catalog transaction.
//!
//! ```toml
//! [[steps]]
//! name = "refresh_insights"
//! component = "builtin:sql_transform"
//! grants = ["lake-sql", "log"]
//! [[steps.config.tables]]
//! table = "trips_per_client"
//! sql = "SELECT service_client_id, count(*) AS trips FROM ${lake}.trips GROUP BY service_client_id"
//! ```
//!
//! In `sql`, `${org}`, `${lake}` and `${insights}` stand for the org's name,
//! its lake database and its insights database. A table that cannot be
//! refreshed (bad SQL, a missing source table, no service_client_id column)
//! fails the run with ErrorType TransformError; tables refreshed before it
//! keep their new rows.
//!
//! Grants: lake-sql, log.

// The generated export shim takes the run-context record flattened into its
// fields (11 core parameters), which clippy counts as too many arguments.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "../../wit", world: "daily-step" });

use lakehost::pipeline::{
    lake_sql,
    log::{self, Level},
    types::{CapabilityError, ErrorItem, Failure},
};
use serde_json::Value;

struct SqlTransform;

/// One `[[steps.config.tables]]` entry.
struct Transform {
    table: String,
    sql: String,
}

fn transforms(config: &str) -> Result<Vec<Transform>, String> {
    let config: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
    let tables = config["tables"]
        .as_array()
        .ok_or("config.tables must be a list of {table, sql} tables")?;
    if tables.is_empty() {
        return Err("config.tables is empty: name at least one table to refresh".into());
    }
    tables
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = |key: &str| {
                entry[key]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("config.tables[{i}].{key} must be a string"))
            };
            Ok(Transform {
                table: field("table")?,
                sql: field("sql")?,
            })
        })
        .collect()
}

/// `sql` with the context's placeholders filled in.
fn expand(sql: &str, context: &RunContext) -> String {
    sql.replace("${org}", &context.org)
        .replace("${lake}", &context.lake_database)
        .replace("${insights}", &context.insights_database)
}

impl Guest for SqlTransform {
    fn run(context: RunContext, config: String) -> Result<Outcome, String> {
        for transform in transforms(&config)? {
            let sql = expand(&transform.sql, &context);
            match lake_sql::refresh_table(&transform.table, &sql) {
                Ok(rows) => log::write(
                    Level::Info,
                    &format!(
                        "{}.{} refreshed: {rows} rows",
                        context.insights_database, transform.table
                    ),
                ),
                Err(CapabilityError::Failed(message)) => {
                    return Ok(Outcome::Fail(Failure {
                        error_type: "TransformError".into(),
                        items: vec![ErrorItem {
                            error_type: "REFRESH_FAILED".into(),
                            error_message: format!(
                                "{}.{}: {message}",
                                context.insights_database, transform.table
                            ),
                            check_result: None,
                        }],
                    }));
                }
                Err(CapabilityError::NotGranted(message)) => return Err(message),
            }
        }
        Ok(Outcome::Pass)
    }
}

export!(SqlTransform);
