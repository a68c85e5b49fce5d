//! Column typing: the spec's ColumnInfo of a schema, with the SQL type
//! names, precisions and scales SQL engines report. Query results, load
//! steps (a staged file's columns, a table's columns) and every other front
//! end describe columns through this one mapping.

use datafusion::arrow::datatypes::{DataType, Schema};
use serde::{Deserialize, Serialize};

/// One result column as the spec's ColumnInfo describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultColumn {
    pub name: String,
    /// Lower-case SQL type name: varchar, bigint, double, decimal, date, timestamp, ...
    pub sql_type: String,
    pub precision: i64,
    pub scale: i64,
    pub nullable: bool,
}

impl ResultColumn {
    /// Text columns compare case-sensitively; others have no case.
    pub fn case_sensitive(&self) -> bool {
        self.sql_type == "varchar"
    }
}

/// The ColumnInfo of each of `schema`'s columns.
pub fn columns_of(schema: &Schema) -> Vec<ResultColumn> {
    schema
        .fields()
        .iter()
        .map(|field| {
            let (sql_type, precision, scale) = sql_type(field.data_type());
            ResultColumn {
                name: field.name().clone(),
                sql_type: sql_type.to_string(),
                precision,
                scale,
                nullable: field.is_nullable(),
            }
        })
        .collect()
}

/// The SQL type name, precision and scale of an Arrow type, with the figures
/// SQL engines report for them (varchar's precision is its maximum length).
pub fn sql_type(data_type: &DataType) -> (&'static str, i64, i64) {
    use DataType::*;
    match data_type {
        Boolean => ("boolean", 0, 0),
        Int8 => ("tinyint", 3, 0),
        Int16 | UInt8 => ("smallint", 5, 0),
        Int32 | UInt16 => ("integer", 10, 0),
        Int64 | UInt32 => ("bigint", 19, 0),
        UInt64 => ("decimal", 20, 0),
        Float16 | Float32 => ("float", 7, 0),
        Float64 => ("double", 17, 0),
        Decimal32(p, s) | Decimal64(p, s) | Decimal128(p, s) | Decimal256(p, s) => {
            ("decimal", i64::from(*p), i64::from(*s))
        }
        Utf8 | LargeUtf8 | Utf8View => ("varchar", 2_147_483_647, 0),
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => ("varbinary", 1_073_741_824, 0),
        Date32 | Date64 => ("date", 0, 0),
        Timestamp(unit, _) => ("timestamp", timestamp_digits(unit), 0),
        Time32(_) | Time64(_) => ("time", 0, 0),
        Interval(_) | Duration(_) => ("interval", 0, 0),
        List(_) | LargeList(_) | ListView(_) | LargeListView(_) | FixedSizeList(_, _) => {
            ("array", 0, 0)
        }
        Struct(_) => ("row", 0, 0),
        Map(_, _) => ("map", 0, 0),
        Dictionary(_, value) => sql_type(value),
        Null => ("unknown", 0, 0),
        _ => ("varchar", 2_147_483_647, 0),
    }
}

fn timestamp_digits(unit: &datafusion::arrow::datatypes::TimeUnit) -> i64 {
    use datafusion::arrow::datatypes::TimeUnit::*;
    match unit {
        Second => 0,
        Millisecond => 3,
        Microsecond => 6,
        Nanosecond => 9,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{Field, TimeUnit};

    use super::*;

    #[test]
    fn column_info_uses_sql_type_names() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, true),
            Field::new("fare", DataType::Float64, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]);
        let columns = columns_of(&schema);
        let described: Vec<(&str, &str, i64, i64, bool)> = columns
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.sql_type.as_str(),
                    c.precision,
                    c.scale,
                    c.nullable,
                )
            })
            .collect();
        assert_eq!(
            described,
            vec![
                ("id", "bigint", 19, 0, false),
                ("name", "varchar", 2_147_483_647, 0, true),
                ("fare", "double", 17, 0, true),
                ("amount", "decimal", 12, 2, true),
                ("at", "timestamp", 6, 0, true),
            ]
        );
        assert!(columns[1].case_sensitive() && !columns[0].case_sensitive());
    }
}
