//! Query results: how a finished query's rows are stored and read back.
//!
//! A result is written once, as the CSV the spec's signed link serves (header
//! row, every value quoted, NULL as an empty unquoted field so it stays
//! distinguishable from an empty string), streamed batch by batch to the object
//! store: no result is ever held in memory whole. Result pages (1,000 rows, the
//! spec's JSON shape) are parsed back from that same file starting at a byte
//! offset, so page N costs one ranged read, not a re-run of the query.
//!
//! Column metadata (the spec's ColumnInfo) is kept beside the job in the store.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::{
    array::{Array, RecordBatch},
    datatypes::{DataType, Schema},
    util::display::{ArrayFormatter, FormatOptions},
};
use futures::StreamExt as _;
use object_store::{GetOptions, GetRange, ObjectStore, buffered::BufWriter, path::Path};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt as _;

/// Rows per result page (spec "Limits": first result page up to 1,000 rows).
pub const PAGE_ROWS: usize = 1000;

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
fn sql_type(data_type: &DataType) -> (&'static str, i64, i64) {
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

/// How cells become strings: SQL-style timestamps, everything else Arrow's text.
fn format_options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_display_error(true)
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f %Z"))
}

/// Appends `value` as one quoted CSV field.
fn push_quoted(out: &mut Vec<u8>, value: &str) {
    out.push(b'"');
    for byte in value.bytes() {
        if byte == b'"' {
            out.push(b'"');
        }
        out.push(byte);
    }
    out.push(b'"');
}

/// Appends the rows of `batch` as CSV lines (formatters are not `Send`, so
/// this stays synchronous).
fn encode_rows(batch: &RecordBatch, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let options = format_options();
    let formatters = batch
        .columns()
        .iter()
        .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let mut cell = String::new();
    for row in 0..batch.num_rows() {
        for (i, (column, formatter)) in batch.columns().iter().zip(&formatters).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !column.is_null(row) {
                cell.clear();
                write!(cell, "{}", formatter.value(row)).map_err(std::io::Error::other)?;
                push_quoted(out, &cell);
            }
        }
        out.push(b'\n');
    }
    Ok(())
}

/// Results up to this size are also kept in memory by the writer, so the
/// replica that ran a query can serve its pages without reading the file.
pub const SMALL_RESULT_BYTES: usize = 256 * 1024;

/// Streams a result to `path` as CSV.
pub struct CsvResultWriter {
    writer: BufWriter,
    path: Path,
    rows: u64,
    bytes: u64,
    buffer: Vec<u8>,
    /// Every byte written so far, while the result is small.
    copy: Option<Vec<u8>>,
}

/// A finished result file.
#[derive(Debug, Clone)]
pub struct WrittenResult {
    pub rows: u64,
    pub bytes: u64,
    /// The whole CSV, when it is at most `SMALL_RESULT_BYTES`.
    pub small: Option<Bytes>,
}

impl CsvResultWriter {
    /// Starts the file and writes the header row (no header for a result
    /// without columns: its CSV is empty).
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        path: &str,
        schema: &Schema,
    ) -> std::io::Result<Self> {
        let path = Path::from(path);
        let mut writer = Self {
            writer: BufWriter::new(store, path.clone()),
            path,
            rows: 0,
            bytes: 0,
            buffer: Vec::with_capacity(64 * 1024),
            copy: Some(Vec::new()),
        };
        if !schema.fields().is_empty() {
            for (i, field) in schema.fields().iter().enumerate() {
                if i > 0 {
                    writer.buffer.push(b',');
                }
                push_quoted(&mut writer.buffer, field.name());
            }
            writer.buffer.push(b'\n');
            writer.flush_buffer().await?;
        }
        Ok(writer)
    }

    async fn flush_buffer(&mut self) -> std::io::Result<()> {
        if let Some(copy) = &mut self.copy {
            if copy.len() + self.buffer.len() <= SMALL_RESULT_BYTES {
                copy.extend_from_slice(&self.buffer);
            } else {
                self.copy = None;
            }
        }
        self.writer.write_all(&self.buffer).await?;
        self.bytes += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        if batch.num_columns() == 0 {
            return Ok(());
        }
        encode_rows(batch, &mut self.buffer)?;
        self.rows += batch.num_rows() as u64;
        if self.buffer.len() >= 1 << 20 {
            self.flush_buffer().await?;
        }
        Ok(())
    }

    /// Completes the upload.
    pub async fn finish(mut self) -> std::io::Result<WrittenResult> {
        self.flush_buffer().await?;
        self.writer.shutdown().await?;
        Ok(WrittenResult {
            rows: self.rows,
            bytes: self.bytes,
            small: self.copy.map(Bytes::from),
        })
    }

    /// Abandons the upload (cancellation, failure).
    pub async fn abort(mut self) {
        let _ = self.writer.abort().await;
        tracing::debug!(path = %self.path, "result upload abandoned");
    }
}

