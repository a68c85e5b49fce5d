//! What a lake table looks like: its naming rules, its partition columns,
//! how its columns are stored and read, and `TableLayout`, the one way a new
//! table's layout is made (`CREATE TABLE [AS]`, loads, imports, daily
//! refreshes) or an existing table's is read back from the catalog.
//!
//! Every lake table is partitioned by `service_client_id` first (the access
//! decision reads it from the catalog, never from a file); tables filled by
//! loads and imports also by `svc$load_id`, then by the partitions the load
//! asked for. Files store plain string and binary types; reads use view types
//! unless a statement asks for plain ones (`StringColumns`). Queries see a
//! table made by SQL in its statement's column order, partition columns
//! included (`table_schema`); other tables list partition columns last.
//! This module never touches a file or the catalog.

use std::sync::Arc;

use datafusion::arrow::{
    array::{ArrayRef, RecordBatch, RecordBatchOptions},
    datatypes::{DataType, Field, FieldRef, Schema, SchemaRef},
    error::ArrowError,
};
use object_store::ObjectStore;

use super::{EngineError, plain_columns::plain_column, table_writer::TableWriter};
use crate::{
    auth::ServiceClientScope,
    lake,
    store::{self, catalog::LakeTable},
};

/// The service-client partition column every lake row carries.
pub const SERVICE_CLIENT_COLUMN: &str = "service_client_id";

/// The partition column loads fill with their id; SQL writes with the query id.
pub const LOAD_ID_COLUMN: &str = "svc$load_id";

/// The longest table name, column name or file key.
pub const MAX_NAME_CHARS: usize = 128;

/// Lowercase letters, digits and underscores, at most `MAX_NAME_CHARS` (the
/// spec's rule for column names and file keys).
pub fn is_plain_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_NAME_CHARS
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The spec's table_name rule: a plain name not starting or ending with an
/// underscore.
pub fn is_table_name(text: &str) -> bool {
    is_plain_name(text) && !text.starts_with('_') && !text.ends_with('_')
}

/// `is_table_name` with the engine's message.
pub fn check_table_name(name: &str) -> Result<(), EngineError> {
    if is_table_name(name) {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "table name '{name}' is not allowed: use lowercase letters, digits and underscores \
             (at most {MAX_NAME_CHARS}), not starting or ending with an underscore"
        )))
    }
}

/// Column names a lake table may have: lowercase letters, digits,
/// underscores and `$` (for `svc$load_id`). Uploaded files' columns meet the
/// spec's stricter rule in the load pipeline's `validate_parquet` step.
pub fn check_column_names(schema: &Schema) -> Result<(), EngineError> {
    for field in schema.fields() {
        let name = field.name();
        let allowed = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$');
        if !allowed {
            return Err(EngineError::Invalid(format!(
                "column name '{name}' is not allowed in a lake table: use lowercase letters, \
                 digits and underscores (alias the expression)"
            )));
        }
    }
    Ok(())
}

/// The type of a partition column: `service_client_id` is a bigint, the others
/// (`svc$load_id`, requested partitions) are strings.
pub fn partition_field(name: &str) -> FieldRef {
    let data_type = if name == SERVICE_CLIENT_COLUMN {
        DataType::Int64
    } else {
        DataType::Utf8
    };
    Arc::new(Field::new(name, data_type, false))
}

/// How a statement reads the string and binary columns of lake files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringColumns {
    /// As view types: no copy of the values out of the decoded pages, and
    /// fast filters, joins and grouping (DataFusion's own default).
    Views,
    /// As the plain types a client is sent: a result streamed to a client
    /// as it is read (Flight SQL) then needs no cast, a copy of every value.
    Plain,
}

impl StringColumns {
    /// The columns of lake files stored as `schema`, read this way.
    pub fn read_schema(self, schema: &Schema) -> SchemaRef {
        match self {
            Self::Views => with_view_types(schema),
            Self::Plain => Arc::new(without_view_types(schema)),
        }
    }
}

