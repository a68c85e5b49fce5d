//! Result pages: a finished query's rows read back from its result CSV
//! (written by `result_writer`). Pages (1,000 rows, the spec's JSON shape)
//! are parsed from that same file starting at a byte offset, so page N costs
//! one ranged read, not a re-run of the query.
//!
//! Column metadata (the spec's ColumnInfo) is kept beside the job in the store.

use futures::StreamExt as _;
use object_store::{GetOptions, GetRange, ObjectStore, path::Path};

/// Rows per result page (spec "Limits": first result page up to 1,000 rows).
pub const PAGE_ROWS: usize = 1000;

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
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{
            Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
            TimestampMicrosecondArray,
        },
        datatypes::{DataType, Field, Schema, TimeUnit},
    };

    use super::*;
    use crate::query::result_writer::{CsvResultWriter, SMALL_RESULT_BYTES};
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
