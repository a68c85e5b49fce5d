//! The Parquet copy of a result, made the first time it is asked for and
//! kept beside it (`<query>-<attempt>.parquet`), so that its link has a
//! length and answers ranges like any stored file: from its Arrow copy
//! (`result_arrow.rs`), or straight from its CSV (`csv_read_back.rs`) when
//! its columns read back and it has no Arrow copy yet. The source is read
//! and the Parquet file written a batch at a time: neither is ever whole in
//! memory. Row groups of `ROW_GROUP_ROWS` rows are encoded a few at once on
//! blocking threads (`parquet_row_groups.rs`), so a conversion uses every
//! core.
//!
//! A result written Parquet first (`result_first.rs`) is read back from its
//! file by ranges (`StoredParquet`).
//!
//! `typed_conversions.rs` runs each conversion once per replica, on a task
//! of its own.

use std::{ops::Range, sync::Arc};

use bytes::Bytes;
use datafusion::{
    arrow::{
        buffer::Buffer,
        datatypes::{DataType, IntervalUnit, Schema, SchemaRef, TimeUnit},
        error::ArrowError,
        ipc::reader::StreamDecoder,
    },
    parquet::{
        arrow::{
            ArrowSchemaConverter, arrow_reader::ArrowReaderOptions, async_reader::AsyncFileReader,
        },
        basic::{Compression, ZstdLevel},
        errors::ParquetError,
        file::{
            metadata::{ParquetMetaData, ParquetMetaDataReader},
            properties::WriterProperties,
        },
    },
};
use futures::{FutureExt as _, StreamExt as _, future::BoxFuture};
use object_store::{ObjectStore, ObjectStoreExt as _, buffered::BufWriter, path::Path};

use super::{InternalCause, csv_read_back::CsvReadBack, parquet_row_groups::ParquetRowGroupWriter};
use crate::{engine::layout::without_view_types, lake};

/// Rows per row group: DuckDB's own default, small enough that a reader
/// ranging over the file fetches little and the writer holds little.
const ROW_GROUP_ROWS: usize = 122_880;

#[derive(Debug, Clone, thiserror::Error)]
pub enum TypedResultError {
    /// The result has no Arrow copy (it ran before typed copies were kept,
    /// or with `query.typed_results` off).
    #[error("the result has no typed copy")]
    NoTypedCopy,
    /// The result has columns Parquet does not hold (`parquet_holds`).
    #[error("the result has columns Parquet does not hold")]
    NotHeld,
    #[error("{0}")]
    Failed(#[source] InternalCause),
}

impl From<object_store::Error> for TypedResultError {
    fn from(e: object_store::Error) -> Self {
        TypedResultError::Failed(InternalCause::new("object store", e))
    }
}

impl From<std::io::Error> for TypedResultError {
    fn from(e: std::io::Error) -> Self {
        TypedResultError::Failed(InternalCause::new("reading the result", e))
    }
}

impl From<ArrowError> for TypedResultError {
    fn from(e: ArrowError) -> Self {
        TypedResultError::Failed(InternalCause::new("arrow copy", e))
    }
}

impl From<ParquetError> for TypedResultError {
    fn from(e: ParquetError) -> Self {
        TypedResultError::Failed(InternalCause::new("parquet", e))
    }
}

/// How Parquet copies are written: zstd at its fastest level (every Parquet
/// reader has it; a third smaller than snappy on typical results, at about
/// snappy's speed), and the Arrow schema embedded, so readers get back the
/// engine's types (time zones, unsigned integers) exactly.
fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build()
}

/// Whether Parquet holds columns of `schema` (in their plain types). The
/// types parquet's writer panics on rather than refuses (unions, times of
/// day in seconds) or refuses only once it meets a value (intervals with
/// nanoseconds) are ruled out here, before it is asked.
pub fn parquet_holds(schema: &Schema) -> bool {
    schema.fields().iter().all(|f| writer_takes(f.data_type()))
        && ArrowSchemaConverter::new()
            .convert(&without_view_types(schema))
            .is_ok()
}

fn writer_takes(data_type: &DataType) -> bool {
    match data_type {
        DataType::Union(..)
        | DataType::Interval(IntervalUnit::MonthDayNano)
        | DataType::Time32(TimeUnit::Second) => false,
        DataType::List(field)
        | DataType::LargeList(field)
        | DataType::ListView(field)
        | DataType::LargeListView(field)
        | DataType::FixedSizeList(field, _)
        | DataType::Map(field, _) => writer_takes(field.data_type()),
        DataType::Struct(fields) => fields.iter().all(|f| writer_takes(f.data_type())),
        DataType::Dictionary(_, values) => writer_takes(values),
        DataType::RunEndEncoded(_, values) => writer_takes(values.data_type()),
        _ => true,
    }
}