/// `schema` with its top-level string and binary columns as view types.
pub fn with_view_types(schema: &Schema) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8View))
            }
            DataType::Binary | DataType::LargeBinary => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::BinaryView))
            }
            _ => field.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A table's columns in the order its files are scanned: the columns in
/// its files, then its partition columns.
pub fn scan_schema(file_schema: &Schema, partition_columns: &[String]) -> Schema {
    let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
    fields.extend(partition_columns.iter().map(|name| partition_field(name)));
    Schema::new(fields)
}

/// Where each of a table's columns is in its `scan` schema, in the table's
/// order: the columns `column_order` names, as its `CREATE TABLE [AS]` gave
/// them, then any other in scan order (every column of a table with no
/// recorded order, a column added later).
pub fn column_positions(scan: &Schema, column_order: Option<&[String]>) -> Vec<usize> {
    let mut positions: Vec<usize> = Vec::with_capacity(scan.fields().len());
    for name in column_order.unwrap_or_default() {
        if let Ok(position) = scan.index_of(name)
            && !positions.contains(&position)
        {
            positions.push(position);
        }
    }
    let rest: Vec<usize> = (0..scan.fields().len())
        .filter(|position| !positions.contains(position))
        .collect();
    positions.extend(rest);
    positions
}

/// A table's columns as queries see them: its scan schema in the table's
/// order (`column_positions`).
pub fn table_schema(
    file_schema: &Schema,
    partition_columns: &[String],
    column_order: Option<&[String]>,
) -> Schema {
    let scan = scan_schema(file_schema, partition_columns);
    in_table_order(&scan, &column_positions(&scan, column_order))
}

/// The columns of `scan` at `positions` (from `column_positions`), in that order.
pub fn in_table_order(scan: &Schema, positions: &[usize]) -> Schema {
    let fields: Vec<FieldRef> = positions
        .iter()
        .map(|position| scan.fields()[*position].clone())
        .collect();
    Schema::new(fields)
}

/// `schema` with view types as the plain types the catalog stores.
pub fn without_view_types(schema: &Schema) -> Schema {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Utf8View => Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8)),
            DataType::BinaryView => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::Binary))
            }
            _ => field.clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// `batch` with the types of `schema` (view types made plain ones,
/// `plain_columns`).
pub fn plain_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| plain_column(column, field.data_type()))
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
}

/// A table's columns split into those stored in its files and its partition
/// columns (whose values live in the paths and the catalog), and the order
/// queries see them in (`LakeTable::column_order`).
#[derive(Debug, Clone)]
pub struct TableLayout {
    pub file_schema: SchemaRef,
    pub partition_columns: Vec<String>,
    pub column_order: Option<Vec<String>>,
}

impl TableLayout {
    /// A new table of rows written by SQL (CREATE TABLE AS, a daily
    /// refresh): partitioned by `service_client_id`, an integer column;
    /// queries see its columns in the statement's order.
    pub fn for_rows(schema: &Schema) -> Result<Self, EngineError> {
        let layout = Self::new(schema, vec![SERVICE_CLIENT_COLUMN.to_string()], false)?;
        let order = schema.fields().iter().map(|f| f.name().clone()).collect();
        Ok(Self {
            column_order: Some(order),
            ..layout
        })
    }

    /// A new table of loaded rows (a load, an import): partitioned by
    /// `service_client_id`, `svc$load_id`, then `extra_partitions`. Uploaded
    /// files may carry `service_client_id` as text (the load pipeline accepts
    /// it; the writer reads each value as a number).
    pub fn for_loads(schema: &Schema, extra_partitions: &[String]) -> Result<Self, EngineError> {
        let mut partitions = vec![
            SERVICE_CLIENT_COLUMN.to_string(),
            LOAD_ID_COLUMN.to_string(),
        ];
        partitions.extend(extra_partitions.iter().cloned());
        Self::new(schema, partitions, true)
    }

