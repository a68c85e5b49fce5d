//! Step 5 of the default load pipeline (spec "The lake table is created if
//! new; if it exists, its columns are matched and types must match"). A new
//! table passes (the insert step creates it; the requested partitions must be
//! columns of the files). On an existing table, missing, extra or
//! type-mismatched columns fail the load with ValidationError and the recap
//! items MISSING_COLUMN, UNEXPECTED_COLUMN, COLUMN_TYPE_MISMATCH.
//!
//! Grants: staged-files, lake-schema, log.

wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    lake_schema, staged_files,
    types::{CapabilityError, Column, ErrorItem, Failure},
};

struct MatchSchema;

/// Columns the host adds to every loaded row.
const ADDED_COLUMNS: &[&str] = &["svc$load_id"];

fn capability(e: CapabilityError) -> String {
    match e {
        CapabilityError::NotGranted(why) | CapabilityError::Failed(why) => why,
    }
}

fn item(error_type: &str, message: String) -> ErrorItem {
    ErrorItem {
        error_type: error_type.into(),
        error_message: message,
        check_result: None,
    }
}

/// The columns the loaded rows will have (service_client_id added when the
/// load names one).
fn loaded_columns(context: &LoadContext) -> Result<Vec<Column>, String> {
    let files = staged_files::list_files().map_err(capability)?;
    let first = files
        .iter()
        .find(|f| f.uploaded)
        .ok_or("no uploaded file reached this step")?;
    let mut columns = staged_files::parquet_columns(&first.file_key).map_err(capability)?;
    if context.load_as_service_client_id.is_some()
        && !columns.iter().any(|c| c.name == "service_client_id")
    {
        columns.push(Column {
            name: "service_client_id".into(),
            sql_type: "bigint".into(),
            nullable: false,
        });
    }
    Ok(columns)
}

impl Guest for MatchSchema {
    fn run(context: LoadContext, _config: String) -> Result<Outcome, String> {
        let loaded = loaded_columns(&context)?;
        let mut items = Vec::new();
        match lake_schema::table_columns().map_err(capability)? {
            None => {
                for partition in &context.partitions {
                    if !loaded.iter().any(|c| &c.name == partition) {
                        items.push(item(
                            "MISSING_COLUMN",
                            format!("Partition column {partition} is not a column of the uploaded files."),
                        ));
                    }
                }
            }
            Some(table) => {
                let table: Vec<&Column> = table
                    .iter()
                    .filter(|c| !ADDED_COLUMNS.contains(&c.name.as_str()))
                    .collect();
                for column in &table {
                    match loaded.iter().find(|c| c.name == column.name) {
                        None => items.push(item(
                            "MISSING_COLUMN",
                            format!(
                                "Column {} of table {} is missing from the uploaded files.",
                                column.name, context.table_name
                            ),
                        )),
                        Some(found) if found.sql_type != column.sql_type => items.push(item(
                            "COLUMN_TYPE_MISMATCH",
                            format!(
                                "Column {} is {} in the uploaded files but {} in table {}.",
                                column.name, found.sql_type, column.sql_type, context.table_name
                            ),
                        )),
                        Some(_) => {}
                    }
                }
                for column in &loaded {
                    if !table.iter().any(|c| c.name == column.name) {
                        items.push(item(
                            "UNEXPECTED_COLUMN",
                            format!(
                                "Column {} does not exist in table {}.",
                                column.name, context.table_name
                            ),
                        ));
                    }
                }
            }
        }
        if items.is_empty() {
            Ok(Outcome::Pass)
        } else {
            Ok(Outcome::Fail(Failure {
                error_type: "ValidationError".into(),
                items,
            }))
        }
    }
}

export!(MatchSchema);
