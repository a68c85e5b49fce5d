//! Lake tables for the engine's tests: table `t` (id `t1` of database `d1`)
//! partitioned by `service_client_id`, its files written as parquet into a
//! memory store and read through `LakeTableProvider` with every client's
//! rows readable.

use std::{collections::BTreeMap, sync::Arc};

use datafusion::{
    arrow::{array::RecordBatch, datatypes::SchemaRef},
    execution::object_store::ObjectStoreUrl,
    parquet::{arrow::ArrowWriter, file::properties::WriterProperties},
    prelude::SessionContext,
};
use object_store::{ObjectStoreExt as _, memory::InMemory, path::Path};

use super::{LakeTableProvider, layout::StringColumns};
use crate::{
    auth::ServiceClientScope,
    store::catalog::{DataFile, LakeTable, NewDataFile},
};

/// Table `t`'s catalog entry.
pub(super) fn table_t() -> LakeTable {
    LakeTable {
        id: "t1".into(),
        database_id: "d1".into(),
        name: "t".into(),
        schema_json: String::new(),
        partition_columns: vec!["service_client_id".into()],
        column_order: None,
        created_at: 0,
    }
}

/// A session with table `t` of `schema`: one file per `(client, rows)`,
/// written with `properties` (the writer's defaults when `None`).
pub(super) async fn session_on_files(
    schema: SchemaRef,
    files: Vec<(i64, RecordBatch)>,
    properties: Option<WriterProperties>,
) -> SessionContext {
    let store = Arc::new(InMemory::new());
    let mut catalogued = Vec::new();
    for (client, rows) in files {
        let mut bytes = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut bytes, schema.clone(), properties.clone()).unwrap();
        writer.write(&rows).unwrap();
        writer.close().unwrap();
        let path = format!("d/t/service_client_id={client}/f.parquet");
        let size = bytes.len() as i64;
        store
            .put(&Path::from(path.as_str()), bytes.into())
            .await
            .unwrap();
        catalogued.push(DataFile {
            id: format!("f{client}"),
            table_id: "t1".into(),
            file: NewDataFile {
                path,
                service_client_id: Some(client),
                partition_values: BTreeMap::from([(
                    "service_client_id".into(),
                    client.to_string(),
                )]),
                row_count: rows.num_rows() as i64,
                size_bytes: size,
                load_id: None,
            },
            committed_at: 0,
        });
    }
    let url = ObjectStoreUrl::parse("memory://").unwrap();
    let provider = LakeTableProvider::new(
        "lake",
        table_t(),
        schema,
        StringColumns::Views,
        catalogued,
        ServiceClientScope::All,
        url.clone(),
    );
    let context = SessionContext::new();
    context.register_object_store(url.as_ref(), store);
    context.register_table("t", Arc::new(provider)).unwrap();
    context
}