    /// The one way a new table's layout is made: view types stored as plain
    /// types, every column name allowed, a `service_client_id` column of
    /// integers (or, for loaded files, text).
    fn new(
        schema: &Schema,
        partition_columns: Vec<String>,
        service_client_as_text: bool,
    ) -> Result<Self, EngineError> {
        let schema = without_view_types(schema);
        check_column_names(&schema)?;
        let service_client = schema.field_with_name(SERVICE_CLIENT_COLUMN).map_err(|_| {
            EngineError::Invalid(
                "a lake table needs a service_client_id column: every lake row belongs to a service client"
                    .into(),
            )
        })?;
        let text = matches!(
            service_client.data_type(),
            DataType::Utf8 | DataType::LargeUtf8
        );
        let allowed = service_client.data_type().is_integer() || (service_client_as_text && text);
        if !allowed {
            return Err(EngineError::Invalid(format!(
                "service_client_id must be an integer column, not {}",
                service_client.data_type()
            )));
        }
        let file_fields: Vec<Field> = schema
            .fields()
            .iter()
            .filter(|f| !partition_columns.contains(f.name()))
            .map(|f| f.as_ref().clone())
            .collect();
        Ok(Self {
            file_schema: Arc::new(Schema::new(file_fields)),
            partition_columns,
            column_order: None,
        })
    }

    /// The layout of a catalogued table.
    pub fn of(table: &LakeTable) -> Result<Self, lake::Error> {
        Ok(Self {
            file_schema: lake::schema_from_json(&table.schema_json)?,
            partition_columns: table.partition_columns.clone(),
            column_order: table.column_order.clone(),
        })
    }

    /// The catalog entry of a new table `name` with this layout.
    pub fn catalog_entry(&self, database_id: &str, name: &str, created_at: i64) -> LakeTable {
        LakeTable {
            id: store::new_id(),
            database_id: database_id.to_string(),
            name: name.to_string(),
            schema_json: lake::schema_to_json(&self.file_schema),
            partition_columns: self.partition_columns.clone(),
            column_order: self.column_order.clone(),
            created_at,
        }
    }

