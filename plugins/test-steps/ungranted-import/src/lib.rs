//! A test step that calls imports whatever its grants: it reports what the
//! host answered, so a test can see that an ungranted capability gives an
//! error and no data.

wit_bindgen::generate!({ path: "../../../wit", world: "step" });

use lakehost::pipeline::{
    lake_append, lake_schema, staged_files, staged_sql,
    types::{CapabilityError, ErrorItem, Failure},
};

struct UngrantedImport;

fn describe<T: std::fmt::Debug>(name: &str, answer: Result<T, CapabilityError>) -> ErrorItem {
    let text = match answer {
        Ok(data) => format!("{name}: data {data:?}"),
        Err(CapabilityError::NotGranted(why)) => format!("{name}: not granted: {why}"),
        Err(CapabilityError::Failed(why)) => format!("{name}: failed: {why}"),
    };
    ErrorItem {
        error_type: "INTERNAL_ERROR".into(),
        error_message: text,
        check_result: None,
    }
}

impl Guest for UngrantedImport {
    fn run(_context: LoadContext, _config: String) -> Result<Outcome, String> {
        let items = vec![
            describe("list-files", staged_files::list_files()),
            describe(
                "query",
                staged_sql::query("SELECT count(*) FROM staged", 10),
            ),
            describe("table-columns", lake_schema::table_columns()),
            describe("append-staged", lake_append::append_staged()),
        ];
        Ok(Outcome::Fail(Failure {
            error_type: "InternalError".into(),
            items,
        }))
    }
}

export!(UngrantedImport);
