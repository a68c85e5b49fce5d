//! `TableWriter`'s tests: files per partition value, the write scope, the
//! memory share of row groups, on an in-memory store.

use std::{collections::BTreeSet, sync::Arc};

use datafusion::{
    arrow::{
        array::{AsArray as _, Int64Array, RecordBatch, StringArray},
        datatypes::{DataType, Field, Int64Type, Schema, SchemaRef},
    },
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder,
};
use futures::TryStreamExt as _;
use object_store::{ObjectStore as _, memory::InMemory};

use super::{
    layout::{LOAD_ID_COLUMN, SERVICE_CLIENT_COLUMN},
    table_writer::{TableWriteError, TableWriter},
};
use crate::auth::ServiceClientScope;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(SERVICE_CLIENT_COLUMN, DataType::Int64, true),
        Field::new("region", DataType::Utf8, true),
        Field::new("n", DataType::Int64, false),
    ]))
}

fn batch(clients: &[Option<i64>], regions: &[Option<&str>], n: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(clients.to_vec())),
            Arc::new(StringArray::from(regions.to_vec())),
            Arc::new(Int64Array::from(n.to_vec())),
        ],
    )
    .unwrap()
}

/// A writer partitioned by service client, region and load id, storing
/// the column `n` alone.
fn writer(store: &Arc<InMemory>, scope: ServiceClientScope) -> TableWriter {
    let file_schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let partitions = [SERVICE_CLIENT_COLUMN, LOAD_ID_COLUMN, "region"];
    TableWriter::new(
        store.clone(),
        "db",
        "t",
        file_schema,
        partitions.map(String::from).to_vec(),
        "load1",
        scope,
    )
}

async fn stored(store: &InMemory) -> Vec<String> {
    let mut paths: Vec<String> = store
        .list(None)
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    paths.sort();
    paths
}

/// The `n` values of a stored file, in order, and its row groups.
async fn values(store: &InMemory, path: &str) -> (Vec<i64>, usize) {
    let bytes = crate::lake::stored_bytes(store, path).await;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
    let groups = builder.metadata().num_row_groups();
    let mut n = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        n.extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
    }
    (n, groups)
}

#[tokio::test]
async fn rows_go_to_one_file_per_partition_value_in_their_order() {
    let store = Arc::new(InMemory::new());
    let mut writer = writer(&store, ServiceClientScope::All);
    let first = batch(
        &[Some(1), Some(2), Some(1), Some(2), Some(1)],
        &[Some("eu"), Some("eu"), Some("us"), Some("eu"), Some("eu")],
        &[10, 20, 30, 40, 50],
    );
    let second = batch(&[Some(2), Some(1)], &[Some("eu"), None], &[60, 70]);
    writer.write(&first).await.unwrap();
    writer.write(&second).await.unwrap();
    let files = writer.finish().await.unwrap();

    let listed: Vec<(&str, i64, Option<i64>)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.row_count, f.service_client_id))
        .collect();
    assert_eq!(
        listed,
        [
            (
                "db/t/service_client_id=1/svc$load_id=load1/region=/load1-3.parquet",
                1,
                Some(1)
            ),
            (
                "db/t/service_client_id=1/svc$load_id=load1/region=eu/load1-0.parquet",
                2,
                Some(1)
            ),
            (
                "db/t/service_client_id=1/svc$load_id=load1/region=us/load1-2.parquet",
                1,
                Some(1)
            ),
            (
                "db/t/service_client_id=2/svc$load_id=load1/region=eu/load1-1.parquet",
                3,
                Some(2)
            ),
        ]
    );
    assert_eq!(
        stored(&store).await,
        listed.iter().map(|l| l.0).collect::<Vec<_>>()
    );
    for (file, expected) in files
        .iter()
        .zip([&[70][..], &[10, 50], &[30], &[20, 40, 60]])
    {
        assert_eq!(
            values(&store, &file.path).await.0,
            expected,
            "{}",
            file.path
        );
        assert!(file.size_bytes > 0);
    }
    let region = &files[1].partition_values;
    assert_eq!(region.get("region").map(String::as_str), Some("eu"));
    assert_eq!(
        region.get(LOAD_ID_COLUMN).map(String::as_str),
        Some("load1")
    );
}

