//! The result writer's files: the CSV in order and whole, the typed copy
//! beside it or its failure leaving the CSV whole, small results kept for
//! the row, and a result written Arrow first.

use datafusion::arrow::{
    array::{ArrayRef, Int64Array},
    datatypes::{DataType, Field},
};
use object_store::{ObjectStoreExt as _, memory::InMemory};

use super::*;

/// An empty store, a result's two columns and a batch an Arrow stream of
/// them cannot take (one column of the two).
fn mismatched() -> (Arc<dyn ObjectStore>, Schema, RecordBatch) {
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Int64, false),
    ]);
    let one_column = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
    let batch =
        RecordBatch::try_new(one_column, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
    (Arc::new(InMemory::new()), schema, batch)
}

#[tokio::test]
async fn a_typed_copy_that_fails_leaves_the_csv_whole_and_no_arrow_file() {
    let (store, schema, batch) = mismatched();
    // The CSV writes what it is given.
    let mut writer = ResultWriter::create(
        store.clone(),
        "r.csv",
        &schema,
        TypedCopies::WhileRunning(ArrowCompression::Zstd),
        0,
    )
    .await
    .unwrap();
    writer.write(&batch).await.unwrap();
    writer.write(&batch).await.unwrap();
    let written = writer.finish().await.unwrap();
    assert_eq!(written.rows, 4);
    let csv = crate::lake::stored_bytes(store.as_ref(), "r.csv").await;
    assert_eq!(&csv[..], b"\"a\",\"b\"\n\"1\"\n\"2\"\n\"1\"\n\"2\"\n");
    let arrow = result_file_path("r.csv", ResultFormat::Arrow);
    assert!(store.head(&Path::from(arrow.as_str())).await.is_err());
}

#[tokio::test]
async fn a_result_within_the_row_limit_comes_back_and_leaves_no_object() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    for (rows, in_row) in [(3i64, true), (20_000, false)] {
        let path = format!("r{rows}.csv");
        let mut writer = ResultWriter::create(
            store.clone(),
            &path,
            &schema,
            TypedCopies::WhileRunning(ArrowCompression::Zstd),
            64 * 1024,
        )
        .await
        .unwrap();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>()))],
        )
        .unwrap();
        writer.write(&batch).await.unwrap();
        let written = writer.finish().await.unwrap();
        let arrow_path = result_file_path(&path, ResultFormat::Arrow);
        let csv_object = store.head(&Path::from(path.as_str())).await;
        let arrow_object = store.head(&Path::from(arrow_path.as_str())).await;
        if in_row {
            let csv = written.in_row.csv.expect("the CSV in the row");
            assert_eq!(&csv[..], b"\"n\"\n\"0\"\n\"1\"\n\"2\"\n");
            assert_eq!(written.bytes, csv.len() as u64);
            assert!(written.in_row.arrow.is_some(), "the Arrow copy in the row");
            assert!(csv_object.is_err() && arrow_object.is_err(), "no object");
        } else {
            assert!(written.in_row.csv.is_none(), "a big CSV is uploaded");
            assert_eq!(csv_object.unwrap().size, written.bytes);
            // Each form is kept by its own size: this Arrow copy,
            // compressed, may fit the row where the CSV does not.
            assert!(
                written.in_row.arrow.is_some() != arrow_object.is_ok(),
                "the Arrow copy in the row or the lake, once"
            );
        }
    }
}

