//! The Postgres functions psql's `\d+`, `\dt+`, `\df`, SQLAlchemy 1.4's
//! inspector and dbt's catalog query call that neither DataFusion,
//! datafusion-pg-catalog nor `pg::functions` has, with what they answer for
//! a lake:
//!
//! - no comments: `obj_description`, `col_description` and
//!   `shobj_description` are NULL;
//! - everything listed is on the search path (`pg_catalog`, `public`, or
//!   named by schema): `pg_function_is_visible` and `pg_type_is_visible`
//!   are true; a session has no temporary schemas, so
//!   `pg_is_other_temp_schema` is false;
//! - sizes: the catalog never reads the lake, so `pg_table_size` and
//!   `pg_indexes_size` are NULL (unknown), and `pg_size_pretty` shows a
//!   size as Postgres does;
//! - `current_setting(name)` is the setting `SHOW name` answers;
//! - `pg_get_function_result` and `pg_get_function_arguments` are NULL:
//!   the functions `pg_proc` lists are Postgres' own, whose signatures the
//!   static tables do not spell out.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Array, AsArray, StringBuilder},
        compute::cast,
        datatypes::{DataType, Int64Type},
    },
    common::{Result, ScalarValue, exec_err},
    logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
        Volatility,
    },
    prelude::SessionContext,
};

use crate::pg::{functions::Constant, settings::setting};

/// Registers the functions in `context` (a catalog session).
pub fn register(context: &SessionContext) {
    let constants = [
        ("obj_description", &[1, 2][..], ScalarValue::Utf8(None)),
        ("col_description", &[2], ScalarValue::Utf8(None)),
        ("shobj_description", &[2], ScalarValue::Utf8(None)),
        (
            "pg_function_is_visible",
            &[1],
            ScalarValue::Boolean(Some(true)),
        ),
        ("pg_type_is_visible", &[1], ScalarValue::Boolean(Some(true))),
        (
            "pg_is_other_temp_schema",
            &[1],
            ScalarValue::Boolean(Some(false)),
        ),
        ("pg_table_size", &[1], ScalarValue::Int64(None)),
        ("pg_indexes_size", &[1], ScalarValue::Int64(None)),
        ("pg_get_function_result", &[1], ScalarValue::Utf8(None)),
        ("pg_get_function_arguments", &[1], ScalarValue::Utf8(None)),
    ];
    for (name, arities, value) in constants {
        context.register_udf(ScalarUDF::new_from_impl(Constant::new(
            name, arities, value,
        )));
    }
    context.register_udf(ScalarUDF::new_from_impl(PgSizePretty::new()));
    context.register_udf(ScalarUDF::new_from_impl(CurrentSetting::new()));
}

/// `current_setting(name[, missing_ok])`: the setting `SHOW` answers
/// (`pg::settings`); an unknown one is an error, or NULL when missing_ok.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
}

impl CurrentSetting {
    fn new() -> Self {
        Self {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let names = cast(&args.args[0].to_array(rows)?, &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let missing_ok = match args.args.get(1) {
            Some(flag) => Some(cast(&flag.to_array(rows)?, &DataType::Boolean)?),
            None => None,
        };
        let mut values = StringBuilder::with_capacity(rows, 16 * rows);
        for row in 0..rows {
            if names.is_null(row) {
                values.append_null();
                continue;
            }
            let name = names.value(row);
            match setting(name) {
                Some(setting) => values.append_value(setting.value),
                None if missing_ok
                    .as_ref()
                    .is_some_and(|ok| ok.as_boolean().value(row)) =>
                {
                    values.append_null()
                }
                None => return exec_err!("unrecognized configuration parameter \"{name}\""),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(values.finish())))
    }
}

/// `pg_size_pretty(bytes)`: bytes, kB, MB, GB, TB or PB, each unit from ten
/// of it on, rounded half away from zero, as Postgres 15 shows sizes.
pub fn size_pretty(bytes: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    const UNITS: [&str; 5] = ["kB", "MB", "GB", "TB", "PB"];
    if bytes.abs() < LIMIT {
        return format!("{bytes} bytes");
    }
    // One bit more than the unit, to round with.
    let mut halves = bytes >> 9;
    for (i, unit) in UNITS.iter().enumerate() {
        if halves.abs() < LIMIT * 2 - 1 || i == UNITS.len() - 1 {
            let rounded = (halves + if halves < 0 { -1 } else { 1 }) / 2;
            return format!("{rounded} {unit}");
        }
        halves >>= 10;
    }
    unreachable!("the last unit answers")
}

/// `pg_size_pretty(bigint)`: see [`size_pretty`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSizePretty {
    signature: Signature,
}

impl PgSizePretty {
    fn new() -> Self {
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Exact(vec![DataType::Int64])],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for PgSizePretty {
    fn name(&self) -> &str {
        "pg_size_pretty"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [bytes] = args.args.as_slice() else {
            return exec_err!("pg_size_pretty takes one size in bytes");
        };
        let bytes = cast(&bytes.to_array(args.number_rows)?, &DataType::Int64)?;
        let bytes = bytes.as_primitive::<Int64Type>();
        let mut shown = StringBuilder::with_capacity(bytes.len(), 16 * bytes.len());
        for row in 0..bytes.len() {
            if bytes.is_null(row) {
                shown.append_null();
            } else {
                shown.append_value(size_pretty(bytes.value(row)));
            }
        }
        Ok(ColumnarValue::Array(Arc::new(shown.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shown_as_postgres_shows_them() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(10239), "10239 bytes");
        assert_eq!(size_pretty(10240), "10 kB");
        assert_eq!(size_pretty(10751), "10 kB");
        assert_eq!(size_pretty(10752), "11 kB");
        assert_eq!(size_pretty(-10752), "-11 kB");
        assert_eq!(size_pretty(8 * 1024 * 1024), "8192 kB");
        assert_eq!(size_pretty(20 * 1024 * 1024), "20 MB");
        assert_eq!(size_pretty(1 << 40), "1024 GB");
        assert_eq!(size_pretty(i64::MAX), "8192 PB");
    }

    #[tokio::test]
    async fn the_functions_answer_for_every_row() {
        let context = SessionContext::new();
        register(&context);
        let rows = context
            .sql(
                "SELECT pg_size_pretty(CAST(x AS BIGINT)) AS s, obj_description(x, 'pg_class') AS d, \
                 pg_is_other_temp_schema(x) AS t, pg_type_is_visible(x) AS v \
                 FROM (VALUES (1), (20000)) t(x) ORDER BY x",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string();
        assert!(text.contains("| 1 bytes | "), "{text}");
        assert!(text.contains("| 20 kB   |   | false | true |"), "{text}");
    }
}