#[tokio::test]
async fn the_first_row_out_of_scope_is_named_and_nothing_is_left_stored() {
    let store = Arc::new(InMemory::new());
    let scope = ServiceClientScope::Only(BTreeSet::from([1, 2]));
    let mut writer = writer(&store, scope);
    writer
        .write(&batch(&[Some(1), Some(2)], &[Some("eu"); 2], &[1, 2]))
        .await
        .unwrap();
    let denied = batch(
        &[Some(1), Some(7), Some(5), Some(7)],
        &[Some("eu"); 4],
        &[3, 4, 5, 6],
    );
    let error = writer.write(&denied).await.unwrap_err();
    assert!(matches!(error, TableWriteError::Denied(7)), "{error}");
    writer.abort().await;
    assert_eq!(stored(&store).await, Vec::<String>::new());

    let mut writer = self::writer(&store, ServiceClientScope::All);
    let missing = batch(&[Some(3), None], &[Some("eu"); 2], &[1, 2]);
    let error = writer.write(&missing).await.unwrap_err();
    assert!(
        matches!(error, TableWriteError::MissingServiceClient),
        "{error}"
    );
    writer.abort().await;
    assert_eq!(stored(&store).await, Vec::<String>::new());
}

#[tokio::test]
async fn row_groups_are_written_out_once_the_files_hold_their_share_of_memory() {
    let store = Arc::new(InMemory::new());
    let mut writer = writer(&store, ServiceClientScope::All);
    writer.buffered_bytes = 64 * 1024;
    let rows = 8192;
    for start in (0..200_000i64).step_by(rows) {
        let n: Vec<i64> = (start..start + rows as i64).collect();
        let clients: Vec<Option<i64>> = n.iter().map(|i| Some(1 + i % 2)).collect();
        writer
            .write(&batch(&clients, &vec![Some("eu"); rows], &n))
            .await
            .unwrap();
    }
    let files = writer.finish().await.unwrap();
    assert_eq!(files.len(), 2);
    for file in &files {
        let (n, row_groups) = values(&store, &file.path).await;
        assert_eq!(n.len() as i64, file.row_count);
        assert!(n.windows(2).all(|w| w[0] < w[1]), "rows kept in order");
        // Without the share a file of ~100,000 rows is one row group.
        assert!(row_groups > 4, "{row_groups} row groups in {}", file.path);
    }
    assert_eq!(files.iter().map(|f| f.row_count).sum::<i64>(), 204_800);
}

#[tokio::test]
async fn a_column_of_many_values_stops_its_dictionary_at_a_quarter_megabyte() {
    let store = Arc::new(InMemory::new());
    let mut writer = writer(&store, ServiceClientScope::All);
    // 100,000 distinct values (800 KB as a dictionary): parquet's default
    // limit (1 MiB) would keep them all in the dictionary.
    let rows = 8192;
    for start in (0..100_000i64).step_by(rows) {
        let n: Vec<i64> = (start..(start + rows as i64).min(100_000)).collect();
        let count = n.len();
        writer
            .write(&batch(&vec![Some(1); count], &vec![Some("eu"); count], &n))
            .await
            .unwrap();
    }
    let files = writer.finish().await.unwrap();
    assert_eq!(files.len(), 1);
    let (n, _) = values(&store, &files[0].path).await;
    assert_eq!(n, (0..100_000).collect::<Vec<_>>());
    let bytes = crate::lake::stored_bytes(store.as_ref(), files[0].path.as_str()).await;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
    let chunk = builder.metadata().row_group(0).column(0);
    let dictionary = chunk.dictionary_page_offset().expect("a dictionary page");
    let dictionary_bytes = chunk.data_page_offset() - dictionary;
    assert!(
        (200_000..=300_000).contains(&dictionary_bytes),
        "a dictionary of {dictionary_bytes} bytes"
    );
}