/// A result's Parquet file of `schema` at `path`, as every Parquet form of a
/// result is written (`writer_properties`, `ROW_GROUP_ROWS`); it appears
/// in the store only once closed.
pub fn parquet_file(
    store: Arc<dyn ObjectStore>,
    path: &Path,
    schema: SchemaRef,
) -> Result<ParquetRowGroupWriter, ParquetError> {
    let upload = BufWriter::new(store, path.clone());
    ParquetRowGroupWriter::try_new(upload, schema, writer_properties(), ROW_GROUP_ROWS)
}

/// A result's Parquet file in the lake, read by ranges: its footer first,
/// then the column chunks its reader asks for.
pub struct StoredParquet {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
}

impl StoredParquet {
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        path: &str,
    ) -> Result<Self, object_store::Error> {
        let path = Path::from(path);
        let size = store.head(&path).await?.size;
        Ok(Self { store, path, size })
    }
}

impl AsyncFileReader for StoredParquet {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ParquetError>> {
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>, ParquetError>> {
        async move {
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// Writes the Parquet copy of a result whose columns read back from its CSV
/// straight from the CSV at `csv_path` (no Arrow copy is made on the way);
/// returns its size. The text is parsed on this task while row groups are
/// encoded on blocking threads.
pub async fn from_csv(
    store: Arc<dyn ObjectStore>,
    csv_path: &str,
    schema: SchemaRef,
    parquet_path: &str,
) -> Result<u64, TypedResultError> {
    let mut chunks = lake::object_bytes(store.as_ref(), csv_path, None).await?;
    let target = Path::from(parquet_path);
    let mut writer = parquet_file(store.clone(), &target, schema.clone())?;
    let mut reader = CsvReadBack::new(schema);
    while let Some(chunk) = chunks.next().await {
        for batch in reader.push(&chunk?)? {
            writer.write(&batch).await?;
        }
    }
    if let Some(batch) = reader.finish()? {
        writer.write(&batch).await?;
    }
    // Any error above drops the writer unfinished: no file appears.
    Ok(writer.close().await?)
}

/// Writes the Parquet copy of the Arrow stream at `arrow_path` to
/// `parquet_path`; returns its size.
pub async fn convert(
    store: Arc<dyn ObjectStore>,
    arrow_path: &str,
    parquet_path: &str,
) -> Result<u64, TypedResultError> {
    // A megabyte per read (object store's own stream reads a file on disk
    // 8 KiB at a time).
    let mut chunks = match lake::object_bytes(store.as_ref(), arrow_path, None).await {
        Ok(chunks) => chunks,
        Err(object_store::Error::NotFound { .. }) => return Err(TypedResultError::NoTypedCopy),
        Err(e) => return Err(e.into()),
    };
    let mut decoder = StreamDecoder::new();
    let target = Path::from(parquet_path);
    let mut writer: Option<ParquetRowGroupWriter> = None;
    let outcome: Result<(), TypedResultError> = async {
        while let Some(chunk) = chunks.next().await {
            let mut buffer = Buffer::from(chunk?);
            while !buffer.is_empty() {
                let batch = decoder.decode(&mut buffer)?;
                if writer.is_none()
                    && let Some(schema) = decoder.schema()
                {
                    // Refused before its writer is asked (it would fail or
                    // panic on the first such value).
                    if !parquet_holds(&schema) {
                        return Err(TypedResultError::NotHeld);
                    }
                    writer = Some(parquet_file(store.clone(), &target, schema)?);
                }
                if let (Some(batch), Some(writer)) = (batch, writer.as_mut()) {
                    writer.write(&batch).await?;
                }
            }
        }
        decoder.finish()?;
        Ok(())
    }
    .await;
    match (outcome, writer) {
        (Ok(()), Some(writer)) => Ok(writer.close().await?),
        (Ok(()), None) => Err(TypedResultError::Failed(InternalCause::unexpected(
            "the Arrow copy holds no schema",
        ))),
        // The writer is dropped unfinished: its upload is never completed,
        // so no file appears at `parquet_path`.
        (Err(e), _) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parquet_holds_what_its_writer_takes_and_not_what_it_panics_on() {
        use datafusion::arrow::datatypes::{Field, UnionFields, UnionMode};
        let of = |data_type: DataType| Schema::new(vec![Field::new("c", data_type, true)]);
        for held in [
            DataType::Utf8View,
            DataType::Decimal128(38, 10),
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            DataType::Interval(IntervalUnit::DayTime),
            DataType::new_list(DataType::Int32, true),
        ] {
            assert!(parquet_holds(&of(held.clone())), "{held}");
        }
        let union = DataType::Union(
            UnionFields::try_new(vec![0], vec![Field::new("a", DataType::Int32, true)]).unwrap(),
            UnionMode::Dense,
        );
        for refused in [
            DataType::Interval(IntervalUnit::MonthDayNano),
            DataType::Time32(TimeUnit::Second),
            DataType::new_list(DataType::Interval(IntervalUnit::MonthDayNano), true),
            union,
        ] {
            assert!(!parquet_holds(&of(refused.clone())), "{refused}");
        }
    }

    use datafusion::{
        arrow::{
            array::{Decimal128Array, Int64Array, RecordBatch, StringArray},
            datatypes::{DataType, Field, Schema},
        },
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder,
    };
    use object_store::memory::InMemory;

    use super::*;
    use crate::{
        lake::{ResultFormat, result_file_path},
        query::{result_arrow::ArrowResultWriter, typed_conversions::TypedConversions},
    };

    fn batch(start: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(38, 4), true),
        ]));
        let ids: Vec<i64> = (start..start + rows).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(StringArray::from_iter(
                    ids.iter().map(|i| (i % 3 != 0).then(|| format!("n{i}"))),
                )),
                Arc::new(
                    Decimal128Array::from_iter_values(ids.iter().map(|i| i128::from(*i) * 10_001))
                        .with_precision_and_scale(38, 4)
                        .unwrap(),
                ),
            ],
        )
        .unwrap()
    }

    async fn arrow_copy(store: &Arc<dyn ObjectStore>, csv: &str, batches: &[RecordBatch]) {
        let path = result_file_path(csv, ResultFormat::Arrow);
        let compression = crate::config::ArrowCompression::Zstd;
        let mut writer =
            ArrowResultWriter::create(store.clone(), &path, &batches[0].schema(), compression)
                .await
                .unwrap();
        for batch in batches {
            writer.write(batch).await.unwrap();
        }
        writer.finish().await.unwrap();
    }

    #[tokio::test]
    async fn the_parquet_copy_holds_the_arrow_rows_and_types() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let batches: Vec<_> = (0..40).map(|i| batch(i * 8192, 8192)).collect();
        arrow_copy(&store, "_results/q-1.csv", &batches).await;
        let conversions = TypedConversions::default();
        let runtime = tokio::runtime::Handle::current();
        let (first, second) = tokio::join!(
            conversions.ensure_parquet(&runtime, store.clone(), "_results/q-1.csv"),
            conversions.ensure_parquet(&runtime, store.clone(), "_results/q-1.csv"),
        );
        let size = first.unwrap();
        assert_eq!(second.unwrap(), size);
        assert!(conversions.running.lock().unwrap().is_empty());
        let bytes = crate::lake::stored_bytes(store.as_ref(), "_results/q-1.parquet").await;
        assert_eq!(bytes.len() as u64, size);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(
            reader.metadata().num_row_groups(),
            3,
            "row groups of 122,880 rows"
        );
        assert_eq!(reader.schema(), &batches[0].schema());
        let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        let all =
            datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
        let back = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &read).unwrap();
        assert_eq!(back, all);
        // Asked again: the file is there, nothing is converted.
        let again = conversions
            .ensure_parquet(&runtime, store.clone(), "_results/q-1.csv")
            .await
            .unwrap();
        assert_eq!(again, size);
    }

    #[tokio::test]
    async fn a_result_of_no_columns_converts() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = result_file_path("_results/ddl-1.csv", ResultFormat::Arrow);
        let compression = crate::config::ArrowCompression::None;
        let writer = ArrowResultWriter::create(store.clone(), &path, &Schema::empty(), compression)
            .await
            .unwrap();
        writer.finish().await.unwrap();
        let outcome = convert(store.clone(), &path, "_results/ddl-1.parquet").await;
        let size = outcome.unwrap();
        let bytes = crate::lake::stored_bytes(store.as_ref(), "_results/ddl-1.parquet").await;
        assert_eq!(bytes.len() as u64, size);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    }

    #[tokio::test]
    async fn a_result_without_an_arrow_copy_has_no_parquet_copy() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let conversions = TypedConversions::default();
        let runtime = tokio::runtime::Handle::current();
        let outcome = conversions
            .ensure_parquet(&runtime, store.clone(), "_results/old-1.csv")
            .await;
        assert!(matches!(outcome, Err(TypedResultError::NoTypedCopy)));
        assert!(
            store
                .head(&Path::from("_results/old-1.parquet"))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_broken_arrow_copy_leaves_no_parquet_file() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        arrow_copy(&store, "_results/q-1.csv", &[batch(0, 100)]).await;
        let path = Path::from("_results/q-1.arrows");
        let whole = store.get(&path).await.unwrap().bytes().await.unwrap();
        store
            .put(&path, whole.slice(..whole.len() - 20).into())
            .await
            .unwrap();
        let outcome = convert(store.clone(), "_results/q-1.arrows", "_results/q-1.parquet").await;
        assert!(
            matches!(outcome, Err(TypedResultError::Failed(_))),
            "{outcome:?}"
        );
        assert!(
            store
                .head(&Path::from("_results/q-1.parquet"))
                .await
                .is_err()
        );
    }
}
