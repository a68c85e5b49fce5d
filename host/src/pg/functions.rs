//! Postgres functions that catalog queries call (SQLAlchemy's inspector
//! and pgjdbc's `DatabaseMetaData` among them) and neither DataFusion nor
//! datafusion-pg-catalog has, or has with an answer of one row whatever the
//! rows it is called for; with what they answer for a lake:
//!
//! - it has no sequences (`pg_get_serial_sequence` is NULL), no indexes
//!   (`pg_get_indexdef` is NULL), no column defaults (`pg_get_expr` of
//!   NULL is NULL) and one set of collations (`pg_collation_is_visible` is
//!   true); `json_build_object` builds its JSON text;
//! - `current_database()` is the database connected to, `current_schema()`
//!   is `public`, `current_schemas(implicit)` is `{pg_catalog,public}` (or
//!   `{public}`), `session_user` (and `current_user`) `postgres`,
//!   `pg_backend_pid()` 1: one value for every row (datafusion-pg-catalog's
//!   answer one row, and fail inside a join).

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Array, ArrayRef, ListBuilder, StringBuilder},
        compute::cast,
        datatypes::{DataType, Field},
    },
    common::{Result, ScalarValue, exec_err},
    logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
        Volatility,
    },
    prelude::SessionContext,
};

/// The functions `register` adds that may answer more than they are given
/// (`json_build_object`): bounded as the engine's growing functions are.
pub const NAMES: [&str; 3] = [
    "pg_get_serial_sequence",
    "pg_collation_is_visible",
    "json_build_object",
];

/// Catalog functions (`register`'s, `catalog/`'s and datafusion-pg-catalog's)
/// whose value has a fixed size: never bounded, so the planner folds them into
/// constants where Postgres would (`generate_series(1,
/// array_upper(current_schemas(false), 1))`, a table function, takes only
/// constants).
pub const FIXED_SIZE: [&str; 13] = [
    "current_database",
    "current_schema",
    "current_schemas",
    "session_user",
    "pg_backend_pid",
    "pg_get_expr",
    "pg_get_indexdef",
    "array_upper",
    "array_lower",
    "has_table_privilege",
    "has_any_column_privilege",
    "has_schema_privilege",
    "has_database_privilege",
];

/// The schemas `current_schemas(true)` lists: Postgres' implicit
/// `pg_catalog`, then the search path.
const SEARCH_PATH_WITH_IMPLICIT: [&str; 2] = ["pg_catalog", "public"];

/// Registers the functions in `context` (a catalog session on `database`).
pub fn register(context: &SessionContext, database: &str) {
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_get_serial_sequence",
        &[2],
        ScalarValue::Utf8(None),
    )));
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_collation_is_visible",
        &[1],
        ScalarValue::Boolean(Some(true)),
    )));
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_get_indexdef",
        &[1, 3],
        ScalarValue::Utf8(None),
    )));
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "current_database",
        &[0],
        ScalarValue::Utf8(Some(database.to_string())),
    )));
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "current_schema",
        &[0],
        ScalarValue::Utf8(Some("public".to_string())),
    )));
    // The owner of everything in the catalog (`pg_get_userbyid`'s answer).
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "session_user",
        &[0],
        ScalarValue::Utf8(Some("postgres".to_string())),
    )));
    // datafusion-pg-catalog's (`pg_stat_gssapi` shows it too).
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_backend_pid",
        &[0],
        ScalarValue::Int32(Some(1)),
    )));
    context.register_udf(ScalarUDF::new_from_impl(CurrentSchemas::new()));
    context.register_udf(ScalarUDF::new_from_impl(PgGetExpr::new()));
    context.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::new()));
}

/// A signature of `arities` arguments of any type.
fn any_of(arities: &[usize], volatility: Volatility) -> Signature {
    let signatures = arities
        .iter()
        .map(|&arity| match arity {
            0 => TypeSignature::Nullary,
            n => TypeSignature::Any(n),
        })
        .collect();
    Signature::one_of(signatures, volatility)
}

/// A function of `arities` arguments of any type that answers `value`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Constant {
    name: &'static str,
    signature: Signature,
    value: ScalarValue,
}

impl Constant {
    pub(super) fn new(name: &'static str, arities: &[usize], value: ScalarValue) -> Self {
        Self {
            name,
            signature: any_of(arities, Volatility::Stable),
            value,
        }
    }
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.value.data_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

/// `current_schemas(implicit)`: the search path, with `pg_catalog` first
/// when `implicit`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSchemas {
    signature: Signature,
}

impl CurrentSchemas {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::Boolean], Volatility::Stable),
        }
    }

    fn schemas(implicit: bool) -> &'static [&'static str] {
        if implicit {
            &SEARCH_PATH_WITH_IMPLICIT
        } else {
            &SEARCH_PATH_WITH_IMPLICIT[1..]
        }
    }
}

impl ScalarUDFImpl for CurrentSchemas {
    fn name(&self) -> &str {
        "current_schemas"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Utf8,
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [implicit] = args.args.as_slice() else {
            return exec_err!("current_schemas takes one boolean");
        };
        if let ColumnarValue::Scalar(ScalarValue::Boolean(implicit)) = implicit {
            let schemas = Self::schemas(implicit.unwrap_or(false))
                .iter()
                .map(|schema| ScalarValue::Utf8(Some(schema.to_string())))
                .collect::<Vec<_>>();
            return Ok(ColumnarValue::Scalar(ScalarValue::List(
                ScalarValue::new_list_nullable(&schemas, &DataType::Utf8),
            )));
        }
        let implicit = implicit.to_array(args.number_rows)?;
        let implicit = implicit
            .as_any()
            .downcast_ref::<datafusion::arrow::array::BooleanArray>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Execution(
                    "current_schemas takes one boolean".to_string(),
                )
            })?;
        let mut lists = ListBuilder::new(StringBuilder::new());
        for row in 0..implicit.len() {
            let implicit = implicit.is_valid(row) && implicit.value(row);
            for schema in Self::schemas(implicit) {
                lists.values().append_value(schema);
            }
            lists.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(lists.finish())))
    }
}

