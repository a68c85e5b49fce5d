//! Arrow copies read back from a result's CSV: the same rows and types as
//! the query's, one conversion for concurrent askers, nothing left behind
//! by one that fails.

use std::sync::Arc;

use datafusion::arrow::{
    array::{ArrayRef, Date32Array, Decimal128Array, Int64Array, RecordBatch, StringViewArray},
    compute::concat_batches,
    datatypes::{DataType, Field, Schema},
    ipc::reader::StreamReader,
};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use object_store::memory::InMemory;

use super::*;
use crate::{
    engine::{columns::columns_of, layout::without_view_types},
    query::{csv_read_back::schema_of, result_writer::CsvResultWriter},
};

fn batch(start: i64, rows: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(15, 2), true),
        Field::new("day", DataType::Date32, true),
        Field::new("name", DataType::Utf8View, true),
    ]));
    let ids = Int64Array::from_iter_values(start..start + rows);
    let prices =
        Decimal128Array::from_iter_values((start..start + rows).map(|i| i128::from(i) * 7))
            .with_precision_and_scale(15, 2)
            .unwrap();
    let days = Date32Array::from_iter_values((start..start + rows).map(|i| (i % 20_000) as i32));
    let names: StringViewArray = (start..start + rows)
        .map(|i| (i % 3 != 0).then(|| format!("name \"{i}\"")))
        .collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(ids),
            Arc::new(prices),
            Arc::new(days),
            Arc::new(names),
        ],
    )
    .unwrap()
}

/// Writes `batches` as the CSV at `path`, as a query does; returns its size.
async fn csv_result(store: &Arc<dyn ObjectStore>, path: &str, batches: &[RecordBatch]) -> u64 {
    let mut writer = CsvResultWriter::create(store.clone(), path, &batches[0].schema())
        .await
        .unwrap();
    for batch in batches {
        writer.write(batch).await.unwrap();
    }
    writer.finish_within(0).await.unwrap().bytes
}

fn read_back_of(batches: &[RecordBatch], csv_bytes: u64) -> ReadBack {
    ReadBack {
        schema: schema_of(&columns_of(&batches[0].schema())).unwrap(),
        compression: ArrowCompression::Zstd,
        csv_bytes,
    }
}

#[tokio::test]
async fn the_arrow_copy_read_back_holds_the_query_rows_and_types() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let batches: Vec<_> = (0..5).map(|i| batch(i * 20_000, 20_000)).collect();
    let csv = "_results/q-1.csv";
    let csv_bytes = csv_result(&store, csv, &batches).await;
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let (first, second) = tokio::join!(
        conversions.ensure_arrow(
            &runtime,
            store.clone(),
            csv,
            read_back_of(&batches, csv_bytes)
        ),
        conversions.ensure_arrow(
            &runtime,
            store.clone(),
            csv,
            read_back_of(&batches, csv_bytes)
        ),
    );
    let size = first.unwrap();
    assert_eq!(second.unwrap(), size);
    assert!(conversions.running.lock().unwrap().is_empty());
    let bytes = crate::lake::stored_bytes(store.as_ref(), "_results/q-1.arrows").await;
    assert_eq!(bytes.len() as u64, size);
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let plain = Arc::new(without_view_types(&batches[0].schema()));
    assert_eq!(reader.schema(), plain);
    let read: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let back = concat_batches(&plain, &read).unwrap();
    let all = concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(back.num_rows(), 100_000);
    for (i, (left, right)) in all.columns().iter().zip(back.columns()).enumerate() {
        let left = datafusion::arrow::compute::cast(left, right.data_type()).unwrap();
        assert_eq!(&left, right, "column {i}");
    }
    // The Parquet copy is then made from it.
    let parquet = conversions
        .ensure_parquet(&runtime, store.clone(), csv)
        .await
        .unwrap();
    assert!(parquet > 0);
    // Asked again: the file is there, nothing is read back.
    store.delete(&Path::from(csv)).await.unwrap();
    let again = conversions
        .ensure_arrow(
            &runtime,
            store.clone(),
            csv,
            read_back_of(&batches, csv_bytes),
        )
        .await
        .unwrap();
    assert_eq!(again, size);
}