#[tokio::test]
async fn on_request_a_copy_is_written_now_only_for_columns_that_do_not_read_back() {
    use datafusion::arrow::array::TimestampMicrosecondArray;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let numbers: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
    let instants: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![1, 2]));
    for (path, column, written_now) in [("n.csv", numbers, false), ("t.csv", instants, true)] {
        let field = Field::new("c", column.data_type().clone(), false);
        let schema = Arc::new(Schema::new(vec![field]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
        let mut writer = ResultWriter::create(
            store.clone(),
            path,
            &schema,
            TypedCopies::OnRequest(ArrowCompression::Zstd),
            0,
        )
        .await
        .unwrap();
        writer.write(&batch).await.unwrap();
        writer.finish().await.unwrap();
        let arrow = result_file_path(path, ResultFormat::Arrow);
        let kept = store.head(&Path::from(arrow.as_str())).await.is_ok();
        assert_eq!(kept, written_now, "{path}");
        assert!(store.head(&Path::from(path)).await.is_ok());
    }
    let never = TypedCopies::Never.while_running(&Schema::empty());
    assert_eq!(never, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_made_text_on_tasks_are_written_in_their_order() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let mut writer = CsvResultWriter::create(store.clone(), "r.csv", &schema)
        .await
        .unwrap();
    // Big batches (each on a task) between small ones (inline when
    // nothing is in flight), more of them than are encoded at once.
    let sizes = [3, 5000, 2, 9000, 4000, 1, 7000, 3000, 8000, 6000, 5];
    let mut next = 0i64;
    for size in sizes {
        let n: Vec<i64> = (next..next + size).collect();
        next += size;
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(n))]);
        writer.write(&batch.unwrap()).await.unwrap();
    }
    let written = writer.finish().await.unwrap();
    assert_eq!(written.rows, next as u64);
    let csv = crate::lake::stored_bytes(store.as_ref(), "r.csv").await;
    let expected: String = std::iter::once("\"n\"\n".to_string())
        .chain((0..next).map(|n| format!("\"{n}\"\n")))
        .collect();
    assert_eq!(written.bytes, expected.len() as u64);
    assert!(csv == expected.as_bytes(), "rows out of order");
}

/// A result of `rows` numbered rows written Arrow first with `in_row_limit`.
async fn arrow_first(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    rows: i64,
    in_row_limit: usize,
) -> WrittenResult {
    let first = TypedCopies::First(FirstFormat::Arrow(ArrowCompression::Lz4));
    typed_first(store, path, rows, in_row_limit, first).await
}

/// A result of `rows` numbered rows written as `first` says.
async fn typed_first(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    rows: i64,
    in_row_limit: usize,
    first: TypedCopies,
) -> WrittenResult {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let mut writer = ResultWriter::create(store.clone(), path, &schema, first, in_row_limit)
        .await
        .unwrap();
    for start in (0..rows).step_by(8192) {
        let n: Vec<i64> = (start..rows.min(start + 8192)).collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(n))]);
        writer.write(&batch.unwrap()).await.unwrap();
    }
    writer.finish().await.unwrap()
}

fn numbered_csv(rows: i64) -> String {
    std::iter::once("\"n\"\n".to_string())
        .chain((0..rows).map(|n| format!("\"{n}\"\n")))
        .collect()
}

#[tokio::test]
async fn arrow_first_keeps_a_small_csv_and_leaves_a_big_one_to_be_made() {
    use datafusion::arrow::ipc::reader::StreamReader;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let exists = |path: String| {
        let store = store.clone();
        async move { store.head(&Path::from(path)).await.is_ok() }
    };
    // Small enough for the row: both forms there, no object.
    let tiny = arrow_first(&store, "tiny.csv", 3, 64 * 1024).await;
    assert_eq!(tiny.rows, 3);
    assert_eq!(&tiny.in_row.csv.unwrap()[..], numbered_csv(3).as_bytes());
    assert!(tiny.in_row.arrow.is_some());
    assert!(!exists("tiny.csv".into()).await && !exists("tiny.arrows".into()).await);
    // Small, not for the row: the CSV is put in the lake whole.
    let small = arrow_first(&store, "small.csv", 2_000, 0).await;
    let csv = crate::lake::stored_bytes(store.as_ref(), "small.csv").await;
    assert_eq!(&csv[..], numbered_csv(2_000).as_bytes());
    assert_eq!(small.bytes, csv.len() as u64);
    assert!(small.small.is_some() && exists("small.arrows".into()).await);
    // Bigger than `SMALL_RESULT_BYTES` as CSV: the Arrow file alone, all rows.
    let rows = 100_000;
    assert!(numbered_csv(rows).len() > SMALL_RESULT_BYTES);
    let big = arrow_first(&store, "big.csv", rows, 64 * 1024).await;
    assert!(!exists("big.csv".into()).await, "no CSV written");
    let arrow = crate::lake::stored_bytes(store.as_ref(), "big.arrows").await;
    assert_eq!((big.rows, big.bytes), (rows as u64, arrow.len() as u64));
    assert!(big.small.is_none() && big.in_row == ResultInRow::default());
    let reader = StreamReader::try_new(std::io::Cursor::new(arrow), None).unwrap();
    let read: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(read, rows as usize);
}

