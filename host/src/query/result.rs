//! Result pages: a finished query's rows read back from its result CSV
//! (written by `result_writer`). A page (1,000 rows) starts at a byte offset
//! of that file, so page N costs one ranged read, not a re-run of the query.
//!
//! Pages are never held whole: `scan_page` reads a page's cells into a
//! `CellSink` as they arrive (`cells.rs`) and says where the page ends;
//! `PageCells` reads that same range again for a second sink, a chunk at a
//! time, which is how a front end streams a page it has measured. What the
//! cells become (the spec's JSON) is the front end's business, not this
//! module's.
//!
//! Column metadata (the spec's ColumnInfo) is kept beside the job in the store.

use std::{ops::ControlFlow, sync::Arc};

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use object_store::{GetOptions, GetRange, ObjectStore, path::Path};

mod cells;
mod page_source;

use cells::{Fed, RowReader};
pub use page_source::{PageExtent, PageSource};

/// Rows per result page (spec "Limits": first result page up to 1,000 rows).
pub const PAGE_ROWS: usize = 1000;

/// Where a page starts: the row number and the byte offset of that row in the
/// CSV (after the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub row: u64,
    pub offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("reading the result: {0}")]
    Read(#[from] std::io::Error),
    #[error("result file is not what this server writes: {0}")]
    Malformed(String),
}

/// What a page's cells are given to, in file order: for each row,
/// `row_start`, then per cell `cell_start`, its text in slices (none for
/// NULL), `cell_end`; then `row_end`. A `Break` stops the reading (a sink
/// that refuses a page too large for it).
pub trait CellSink {
    fn row_start(&mut self);
    /// A cell begins; `present` is false for NULL (then no text follows).
    fn cell_start(&mut self, present: bool);
    /// The next slice of the cell's text: UTF-8 together, but a slice may
    /// end inside a character.
    fn cell_text(&mut self, text: &[u8]) -> ControlFlow<()>;
    fn cell_end(&mut self);
    fn row_end(&mut self) -> ControlFlow<()>;
}

/// Where a result CSV's bytes are: a file in the lake, or a small result's
/// bytes in memory (its job's row, or this replica's recent results).
#[derive(Clone)]
pub enum CsvSource {
    Lake {
        store: Arc<dyn ObjectStore>,
        path: String,
        size: u64,
    },
    Memory(Bytes),
}

impl std::fmt::Debug for CsvSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CsvSource::Lake { path, size, .. } => f
                .debug_struct("Lake")
                .field("path", path)
                .field("size", size)
                .finish(),
            CsvSource::Memory(bytes) => f.debug_tuple("Memory").field(&bytes.len()).finish(),
        }
    }
}

type Chunks = BoxStream<'static, Result<Bytes, PageError>>;

impl CsvSource {
    /// The whole file's length.
    pub fn size(&self) -> u64 {
        match self {
            CsvSource::Lake { size, .. } => *size,
            CsvSource::Memory(bytes) => bytes.len() as u64,
        }
    }

    /// The bytes of `range` as they come. `exact`: the range is a measured
    /// page, read whole in large chunks (`lake::object_bytes`); otherwise the
    /// range runs to the file's end and the reader stops where the page
    /// does, so the object store's own small chunks waste least.
    async fn chunks(&self, range: std::ops::Range<u64>, exact: bool) -> Result<Chunks, PageError> {
        match self {
            CsvSource::Lake { store, path, .. } if exact => {
                Ok(crate::lake::object_bytes(store.as_ref(), path, Some(range))
                    .await?
                    .map_err(PageError::Read)
                    .boxed())
            }
            CsvSource::Lake { store, path, .. } => {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range)),
                    ..Default::default()
                };
                Ok(store
                    .get_opts(&Path::from(path.as_str()), options)
                    .await?
                    .into_stream()
                    .map_err(PageError::Store)
                    .boxed())
            }
            CsvSource::Memory(bytes) => {
                let clamp = |at: u64| usize::try_from(at).unwrap_or(usize::MAX).min(bytes.len());
                let part =
                    bytes.slice(clamp(range.start)..clamp(range.end).max(clamp(range.start)));
                Ok(futures::stream::once(async move { Ok(part) }).boxed())
            }
        }
    }
}