#[tokio::test]
async fn a_csv_that_does_not_read_back_leaves_no_arrow_file() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let batches = vec![batch(0, 10)];
    let csv = "_results/bad-1.csv";
    store
        .put(
            &Path::from(csv),
            Bytes::from_static(b"\"id\",\"price\",\"day\",\"name\"\n\"1\",\"x\",,\n").into(),
        )
        .await
        .unwrap();
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let outcome = conversions
        .ensure_arrow(&runtime, store.clone(), csv, read_back_of(&batches, 40))
        .await;
    assert!(
        matches!(outcome, Err(TypedResultError::Failed(_))),
        "{outcome:?}"
    );
    assert!(
        store
            .head(&Path::from("_results/bad-1.arrows"))
            .await
            .is_err()
    );
    // A missing CSV is an error too, never a panic.
    let missing = conversions
        .ensure_arrow(
            &runtime,
            store.clone(),
            "_results/none-1.csv",
            read_back_of(&batches, 0),
        )
        .await;
    assert!(missing.is_err());
}

#[tokio::test]
async fn a_small_csv_reads_back_in_memory() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let batches = vec![batch(0, 3)];
    let csv = "_results/small-1.csv";
    let size = csv_result(&store, csv, &batches).await;
    let source = store.get(&Path::from(csv)).await.unwrap().into_stream();
    let source = source.map(|c| c.map_err(std::io::Error::other)).boxed();
    let read_back = read_back_of(&batches, size);
    let writer = read_back_writer(
        store.clone(),
        "_results/small-1.arrows",
        &read_back.schema,
        ArrowCompression::Zstd,
        size,
    )
    .await
    .unwrap();
    let copy = arrow_from_csv(source, read_back.schema, writer, 1 << 20)
        .await
        .unwrap();
    let TypedCopy::InRow(bytes) = copy else {
        panic!("a small copy stays in memory: {copy:?}");
    };
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 3);
    assert!(
        store
            .head(&Path::from("_results/small-1.arrows"))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_copy_read_straight_from_the_csv_holds_the_query_rows() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let batches: Vec<_> = (0..13).map(|i| batch(i * 20_000, 20_000)).collect();
    let csv = "_results/p-1.csv";
    let csv_bytes = csv_result(&store, csv, &batches).await;
    let schema = read_back_of(&batches, csv_bytes).schema;
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let (first, second) = tokio::join!(
        conversions.ensure_parquet_read_back(&runtime, store.clone(), csv, schema.clone()),
        conversions.ensure_parquet(&runtime, store.clone(), csv),
    );
    let size = first.unwrap();
    assert_eq!(second.unwrap(), size, "the second asker joins the first");
    assert!(
        store
            .head(&Path::from("_results/p-1.arrows"))
            .await
            .is_err(),
        "no Arrow copy is made on the way"
    );
    let bytes = crate::lake::stored_bytes(store.as_ref(), "_results/p-1.parquet").await;
    assert_eq!(bytes.len() as u64, size);
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
    assert_eq!(reader.metadata().num_row_groups(), 3, "122,880-row groups");
    assert_eq!(reader.schema(), &schema);
    let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
    let back = concat_batches(&schema, &read).unwrap();
    let all = concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(back.num_rows(), 260_000);
    for (i, (left, right)) in all.columns().iter().zip(back.columns()).enumerate() {
        let left = datafusion::arrow::compute::cast(left, right.data_type()).unwrap();
        assert_eq!(&left, right, "column {i}");
    }
}

#[tokio::test]
async fn a_csv_that_does_not_read_back_leaves_no_parquet_file() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let batches = vec![batch(0, 10)];
    let csv = "_results/badp-1.csv";
    // Good rows first, then a price that is no decimal.
    let mut text = String::from("\"id\",\"price\",\"day\",\"name\"\n");
    for i in 0..50_000 {
        text.push_str(&format!("\"{i}\",\"1.25\",\"2020-01-01\",\"n\"\n"));
    }
    text.push_str("\"1\",\"x\",,\n");
    store
        .put(&Path::from(csv), Bytes::from(text).into())
        .await
        .unwrap();
    let schema = read_back_of(&batches, 0).schema;
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let outcome = conversions
        .ensure_parquet_read_back(&runtime, store.clone(), csv, schema.clone())
        .await;
    assert!(
        matches!(outcome, Err(TypedResultError::Failed(_))),
        "{outcome:?}"
    );
    assert!(
        store
            .head(&Path::from("_results/badp-1.parquet"))
            .await
            .is_err()
    );
    let missing = conversions
        .ensure_parquet_read_back(&runtime, store.clone(), "_results/none-1.csv", schema)
        .await;
    assert!(missing.is_err());
}

