//! Step 6 of the default load pipeline (spec "Rows are inserted; each gets
//! svc$load_id"). Refuses more than 100 distinct partition value
//! combinations (TooManyPartitions), then asks the host to append the staged
//! rows; the host writes them and commits them with the load's SUCCESS in one
//! catalog transaction.
//!
//! Grants: staged-sql, lake-append, log.

wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    lake_append,
    log::{self, Level},
    staged_sql,
    types::{CapabilityError, ErrorItem, Failure},
};

struct Insert;

/// The spec's limit on partition value combinations per load.
const MAX_PARTITION_COMBINATIONS: u32 = 100;

fn capability(e: CapabilityError) -> String {
    match e {
        CapabilityError::NotGranted(why) | CapabilityError::Failed(why) => why,
    }
}

impl Guest for Insert {
    fn run(context: LoadContext, _config: String) -> Result<Outcome, String> {
        let mut keys: Vec<String> = context.partitions.clone();
        if context.load_as_service_client_id.is_none() {
            keys.insert(0, "service_client_id".into());
        }
        if !keys.is_empty() {
            let list = keys.join(", ");
            let combinations = staged_sql::query(
                &format!("SELECT {list} FROM staged GROUP BY {list}"),
                MAX_PARTITION_COMBINATIONS + 1,
            )
            .map_err(capability)?;
            if combinations.len() as u32 > MAX_PARTITION_COMBINATIONS {
                return Ok(Outcome::Fail(Failure {
                    error_type: "TooManyPartitions".into(),
                    items: vec![ErrorItem {
                        error_type: "TooManyPartitions".into(),
                        error_message: format!(
                            "The rows have more than {MAX_PARTITION_COMBINATIONS} distinct combinations of {list}."
                        ),
                        check_result: None,
                    }],
                }));
            }
        }
        let rows = lake_append::append_staged().map_err(capability)?;
        log::write(Level::Info, &format!("appended {rows} rows"));
        Ok(Outcome::Pass)
    }
}

export!(Insert);
