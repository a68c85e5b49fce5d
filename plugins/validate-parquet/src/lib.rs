//! Step 1 of the default load pipeline (spec "Pipeline steps after commit":
//! files are collected and validated). Every requested file must have been
//! uploaded and be parquet; column names must be lowercase letters, digits
//! and underscores; all files must have the same columns.
//!
//! Grants: staged-files, log.

wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    log::{self, Level},
    staged_files,
    types::{CapabilityError, Column, ErrorItem, Failure},
};

struct ValidateParquet;

fn item(error_type: &str, message: String) -> ErrorItem {
    ErrorItem {
        error_type: error_type.into(),
        error_message: message,
        check_result: None,
    }
}

fn fail(error_type: &str, items: Vec<ErrorItem>) -> Outcome {
    Outcome::Fail(Failure {
        error_type: error_type.into(),
        items,
    })
}

fn is_column_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn capability(e: CapabilityError) -> String {
    match e {
        CapabilityError::NotGranted(why) | CapabilityError::Failed(why) => why,
    }
}

impl Guest for ValidateParquet {
    fn run(_context: LoadContext, _config: String) -> Result<Outcome, String> {
        let files = staged_files::list_files().map_err(capability)?;
        let missing: Vec<ErrorItem> = files
            .iter()
            .filter(|f| !f.uploaded)
            .map(|f| {
                item(
                    "MISSING_FILE",
                    format!("File {} was never successfully uploaded.", f.file_key),
                )
            })
            .collect();
        if files.iter().all(|f| !f.uploaded) {
            let mut items = vec![item(
                "MISSING_FILE",
                "No files were uploaded before the commit.".into(),
            )];
            items.extend(missing);
            return Ok(fail("NoFilesUploaded", items));
        }
        if !missing.is_empty() {
            return Ok(fail("NoFilesUploaded", missing));
        }

        let mut problems = Vec::new();
        let mut first: Option<(String, Vec<Column>)> = None;
        for file in &files {
            let columns = match staged_files::parquet_columns(&file.file_key) {
                Ok(columns) => columns,
                Err(CapabilityError::Failed(why)) => {
                    problems.push(item(
                        "INVALID_PARQUET",
                        format!("File {} is not a valid parquet file: {why}", file.file_key),
                    ));
                    continue;
                }
                Err(other) => return Err(capability(other)),
            };
            for column in &columns {
                if !is_column_name(&column.name) {
                    problems.push(item(
                        "INVALID_PARQUET",
                        format!(
                            "File {}: column name {:?} may contain only lowercase letters, digits and underscores.",
                            file.file_key, column.name
                        ),
                    ));
                }
            }
            match &first {
                None => first = Some((file.file_key.clone(), columns)),
                Some((first_key, first_columns)) => {
                    // Columns are matched by name: files written by different
                    // tools (a DataFrame, a CSV reader) order them differently.
                    let names =
                        |cs: &[Column]| cs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
                    let sorted = |cs: &[Column]| {
                        let mut names = names(cs);
                        names.sort();
                        names
                    };
                    if sorted(first_columns) != sorted(&columns) {
                        problems.push(item(
                            "INVALID_PARQUET",
                            format!(
                                "File {} has the columns {:?}, file {first_key} has {:?}; all files of a load need the same columns.",
                                file.file_key,
                                names(&columns),
                                names(first_columns)
                            ),
                        ));
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Ok(fail("ParquetValidation", problems));
        }
        log::write(
            Level::Info,
            &format!("{} parquet files are valid", files.len()),
        );
        Ok(Outcome::Pass)
    }
}

export!(ValidateParquet);