/// Where a page starts: the row number and the byte offset of that row in the
/// CSV (after the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub row: u64,
    pub offset: u64,
}

/// A page of rows; `next` is where the following page starts, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub rows: Vec<Vec<Option<String>>>,
    pub next: Option<PageCursor>,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("result file is not what this server writes: {0}")]
    Malformed(String),
}

/// Parses the CSV that `CsvResultWriter` writes, one byte at a time.
#[derive(Default)]
struct CsvRowParser {
    state: FieldState,
    field: Vec<u8>,
    row: Vec<Option<String>>,
}

#[derive(Default, PartialEq, Eq)]
enum FieldState {
    #[default]
    Start,
    Quoted,
    QuoteInQuoted,
}

impl CsvRowParser {
    fn take_field(&mut self, present: bool) -> Result<(), PageError> {
        let value = if present {
            let bytes = std::mem::take(&mut self.field);
            Some(String::from_utf8(bytes).map_err(|e| PageError::Malformed(e.to_string()))?)
        } else {
            None
        };
        self.row.push(value);
        Ok(())
    }

    /// Feeds one byte; returns a finished row at its newline.
    fn push(&mut self, byte: u8) -> Result<Option<Vec<Option<String>>>, PageError> {
        match (&self.state, byte) {
            (FieldState::Start, b'"') => self.state = FieldState::Quoted,
            (FieldState::Start, b',') => self.take_field(false)?,
            (FieldState::Start, b'\n') => {
                self.take_field(false)?;
                return Ok(Some(std::mem::take(&mut self.row)));
            }
            (FieldState::Start, other) => {
                return Err(PageError::Malformed(format!(
                    "unquoted byte {other:#04x} at a field start"
                )));
            }
            (FieldState::Quoted, b'"') => self.state = FieldState::QuoteInQuoted,
            (FieldState::Quoted, other) => self.field.push(other),
            (FieldState::QuoteInQuoted, b'"') => {
                self.field.push(b'"');
                self.state = FieldState::Quoted;
            }
            (FieldState::QuoteInQuoted, b',') => {
                self.take_field(true)?;
                self.state = FieldState::Start;
            }
            (FieldState::QuoteInQuoted, b'\n') => {
                self.take_field(true)?;
                self.state = FieldState::Start;
                return Ok(Some(std::mem::take(&mut self.row)));
            }
            (FieldState::QuoteInQuoted, other) => {
                return Err(PageError::Malformed(format!(
                    "byte {other:#04x} after a closing quote"
                )));
            }
        }
        Ok(None)
    }
}

/// Collects a page from the CSV's bytes, fed in order from `cursor.offset`.
struct PageBuilder {
    parser: CsvRowParser,
    offset: u64,
    skip_header: bool,
    row_number: u64,
    rows: Vec<Vec<Option<String>>>,
    limit: usize,
    total_bytes: u64,
}

impl PageBuilder {
    fn new(cursor: PageCursor, limit: usize, total_bytes: u64) -> Self {
        Self {
            parser: CsvRowParser::default(),
            offset: cursor.offset,
            skip_header: cursor.offset == 0,
            row_number: cursor.row,
            rows: Vec::new(),
            limit,
            total_bytes,
        }
    }