/// What reading a page found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageScan {
    /// Rows given to the sink.
    pub rows: usize,
    /// The offset just after the page's last row.
    pub end: u64,
    /// Where the next page starts, when the file goes on.
    pub next: Option<PageCursor>,
    /// The sink stopped the reading: `rows`, `end` and `next` are not the
    /// page's.
    pub stopped: bool,
}

/// Reads up to `limit` rows of the CSV from `cursor` into `sink` (at offset
/// 0 the header row is skipped first), holding one chunk at a time.
pub async fn scan_page(
    source: &CsvSource,
    cursor: PageCursor,
    limit: usize,
    sink: &mut impl CellSink,
) -> Result<PageScan, PageError> {
    let size = source.size();
    if cursor.offset >= size {
        return Ok(PageScan {
            rows: 0,
            end: cursor.offset,
            next: None,
            stopped: false,
        });
    }
    let mut chunks = source.chunks(cursor.offset..size, false).await?;
    let mut reader = RowReader::new(limit, cursor.offset == 0);
    while let Some(chunk) = chunks.next().await {
        let fed = reader.feed(&chunk?, &mut *sink)?;
        let end = cursor.offset + reader.consumed;
        match fed {
            Fed::More => {}
            Fed::Full => {
                let next = (end < size).then_some(PageCursor {
                    row: cursor.row + reader.rows as u64,
                    offset: end,
                });
                return Ok(PageScan {
                    rows: reader.rows,
                    end,
                    next,
                    stopped: false,
                });
            }
            Fed::Stopped => {
                return Ok(PageScan {
                    rows: reader.rows,
                    end,
                    next: None,
                    stopped: true,
                });
            }
        }
    }
    reader.finish()?;
    Ok(PageScan {
        rows: reader.rows,
        end: size,
        next: None,
        stopped: false,
    })
}

/// The cells of a page `scan_page` measured, read again for another sink a
/// chunk at a time (`feed_next`): the range the scan found, no further.
pub struct PageCells {
    source: CsvSource,
    cursor: PageCursor,
    scan: PageScan,
    reader: RowReader,
    chunks: Option<Chunks>,
    done: bool,
}

impl PageCells {
    pub fn new(source: CsvSource, cursor: PageCursor, scan: PageScan) -> Self {
        Self {
            source,
            cursor,
            reader: RowReader::new(scan.rows, cursor.offset == 0),
            scan,
            chunks: None,
            done: scan.rows == 0,
        }
    }