/// `pg_get_expr(expression, relation[, pretty])`: NULL for NULL (a column
/// with no default, a relation with no partition bound), an empty text for
/// the expressions datafusion-pg-catalog's static tables hold (it has no
/// way to show them).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgGetExpr {
    signature: Signature,
}

impl PgGetExpr {
    fn new() -> Self {
        Self {
            signature: any_of(&[2, 3], Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for PgGetExpr {
    fn name(&self) -> &str {
        "pg_get_expr"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let expressions = args.args[0].to_array(args.number_rows)?;
        let mut texts = StringBuilder::with_capacity(expressions.len(), 0);
        for row in 0..expressions.len() {
            if expressions.is_null(row) {
                texts.append_null();
            } else {
                texts.append_value("");
            }
        }
        Ok(ColumnarValue::Array(Arc::new(texts.finish())))
    }
}

/// `json_build_object(key, value, ...)`: a JSON object's text per row.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl JsonBuildObject {
    fn new() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// Row `row` of `array` as a JSON value: numbers and booleans as
/// themselves, NULL as null, everything else as its text.
fn json_value(array: &ArrayRef, text: &ArrayRef, row: usize) -> serde_json::Value {
    if array
        .logical_nulls()
        .is_some_and(|nulls| nulls.is_null(row))
    {
        return serde_json::Value::Null;
    }
    let text = text
        .as_any()
        .downcast_ref::<datafusion::arrow::array::StringArray>()
        .map(|strings| strings.value(row).to_string())
        .unwrap_or_default();
    let data_type = array.data_type();
    if data_type.is_numeric() || *data_type == DataType::Boolean {
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    } else {
        serde_json::Value::String(text)
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return exec_err!("json_build_object takes keys and values in pairs");
        }
        let rows = args.number_rows;
        // Every argument as `rows` values (a scalar repeated), so each row
        // of the call has one.
        let arrays = args
            .args
            .iter()
            .map(|arg| arg.to_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let texts = arrays
            .iter()
            .map(|array| cast(array, &DataType::Utf8))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut built = StringBuilder::new();
        for row in 0..rows {
            let mut object = serde_json::Map::new();
            for pair in 0..arrays.len() / 2 {
                let key = match json_value(&arrays[2 * pair], &texts[2 * pair], row) {
                    serde_json::Value::String(key) => key,
                    other => other.to_string(),
                };
                let value = json_value(&arrays[2 * pair + 1], &texts[2 * pair + 1], row);
                object.insert(key, value);
            }
            built.append_value(serde_json::Value::Object(object).to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(built.finish())))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::{array::StringArray, record_batch::RecordBatch};

    use super::*;

    async fn one_value(sql: &str) -> String {
        let context = SessionContext::new();
        register(&context, "demo");
        let batches = context.sql(sql).await.unwrap().collect().await.unwrap();
        let column = cast(batches[0].column(0), &DataType::Utf8).unwrap();
        let strings = column.as_any().downcast_ref::<StringArray>().unwrap();
        if strings.is_null(0) {
            "NULL".to_string()
        } else {
            strings.value(0).to_string()
        }
    }

    #[tokio::test]
    async fn the_functions_answer_as_postgres_does_for_a_lake() {
        assert_eq!(
            one_value(
                "SELECT json_build_object('start', 1, 'cycle', false, 'name', 'x', 'n', NULL)"
            )
            .await,
            r#"{"cycle":false,"n":null,"name":"x","start":1}"#
        );
        assert_eq!(
            one_value("SELECT pg_get_serial_sequence('t', 'c')").await,
            "NULL"
        );
        assert_eq!(
            one_value("SELECT pg_collation_is_visible(100)").await,
            "true"
        );
        // Scalar arguments over many rows: one object per row.
        let context = SessionContext::new();
        register(&context, "demo");
        let rows = context
            .sql("SELECT json_build_object('a', (SELECT 1)) FROM (VALUES (1), (2), (3)) t(x)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
        // One value for every row, where datafusion-pg-catalog's answered
        // one row and failed in a join.
        let context = SessionContext::new();
        register(&context, "lab.demo");
        let rows = context
            .sql(
                "SELECT current_database() AS d, current_schema() AS s, \
                 current_schemas(true)[1] AS implicit, current_schemas(false)[1] AS path, \
                 pg_get_expr(CASE WHEN x > 1 THEN 'e' END, 1) IS NULL AS no_default, \
                 pg_get_indexdef(1, 1, false) IS NULL AS no_index, \
                 pg_backend_pid() AS pid \
                 FROM (VALUES (1), (2), (3)) t(x) WHERE x <> 2",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string();
        assert!(
            text.contains(
                "| lab.demo | public | pg_catalog | public | true       | true     | 1   |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| lab.demo | public | pg_catalog | public | false      | true     | 1   |"
            ),
            "{text}"
        );
        let odd = SessionContext::new();
        register(&odd, "demo");
        let refused = match odd.sql("SELECT json_build_object('a')").await {
            Ok(frame) => frame.collect().await.is_err(),
            Err(_) => true,
        };
        assert!(refused, "an odd argument count is an error");
    }
}