/// Writes `batches` as the Arrow file at `path`, as a query written Arrow
/// first does.
async fn arrow_result(store: &Arc<dyn ObjectStore>, path: &str, batches: &[RecordBatch]) {
    let schema = batches[0].schema();
    let mut writer = ArrowResultWriter::create(store.clone(), path, &schema, ArrowCompression::Lz4)
        .await
        .unwrap();
    for batch in batches {
        writer.write(batch).await.unwrap();
    }
    writer.finish().await.unwrap();
}

/// Writes `batches` as the Parquet file at `path`, as a query written
/// Parquet first does.
async fn parquet_result(store: &Arc<dyn ObjectStore>, path: &str, batches: &[RecordBatch]) {
    let plain = Arc::new(without_view_types(&batches[0].schema()));
    let mut writer =
        result_parquet::parquet_file(store.clone(), &Path::from(path), plain.clone()).unwrap();
    for batch in batches {
        let batch = crate::engine::layout::plain_batch(batch, &plain).unwrap();
        writer.write(&batch).await.unwrap();
    }
    writer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_made_from_the_typed_file_is_the_csv_the_query_writes() {
    use datafusion::arrow::array::{ListArray, TimestampMicrosecondArray};
    use datafusion::arrow::datatypes::Int32Type;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    // Columns that read back from their text, and ones that do not (an
    // instant with its zone, a list): the CSV is encoded from the values.
    let instants = TimestampMicrosecondArray::from(vec![Some(1_700_000_000_123_456), None])
        .with_timezone("UTC");
    let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None, Some(3)]),
        None,
    ]);
    let odd = RecordBatch::try_from_iter([
        ("at", Arc::new(instants) as ArrayRef),
        ("l", Arc::new(lists) as ArrayRef),
    ])
    .unwrap();
    let cases = [
        (
            "typed",
            (0..4).map(|i| batch(i * 9_000, 9_000)).collect::<Vec<_>>(),
        ),
        ("odd", vec![odd.clone(), odd]),
    ];
    for (name, batches) in cases {
        let query_csv = format!("_results/{name}-csv-1.csv");
        let csv_bytes = csv_result(&store, &query_csv, &batches).await;
        for first in [ResultFormat::Arrow, ResultFormat::Parquet] {
            let csv = format!("_results/{name}-{}-1.csv", first.extension());
            let typed = result_file_path(&csv, first);
            match first {
                ResultFormat::Parquet => parquet_result(&store, &typed, &batches).await,
                _ => arrow_result(&store, &typed, &batches).await,
            }
            let (one, two) = tokio::join!(
                conversions.ensure_csv(&runtime, store.clone(), &csv, first),
                conversions.ensure_csv(&runtime, store.clone(), &csv, first),
            );
            assert_eq!(one.unwrap(), csv_bytes, "{name} from {first:?}");
            assert_eq!(two.unwrap(), csv_bytes, "{name} from {first:?}: joined");
            let made = crate::lake::stored_bytes(store.as_ref(), &csv).await;
            let written = crate::lake::stored_bytes(store.as_ref(), &query_csv).await;
            assert!(
                made == written,
                "{name}: the CSV made from {first:?} differs"
            );
        }
        // Written Parquet first, its Arrow copy holds the query's values.
        let csv = format!("_results/{name}-parquet-1.csv");
        let compression = ArrowCompression::Zstd;
        let arrow =
            conversions.ensure_arrow_from_parquet(&runtime, store.clone(), &csv, compression);
        let size = arrow.await.unwrap();
        let arrow_path = result_file_path(&csv, ResultFormat::Arrow);
        let bytes = crate::lake::stored_bytes(store.as_ref(), &arrow_path).await;
        assert_eq!(bytes.len() as u64, size);
        let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
        let plain = Arc::new(without_view_types(&batches[0].schema()));
        assert_eq!(reader.schema(), plain, "{name}");
        let read: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let back = concat_batches(&plain, &read).unwrap();
        let all = concat_batches(&batches[0].schema(), &batches).unwrap();
        for (i, (left, right)) in all.columns().iter().zip(back.columns()).enumerate() {
            let left = datafusion::arrow::compute::cast(left, right.data_type()).unwrap();
            assert_eq!(&left, right, "{name} column {i}");
        }
    }
    assert!(conversions.running.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_csv_whose_arrow_file_is_missing_or_cut_is_an_error_and_no_file() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let missing = conversions
        .ensure_csv(
            &runtime,
            store.clone(),
            "_results/gone-1.csv",
            ResultFormat::Arrow,
        )
        .await;
    assert!(
        matches!(missing, Err(TypedResultError::Failed(_))),
        "{missing:?}"
    );
    assert!(
        store
            .head(&Path::from("_results/gone-1.csv"))
            .await
            .is_err()
    );
    // An Arrow file cut short: its rows so far are never a CSV.
    let batches: Vec<_> = (0..3).map(|i| batch(i * 9_000, 9_000)).collect();
    arrow_result(&store, "_results/cut-1.arrows", &batches).await;
    let whole = crate::lake::stored_bytes(store.as_ref(), "_results/cut-1.arrows").await;
    let cut = whole.slice(..whole.len() * 2 / 3);
    store
        .put(&Path::from("_results/cut-1.arrows"), cut.into())
        .await
        .unwrap();
    let cut = conversions
        .ensure_csv(
            &runtime,
            store.clone(),
            "_results/cut-1.csv",
            ResultFormat::Arrow,
        )
        .await;
    assert!(matches!(cut, Err(TypedResultError::Failed(_))), "{cut:?}");
    assert!(store.head(&Path::from("_results/cut-1.csv")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_found_or_made_is_not_asked_of_the_store_again() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let conversions = TypedConversions::default();
    let runtime = tokio::runtime::Handle::current();
    let batches = vec![batch(0, 100)];
    let made = "_results/known-arrow-1.csv";
    arrow_result(
        &store,
        &result_file_path(made, ResultFormat::Arrow),
        &batches,
    )
    .await;
    let found = "_results/known-csv-1.csv";
    let found_bytes = csv_result(&store, found, &batches).await;
    let size = conversions
        .ensure_csv(&runtime, store.clone(), made, ResultFormat::Arrow)
        .await
        .unwrap();
    let head = conversions
        .ensure_csv(&runtime, store.clone(), found, ResultFormat::Arrow)
        .await
        .unwrap();
    assert_eq!(head, found_bytes);
    // A store holding nothing: asking it would find no file, and nothing
    // to make one from.
    let empty: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for (path, expected) in [(made, size), (found, found_bytes)] {
        let known = conversions
            .ensure_csv(&runtime, empty.clone(), path, ResultFormat::Arrow)
            .await;
        assert_eq!(known.unwrap(), expected, "{path}");
        // A replica that never saw the file asks, and gets an error.
        let unknown = TypedConversions::default()
            .ensure_csv(&runtime, empty.clone(), path, ResultFormat::Arrow)
            .await;
        assert!(unknown.is_err(), "{path}");
    }
}

#[tokio::test]
async fn a_file_found_once_is_known_without_the_store_and_a_missing_one_is_none() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let conversions = TypedConversions::default();
    let path = "_results/found-1.parquet";
    assert_eq!(conversions.found(store.as_ref(), path).await.unwrap(), None);
    store
        .put(
            &Path::from(path),
            Bytes::from_static(b"PAR1....PAR1").into(),
        )
        .await
        .unwrap();
    // Not there when first asked: nothing was remembered.
    assert_eq!(
        conversions.found(store.as_ref(), path).await.unwrap(),
        Some(12)
    );
    // Found once: known to this replica, not asked of the store again.
    let empty = InMemory::new();
    assert_eq!(conversions.found(&empty, path).await.unwrap(), Some(12));
    assert_eq!(
        TypedConversions::default()
            .found(&empty, path)
            .await
            .unwrap(),
        None
    );
}