#[tokio::test]
async fn arrow_first_fails_when_its_arrow_file_fails_and_leaves_nothing() {
    let (store, schema, batch) = mismatched();
    let mut writer = ResultWriter::create(
        store.clone(),
        "r.csv",
        &schema,
        TypedCopies::First(FirstFormat::Arrow(ArrowCompression::None)),
        0,
    )
    .await
    .unwrap();
    // The task fails on the batch it cannot take; the next write or the
    // finish reports it, and nothing is stored.
    let failed = match writer.write(&batch).await {
        Err(_) => true,
        Ok(()) => match writer.write(&batch).await {
            Err(_) => true,
            Ok(()) => writer.finish().await.is_err(),
        },
    };
    assert!(
        failed,
        "an Arrow-first result without its Arrow file succeeded"
    );
    for path in ["r.csv", "r.arrows"] {
        assert!(store.head(&Path::from(path)).await.is_err(), "{path} left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_first_writes_the_parquet_file_and_the_csv_only_while_small() {
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let parquet_rows = |path: &'static str| {
        let store = store.clone();
        async move {
            let bytes = crate::lake::stored_bytes(store.as_ref(), path).await;
            let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
            let reader = builder.build().unwrap();
            reader.map(|b| b.unwrap().num_rows()).sum::<usize>()
        }
    };
    let small = typed_first(
        &store,
        "small.csv",
        3,
        64 * 1024,
        TypedCopies::First(FirstFormat::Parquet),
    )
    .await;
    assert_eq!(&small.in_row.csv.unwrap()[..], numbered_csv(3).as_bytes());
    assert!(small.in_row.arrow.is_none(), "no Arrow file");
    assert_eq!(parquet_rows("small.parquet").await, 3);
    let rows = 300_000;
    let big = typed_first(
        &store,
        "big.csv",
        rows,
        64 * 1024,
        TypedCopies::First(FirstFormat::Parquet),
    )
    .await;
    assert!(
        store.head(&Path::from("big.csv")).await.is_err(),
        "no CSV written"
    );
    assert!(
        store.head(&Path::from("big.arrows")).await.is_err(),
        "no Arrow file"
    );
    let size = store.head(&Path::from("big.parquet")).await.unwrap().size;
    assert_eq!((big.rows, big.bytes), (rows as u64, size));
    assert_eq!(parquet_rows("big.parquet").await, rows as usize);
}

/// A statement that is not a read (`Prefer: result-format=` is honoured for
/// every statement): a DDL's result has no columns and no rows. Written in
/// either typed format first it succeeds and keeps the CSV a CSV-first run
/// keeps in the row.
#[tokio::test]
async fn a_result_of_no_columns_is_written_in_either_typed_format_first() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let write = |path: &'static str, typed: TypedCopies| {
        let store = store.clone();
        async move {
            let schema = Schema::empty();
            let writer = ResultWriter::create(store, path, &schema, typed, 64 * 1024);
            let written = writer.await.unwrap().finish().await;
            written.unwrap_or_else(|e| panic!("{typed:?}: {e}"))
        }
    };
    let csv_first = write("csv.csv", TypedCopies::OnRequest(ArrowCompression::Lz4)).await;
    let firsts = [
        ("arrow.csv", FirstFormat::Arrow(ArrowCompression::Lz4)),
        ("parquet.csv", FirstFormat::Parquet),
    ];
    for (path, first) in firsts {
        let written = write(path, TypedCopies::First(first)).await;
        assert_eq!(
            (written.rows, written.bytes, &written.in_row.csv),
            (0, csv_first.bytes, &csv_first.in_row.csv),
            "{first:?}"
        );
    }
}
