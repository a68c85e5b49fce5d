//! An example step for an org's own manifest, and the template to copy for a
//! new one: it fails a load whose files have a column the org forbids.
//!
//! ```toml
//! [[steps]]
//! name = "reject_columns"
//! component = "builtin:reject_columns"
//! grants = ["staged-files", "log"]
//! [steps.config]
//! forbidden = ["ssn", "email"]
//! ```
//!
//! Grants: staged-files, log.

// The bindings of the `step` world: `Guest`, `LoadContext`, `Outcome`, and
// the imports under `lakehost::pipeline`.
wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    log::{self, Level},
    staged_files,
    types::{CapabilityError, ErrorItem, Failure},
};

struct RejectColumns;

impl Guest for RejectColumns {
    /// `config` is the step's `[steps.config]` table as JSON. Return
    /// `Ok(Outcome::Fail(..))` to fail the load with an ErrorType of the spec;
    /// an `Err` (or a trap) fails it with InternalError.
    fn run(context: LoadContext, config: String) -> Result<Outcome, String> {
        let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let forbidden: Vec<&str> = config["forbidden"]
            .as_array()
            .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        let mut items = Vec::new();
        for file in staged_files::list_files().map_err(capability)? {
            if !file.uploaded {
                continue;
            }
            for column in staged_files::parquet_columns(&file.file_key).map_err(capability)? {
                if forbidden.contains(&column.name.as_str()) {
                    items.push(ErrorItem {
                        error_type: "UNEXPECTED_COLUMN".into(),
                        error_message: format!(
                            "File {} has the column {}, which may not be loaded into {}.",
                            file.file_key, column.name, context.table_name
                        ),
                        check_result: None,
                    });
                }
            }
        }
        if items.is_empty() {
            log::write(Level::Info, "no forbidden columns");
            Ok(Outcome::Pass)
        } else {
            Ok(Outcome::Fail(Failure {
                error_type: "ValidationError".into(),
                items,
            }))
        }
    }
}

fn capability(e: CapabilityError) -> String {
    match e {
        CapabilityError::NotGranted(why) | CapabilityError::Failed(why) => why,
    }
}

export!(RejectColumns);