    /// A writer of new files of table `database.table` in this layout; `write_id`
    /// names the files (and fills `svc$load_id`).
    pub fn writer(
        &self,
        store: Arc<dyn ObjectStore>,
        (database, table): (&str, &str),
        write_id: &str,
        write_scope: ServiceClientScope,
    ) -> TableWriter {
        TableWriter::new(
            store,
            database,
            table,
            self.file_schema.clone(),
            self.partition_columns.clone(),
            write_id,
            write_scope,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: &[(&str, DataType)]) -> Schema {
        Schema::new(
            fields
                .iter()
                .map(|(name, t)| Field::new(*name, t.clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn table_names_follow_the_spec_rule_with_one_length_cap() {
        for good in ["t", "sales_2026", "a_b"] {
            assert!(is_table_name(good), "{good}");
        }
        let long = "a".repeat(MAX_NAME_CHARS + 1);
        for bad in ["", "_t", "t_", "Sales", "a-b", "a$b", long.as_str()] {
            assert!(!is_table_name(bad), "{bad}");
            assert!(check_table_name(bad).is_err(), "{bad}");
        }
        assert!(is_table_name(&"a".repeat(MAX_NAME_CHARS)));
    }

    #[test]
    fn a_new_table_is_made_one_way_for_rows_and_for_loads() {
        let rows = schema(&[
            ("service_client_id", DataType::Int64),
            ("name", DataType::Utf8View),
            ("region", DataType::Utf8),
        ]);
        let for_rows = TableLayout::for_rows(&rows).unwrap();
        assert_eq!(for_rows.partition_columns, ["service_client_id"]);
        let stored: Vec<_> = for_rows
            .file_schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        assert_eq!(
            stored,
            [("name", DataType::Utf8), ("region", DataType::Utf8)],
            "view types are stored as plain types"
        );
        let for_loads = TableLayout::for_loads(&rows, &["region".into()]).unwrap();
        assert_eq!(
            for_loads.partition_columns,
            ["service_client_id", "svc$load_id", "region"]
        );
        assert_eq!(for_loads.file_schema.fields().len(), 1);
    }

    #[test]
    fn queries_see_the_statements_order_and_older_tables_partitions_last() {
        let statement = schema(&[
            ("trip_id", DataType::Int64),
            ("service_client_id", DataType::Int64),
            ("city", DataType::Utf8),
        ]);
        let layout = TableLayout::for_rows(&statement).unwrap();
        let names = |schema: &Schema| -> Vec<String> {
            schema.fields().iter().map(|f| f.name().clone()).collect()
        };
        let files = layout.file_schema.as_ref();
        let partitions = &layout.partition_columns;
        assert_eq!(
            names(&scan_schema(files, partitions)),
            ["trip_id", "city", "service_client_id"]
        );
        let order = layout.column_order.as_deref();
        assert_eq!(
            order,
            Some(&["trip_id".into(), "service_client_id".into(), "city".into()][..])
        );
        assert_eq!(
            names(&table_schema(files, partitions, order)),
            names(&statement)
        );
        let entry = layout.catalog_entry("d1", "t", 0);
        let read_back = TableLayout::of(&entry).unwrap();
        assert_eq!(
            read_back.column_order, layout.column_order,
            "kept by inserts and loads"
        );
        // No recorded order (older tables, loads): file then partition columns.
        assert_eq!(
            names(&table_schema(files, partitions, None)),
            ["trip_id", "city", "service_client_id"]
        );
        assert!(
            TableLayout::for_loads(&statement, &[])
                .unwrap()
                .column_order
                .is_none()
        );
        // A column the order does not name (ADD COLUMN) comes after the
        // others; a name no column has is skipped.
        let added = schema(&[
            ("trip_id", DataType::Int64),
            ("city", DataType::Utf8),
            ("fare", DataType::Float64),
        ]);
        let order = ["service_client_id", "gone", "trip_id", "city"].map(String::from);
        assert_eq!(
            names(&table_schema(&added, partitions, Some(&order))),
            ["service_client_id", "trip_id", "city", "fare"]
        );
        let scan = scan_schema(&added, partitions);
        assert_eq!(column_positions(&scan, Some(&order)), [3, 0, 1, 2]);
    }

    #[test]
    fn a_new_table_needs_allowed_names_and_a_numeric_service_client() {
        let refused = [
            schema(&[("name", DataType::Utf8)]),
            schema(&[("service_client_id", DataType::Float64)]),
            schema(&[
                ("service_client_id", DataType::Int64),
                ("Name", DataType::Utf8),
            ]),
            schema(&[
                ("service_client_id", DataType::Int64),
                ("a b", DataType::Utf8),
            ]),
        ];
        for schema in &refused {
            assert!(TableLayout::for_rows(schema).is_err(), "{schema:?}");
            assert!(TableLayout::for_loads(schema, &[]).is_err(), "{schema:?}");
        }
        // Uploaded files may carry the service client as text; SQL may not.
        let text_client = schema(&[("service_client_id", DataType::Utf8)]);
        assert!(TableLayout::for_loads(&text_client, &[]).is_ok());
        assert!(TableLayout::for_rows(&text_client).is_err());
        // The length cap is for table names and file keys, not columns.
        let long = "c".repeat(MAX_NAME_CHARS + 1);
        let long_column = schema(&[
            ("service_client_id", DataType::Int64),
            (&long, DataType::Utf8),
        ]);
        assert!(TableLayout::for_rows(&long_column).is_ok());
        let with_load_id = schema(&[
            ("service_client_id", DataType::Int32),
            ("svc$load_id", DataType::Utf8),
        ]);
        assert!(TableLayout::for_rows(&with_load_id).is_ok());
    }
}