    /// Gives the next chunk's cells to `sink`; false once every row of the
    /// page was given. A page that reads back otherwise than it was
    /// measured (the file changed) is `Malformed`.
    pub async fn feed_next(&mut self, sink: &mut impl CellSink) -> Result<bool, PageError> {
        if self.done {
            return Ok(false);
        }
        if self.chunks.is_none() {
            let range = self.cursor.offset..self.scan.end;
            self.chunks = Some(self.source.chunks(range, true).await?);
        }
        let Some(chunks) = self.chunks.as_mut() else {
            return Ok(false);
        };
        let changed = || PageError::Malformed("the page changed since it was measured".into());
        match chunks.next().await {
            Some(chunk) => match self.reader.feed(&chunk?, sink)? {
                Fed::More => Ok(true),
                Fed::Full => {
                    self.done = true;
                    Ok(false)
                }
                Fed::Stopped => Err(changed()),
            },
            None => {
                self.reader.finish()?;
                if self.reader.rows != self.scan.rows {
                    return Err(changed());
                }
                self.done = true;
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{
            Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
            TimestampMicrosecondArray,
        },
        datatypes::{DataType, Field, Schema, TimeUnit},
    };

    use super::*;
    use crate::{config::SMALL_RESULT_BYTES, query::result_writer::CsvResultWriter};
    use object_store::memory::InMemory;

    /// A sink that keeps the rows it is given (tests only: pages are never
    /// held whole otherwise), and may stop after `stop_after` rows.
    #[derive(Default)]
    pub struct RowCollector {
        pub rows: Vec<Vec<Option<String>>>,
        cell: Option<Vec<u8>>,
        pub stop_after: Option<usize>,
    }

    impl CellSink for RowCollector {
        fn row_start(&mut self) {
            self.rows.push(Vec::new());
        }
        fn cell_start(&mut self, present: bool) {
            self.cell = present.then(Vec::new);
        }
        fn cell_text(&mut self, text: &[u8]) -> ControlFlow<()> {
            self.cell
                .as_mut()
                .expect("text in a NULL")
                .extend_from_slice(text);
            ControlFlow::Continue(())
        }
        fn cell_end(&mut self) {
            let cell = self.cell.take().map(|b| String::from_utf8(b).unwrap());
            self.rows.last_mut().unwrap().push(cell);
        }
        fn row_end(&mut self) -> ControlFlow<()> {
            match self.stop_after {
                Some(n) if self.rows.len() >= n => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }

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

    async fn rows_of(
        source: &CsvSource,
        cursor: PageCursor,
        limit: usize,
    ) -> (Vec<Vec<Option<String>>>, PageScan) {
        let mut rows = RowCollector::default();
        let scan = scan_page(source, cursor, limit, &mut rows).await.unwrap();
        // Read again from the measured range: the same rows.
        let mut again = RowCollector::default();
        let mut cells = PageCells::new(source.clone(), cursor, scan);
        while cells.feed_next(&mut again).await.unwrap() {}
        assert_eq!(again.rows, rows.rows);
        (rows.rows, scan)
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
        let text = crate::lake::stored_bytes(store.as_ref(), "r.csv").await;
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

        let lake = CsvSource::Lake {
            store: store.clone(),
            path: "r.csv".into(),
            size: bytes,
        };
        let start = PageCursor { row: 0, offset: 0 };
        let (first, scan) = rows_of(&lake, start, 4).await;
        assert_eq!(first.len(), 4);
        assert_eq!(
            first[2],
            vec![
                Some("3".to_string()),
                Some("a \"quoted\", comma\nnewline".to_string()),
                Some("-0.25".to_string()),
                None,
                Some("1970-01-01 00:00:00.000".to_string()),
            ]
        );
        assert_eq!(first[1][1], Some(String::new()), "empty string is not NULL");
        assert_eq!(first[1][2], None);
        let next = scan.next.expect("more rows");
        assert_eq!(next.row, 4);
        assert_eq!(next.offset, scan.end);
        let (second, last) = rows_of(&lake, next, 4).await;
        assert_eq!(second.len(), 2);
        assert_eq!(second[0][0].as_deref(), Some("2"));
        assert_eq!((last.next, last.end), (None, bytes));

        // The writer kept the small result: the same pages from memory.
        let kept = written.small.expect("a small result is kept");
        assert_eq!(kept, text.as_bytes());
        let memory = CsvSource::Memory(kept);
        assert_eq!(rows_of(&memory, start, 4).await, (first, scan));
        assert_eq!(rows_of(&memory, next, 4).await, (second, last));
        let past_end = PageCursor {
            row: 6,
            offset: bytes,
        };
        assert_eq!(rows_of(&memory, past_end, 4).await.0.len(), 0);
    }

    #[tokio::test]
    async fn a_sink_that_stops_ends_the_reading_there() {
        let csv = "\"n\"\n\"1\"\n\"2\"\n\"3\"\n";
        let source = CsvSource::Memory(Bytes::from_static(csv.as_bytes()));
        let mut rows = RowCollector {
            stop_after: Some(2),
            ..RowCollector::default()
        };
        let start = PageCursor { row: 0, offset: 0 };
        let scan = scan_page(&source, start, 1000, &mut rows).await.unwrap();
        assert!(scan.stopped);
        assert_eq!((scan.rows, scan.next), (2, None));
        assert_eq!(rows.rows.len(), 2);
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
