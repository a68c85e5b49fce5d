//! Step 2 of the default load pipeline (spec "Service client rules are
//! enforced per row"). The rows' service client comes either from the files'
//! service_client_id column or from load_as_service_client_id, never both and
//! never neither (ServiceClientError); load_as_service_client_id must be a
//! service client the caller may load (PermissionsError); every row's
//! service client must be one the caller may load (ServiceClientError, with
//! SERVICE_CLIENT_MISMATCH items naming the clients).
//!
//! Grants: staged-files, staged-sql, log.

wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    staged_files, staged_sql,
    types::{CapabilityError, ErrorItem, Failure},
};

struct EnforceServiceClients;

/// How many distinct service clients are read back at most.
const MAX_CLIENTS: u32 = 10_000;

fn fail(error_type: &str, item_type: &str, message: String) -> Outcome {
    Outcome::Fail(Failure {
        error_type: error_type.into(),
        items: vec![ErrorItem {
            error_type: item_type.into(),
            error_message: message,
            check_result: None,
        }],
    })
}

fn capability(e: CapabilityError) -> String {
    match e {
        CapabilityError::NotGranted(why) | CapabilityError::Failed(why) => why,
    }
}

fn may_load(context: &LoadContext, client: i64) -> bool {
    context.any_service_client || context.allowed_service_clients.contains(&client)
}

impl Guest for EnforceServiceClients {
    fn run(context: LoadContext, _config: String) -> Result<Outcome, String> {
        let files = staged_files::list_files().map_err(capability)?;
        let first = files
            .iter()
            .find(|f| f.uploaded)
            .ok_or("no uploaded file reached this step")?;
        let columns = staged_files::parquet_columns(&first.file_key).map_err(capability)?;
        let in_files = columns.iter().any(|c| c.name == "service_client_id");
        match (&context.load_as_service_client_id, in_files) {
            (Some(_), true) => {
                return Ok(fail(
                    "ServiceClientError",
                    "SERVICE_CLIENT_MISMATCH",
                    "The files have a service_client_id column and load_as_service_client_id was given; use one of them.".into(),
                ));
            }
            (None, false) => {
                return Ok(fail(
                    "ServiceClientError",
                    "SERVICE_CLIENT_MISMATCH",
                    "The files have no service_client_id column and no load_as_service_client_id was given.".into(),
                ));
            }
            (Some(text), false) => {
                let allowed = text
                    .trim()
                    .parse::<i64>()
                    .is_ok_and(|c| may_load(&context, c));
                if !allowed {
                    return Ok(fail(
                        "PermissionsError",
                        "SERVICE_CLIENT_MISMATCH",
                        format!("You may not load rows for service client {text}."),
                    ));
                }
                return Ok(Outcome::Pass);
            }
            (None, true) => {}
        }
        let rows = staged_sql::query(
            "SELECT CAST(service_client_id AS VARCHAR) FROM staged GROUP BY service_client_id",
            MAX_CLIENTS,
        )
        .map_err(capability)?;
        if rows.len() as u32 >= MAX_CLIENTS {
            return Ok(fail(
                "ServiceClientError",
                "SERVICE_CLIENT_MISMATCH",
                format!(
                    "The rows belong to {MAX_CLIENTS} or more service clients; load them in smaller loads."
                ),
            ));
        }
        let mut refused: Vec<String> = Vec::new();
        for row in rows {
            match row.into_iter().next().flatten() {
                None => refused.push("NULL".into()),
                Some(text) => {
                    if !text.parse::<i64>().is_ok_and(|c| may_load(&context, c)) {
                        refused.push(text);
                    }
                }
            }
        }
        if refused.is_empty() {
            Ok(Outcome::Pass)
        } else {
            refused.sort();
            Ok(fail(
                "ServiceClientError",
                "SERVICE_CLIENT_MISMATCH",
                format!(
                    "Rows belong to service clients you may not load: {}.",
                    refused.join(", ")
                ),
            ))
        }
    }
}

export!(EnforceServiceClients);