    /// Feeds bytes; returns the page once it is full.
    fn feed(&mut self, chunk: &[u8]) -> Result<Option<Page>, PageError> {
        for &byte in chunk {
            self.offset += 1;
            if let Some(row) = self.parser.push(byte)? {
                if self.skip_header {
                    self.skip_header = false;
                    continue;
                }
                self.rows.push(row);
                self.row_number += 1;
                if self.rows.len() == self.limit {
                    let next = (self.offset < self.total_bytes).then_some(PageCursor {
                        row: self.row_number,
                        offset: self.offset,
                    });
                    return Ok(Some(Page {
                        rows: std::mem::take(&mut self.rows),
                        next,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// The last page: the file ended.
    fn end(self) -> Page {
        Page {
            rows: self.rows,
            next: None,
        }
    }
}

/// Reads up to `limit` rows of the CSV at `path` (`total_bytes` long) from
/// `cursor`; at offset 0 the header row is skipped first.
pub async fn read_page(
    store: &dyn ObjectStore,
    path: &str,
    total_bytes: u64,
    cursor: PageCursor,
    limit: usize,
) -> Result<Page, PageError> {
    if cursor.offset >= total_bytes {
        return Ok(Page {
            rows: Vec::new(),
            next: None,
        });
    }
    let options = GetOptions {
        range: Some(GetRange::Bounded(cursor.offset..total_bytes)),
        ..Default::default()
    };
    let mut stream = store
        .get_opts(&Path::from(path), options)
        .await?
        .into_stream();
    let mut page = PageBuilder::new(cursor, limit, total_bytes);
    while let Some(chunk) = stream.next().await {
        if let Some(full) = page.feed(&chunk?)? {
            return Ok(full);
        }
    }
    Ok(page.end())
}

/// The same page as `read_page`, from the whole CSV in memory.
pub fn page_from_bytes(csv: &[u8], cursor: PageCursor, limit: usize) -> Result<Page, PageError> {
    let total_bytes = csv.len() as u64;
    let start = usize::try_from(cursor.offset).unwrap_or(usize::MAX);
    let Some(rest) = csv.get(start..).filter(|rest| !rest.is_empty()) else {
        return Ok(Page {
            rows: Vec::new(),
            next: None,
        });
    };
    let mut page = PageBuilder::new(cursor, limit, total_bytes);
    Ok(match page.feed(rest)? {
        Some(full) => full,
        None => page.end(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::{
        array::{
            Decimal128Array, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray,
        },
        datatypes::{Field, TimeUnit},
    };
    use object_store::{ObjectStoreExt as _, memory::InMemory};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("fare", DataType::Float64, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![
                    Some("plain"),
                    Some(""),
                    Some("a \"quoted\", comma\nnewline"),
                ])),
                Arc::new(Float64Array::from(vec![Some(1.5), None, Some(-0.25)])),
                Arc::new(
                    Decimal128Array::from(vec![Some(1230), Some(5), None])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_700_000_000_123_000),
                    None,
                    Some(0),
                ])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn column_info_uses_sql_type_names() {
        let columns = columns_of(batch().schema().as_ref());
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

    #[tokio::test]
    async fn csv_round_trips_through_pages_with_nulls_and_quotes() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let batch = batch();
        let mut writer = CsvResultWriter::create(store.clone(), "r.csv", &batch.schema())
            .await
            .unwrap();
        writer.write(&batch).await.unwrap();
        writer.write(&batch).await.unwrap();
        let written = writer.finish().await.unwrap();
        let (rows, bytes) = (written.rows, written.bytes);
        assert_eq!(rows, 6);
        let text = store
            .get(&Path::from("r.csv"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(text.len() as u64, bytes);
        let text = String::from_utf8(text.to_vec()).unwrap();
        assert!(
            text.starts_with(
                "\"id\",\"name\",\"fare\",\"amount\",\"at\"\n\
                 \"1\",\"plain\",\"1.5\",\"12.30\",\"2023-11-14 22:13:20.123\"\n\
                 \"2\",\"\",,\"0.05\",\n"
            ),
            "{text}"
        );

        let first = read_page(
            store.as_ref(),
            "r.csv",
            bytes,
            PageCursor { row: 0, offset: 0 },
            4,
        )
        .await
        .unwrap();
        assert_eq!(first.rows.len(), 4);
        assert_eq!(
            first.rows[2],
            vec![
                Some("3".to_string()),
                Some("a \"quoted\", comma\nnewline".to_string()),
                Some("-0.25".to_string()),
                None,
                Some("1970-01-01 00:00:00.000".to_string()),
            ]
        );
        assert_eq!(
            first.rows[1][1],
            Some(String::new()),
            "empty string is not NULL"
        );
        assert_eq!(first.rows[1][2], None);
        let next = first.next.expect("more rows");
        assert_eq!(next.row, 4);
        let second = read_page(store.as_ref(), "r.csv", bytes, next, 4)
            .await
            .unwrap();
        assert_eq!(second.rows.len(), 2);
        assert_eq!(second.rows[0][0].as_deref(), Some("2"));
        assert_eq!(second.next, None);

        // The writer kept the small result: the same pages from memory.
        let kept = written.small.expect("a small result is kept");
        assert_eq!(kept, text.as_bytes());
        let start = PageCursor { row: 0, offset: 0 };
        assert_eq!(page_from_bytes(&kept, start, 4).unwrap(), first);
        assert_eq!(page_from_bytes(&kept, next, 4).unwrap(), second);
        let past_end = PageCursor {
            row: 6,
            offset: bytes,
        };
        assert_eq!(page_from_bytes(&kept, past_end, 4).unwrap().rows.len(), 0);
    }

    #[tokio::test]
    async fn a_large_result_is_not_kept_in_memory() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let batch = batch();
        let mut writer = CsvResultWriter::create(store, "big.csv", &batch.schema())
            .await
            .unwrap();
        let mut written_rows = 0;
        while written_rows * 60 < SMALL_RESULT_BYTES as u64 * 2 {
            writer.write(&batch).await.unwrap();
            written_rows += 3;
        }
        let written = writer.finish().await.unwrap();
        assert!(written.bytes > SMALL_RESULT_BYTES as u64);
        assert!(written.small.is_none());
    }
}
