//! Postgres functions that catalog queries call (SQLAlchemy's inspector
//! among them) and neither DataFusion nor datafusion-pg-catalog has, with
//! what they answer for a lake: it has no sequences (`pg_get_serial_sequence`
//! is NULL) and one set of collations (`pg_collation_is_visible` is true);
//! `json_build_object` builds its JSON text.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Array, ArrayRef, StringBuilder},
        compute::cast,
        datatypes::DataType,
    },
    common::{Result, ScalarValue, exec_err},
    logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
    },
    prelude::SessionContext,
};

/// The functions `register` adds.
pub const NAMES: [&str; 3] = [
    "pg_get_serial_sequence",
    "pg_collation_is_visible",
    "json_build_object",
];

/// Registers the functions in `context` (a catalog session).
pub fn register(context: &SessionContext) {
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_get_serial_sequence",
        2,
        ScalarValue::Utf8(None),
    )));
    context.register_udf(ScalarUDF::new_from_impl(Constant::new(
        "pg_collation_is_visible",
        1,
        ScalarValue::Boolean(Some(true)),
    )));
    context.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::new()));
}

/// A function of `arity` arguments of any type that answers `value`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    signature: Signature,
    value: ScalarValue,
}

impl Constant {
    fn new(name: &'static str, arity: usize, value: ScalarValue) -> Self {
        Self {
            name,
            signature: Signature::any(arity, Volatility::Stable),
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
        register(&context);
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
        register(&context);
        let rows = context
            .sql("SELECT json_build_object('a', (SELECT 1)) FROM (VALUES (1), (2), (3)) t(x)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
        let odd = SessionContext::new();
        register(&odd);
        let refused = match odd.sql("SELECT json_build_object('a')").await {
            Ok(frame) => frame.collect().await.is_err(),
            Err(_) => true,
        };
        assert!(refused, "an odd argument count is an error");
    }
}
