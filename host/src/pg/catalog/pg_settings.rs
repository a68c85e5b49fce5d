//! `pg_catalog.pg_settings` from lakehost's settings (`pg::settings`, the
//! list `SHOW` answers from), laid over datafusion-pg-catalog's (`overlay.rs`), which
//! holds `standard_conforming_strings` only: pgjdbc reads `max_index_keys`
//! before it lists keys, DBeaver reads settings by name on connect.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{ArrayRef, BooleanArray, Int32Array, StringArray},
        datatypes::{DataType, Field, Schema},
        record_batch::RecordBatch,
    },
    catalog::MemTable,
    error::DataFusionError,
};

use crate::pg::settings::SETTINGS;

/// The settings as Postgres 15's `pg_settings` view has them: read-only
/// (`context` internal), each at its default.
pub fn settings_table() -> Result<MemTable, DataFusionError> {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let schema = Arc::new(Schema::new(vec![
        text("name"),
        text("setting"),
        text("unit"),
        text("category"),
        text("short_desc"),
        text("extra_desc"),
        text("context"),
        text("vartype"),
        text("source"),
        text("min_val"),
        text("max_val"),
        text("enumvals"),
        text("boot_val"),
        text("reset_val"),
        text("sourcefile"),
        Field::new("sourceline", DataType::Int32, true),
        Field::new("pending_restart", DataType::Boolean, true),
    ]));
    let rows = SETTINGS.len();
    let column = |value: &dyn Fn(usize) -> Option<&'static str>| -> ArrayRef {
        Arc::new((0..rows).map(value).collect::<StringArray>())
    };
    let none = |_: usize| -> Option<&'static str> { None };
    let columns: Vec<ArrayRef> = vec![
        column(&|i| Some(SETTINGS[i].name)),
        column(&|i| Some(SETTINGS[i].value)),
        column(&none),
        column(&none),
        column(&|i| Some(SETTINGS[i].description)),
        column(&none),
        column(&|_| Some("internal")),
        column(&|i| Some(SETTINGS[i].vartype)),
        column(&|_| Some("default")),
        column(&none),
        column(&none),
        column(&none),
        column(&|i| Some(SETTINGS[i].value)),
        column(&|i| Some(SETTINGS[i].value)),
        column(&none),
        Arc::new(Int32Array::new_null(rows)),
        Arc::new(BooleanArray::from(vec![false; rows])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    MemTable::try_new(schema, vec![vec![batch]])
}
