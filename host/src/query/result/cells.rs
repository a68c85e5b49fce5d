//! The result CSV as `CsvResultWriter` writes it (every value quoted, `""`
//! inside, NULL an empty unquoted field, `\n` after each row, UTF-8) read
//! cell by cell into a `CellSink`, a chunk at a time. It holds no row and no
//! cell: a cell's text goes to the sink in the slices it arrives in, so a
//! page of very wide rows costs the reader nothing but its chunk.
//!
//! It must never accept bytes the writer does not write: anything else is
//! `PageError::Malformed`, never a guess.

use std::ops::ControlFlow;

use super::{CellSink, PageError};

/// Where the reader is inside a field.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum FieldState {
    /// Before a field's first byte (a row's start, or after a comma).
    #[default]
    Start,
    /// Inside a quoted value.
    Quoted,
    /// Just after a quote inside a quoted value: `""` or the value's end.
    QuoteInQuoted,
}

/// How far a chunk took the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fed {
    /// The chunk is read; the page wants more.
    More,
    /// The page's last row ended inside the chunk (`RowReader::consumed`
    /// says where); the rest of the chunk is not the page's.
    Full,
    /// The sink stopped the reading.
    Stopped,
}

/// Reads the rows of one page, from a row's start, into a sink.
pub(super) struct RowReader {
    state: FieldState,
    in_row: bool,
    /// The CSV's header row (a page from offset 0), read but not given.
    skip_row: bool,
    utf8: Utf8Check,
    /// Bytes read, from the page's first byte up to where reading stopped.
    pub consumed: u64,
    /// Rows given to the sink.
    pub rows: usize,
    limit: usize,
}

impl RowReader {
    /// A reader of at most `limit` rows; `skip_header` for a page read from
    /// the file's start, where the column names come first.
    pub fn new(limit: usize, skip_header: bool) -> Self {
        Self {
            state: FieldState::Start,
            in_row: false,
            skip_row: skip_header,
            utf8: Utf8Check::default(),
            consumed: 0,
            rows: 0,
            limit,
        }
    }

    /// Reads `chunk`, the bytes after those read so far.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl CellSink) -> Result<Fed, PageError> {
        self.utf8.check(chunk)?;
        let mut at = 0;
        while at < chunk.len() {
            match self.state {
                FieldState::Start => {
                    let byte = chunk[at];
                    at += 1;
                    match byte {
                        b'"' => {
                            self.open_cell(sink, true);
                            self.state = FieldState::Quoted;
                        }
                        b',' => {
                            self.open_cell(sink, false);
                            self.close_cell(sink);
                        }
                        b'\n' => {
                            self.open_cell(sink, false);
                            self.close_cell(sink);
                            if let Some(fed) = self.end_row(sink) {
                                self.consumed += at as u64;
                                return Ok(fed);
                            }
                        }
                        other => {
                            return Err(PageError::Malformed(format!(
                                "unquoted byte {other:#04x} at a field start"
                            )));
                        }
                    }
                }
                FieldState::Quoted => {
                    let rest = &chunk[at..];
                    let run = rest.iter().position(|&b| b == b'"').unwrap_or(rest.len());
                    if run > 0 && self.text(sink, &rest[..run]).is_break() {
                        self.consumed += (at + run) as u64;
                        return Ok(Fed::Stopped);
                    }
                    at += run;
                    if at < chunk.len() {
                        at += 1;
                        self.state = FieldState::QuoteInQuoted;
                    }
                }
                FieldState::QuoteInQuoted => {
                    let byte = chunk[at];
                    at += 1;
                    match byte {
                        b'"' => {
                            self.state = FieldState::Quoted;
                            if self.text(sink, b"\"").is_break() {
                                self.consumed += at as u64;
                                return Ok(Fed::Stopped);
                            }
                        }
                        b',' => {
                            self.close_cell(sink);
                            self.state = FieldState::Start;
                        }
                        b'\n' => {
                            self.close_cell(sink);
                            self.state = FieldState::Start;
                            if let Some(fed) = self.end_row(sink) {
                                self.consumed += at as u64;
                                return Ok(fed);
                            }
                        }
                        other => {
                            return Err(PageError::Malformed(format!(
                                "byte {other:#04x} after a closing quote"
                            )));
                        }
                    }
                }
            }
        }
        self.consumed += chunk.len() as u64;
        Ok(Fed::More)
    }

    /// The file ended: nothing may be left half read.
    pub fn finish(&self) -> Result<(), PageError> {
        if self.in_row || self.state != FieldState::Start {
            return Err(PageError::Malformed("the file ends inside a row".into()));
        }
        self.utf8.finish()
    }

    fn open_cell(&mut self, sink: &mut impl CellSink, present: bool) {
        if !self.in_row {
            self.in_row = true;
            if !self.skip_row {
                sink.row_start();
            }
        }
        if !self.skip_row {
            sink.cell_start(present);
        }
    }

    fn text(&mut self, sink: &mut impl CellSink, text: &[u8]) -> ControlFlow<()> {
        if self.skip_row {
            return ControlFlow::Continue(());
        }
        sink.cell_text(text)
    }

    fn close_cell(&mut self, sink: &mut impl CellSink) {
        if !self.skip_row {
            sink.cell_end();
        }
    }

    /// A row's newline: where the reading stops, if it does.
    fn end_row(&mut self, sink: &mut impl CellSink) -> Option<Fed> {
        self.in_row = false;
        if self.skip_row {
            self.skip_row = false;
            return None;
        }
        self.rows += 1;
        if sink.row_end().is_break() {
            return Some(Fed::Stopped);
        }
        (self.rows >= self.limit).then_some(Fed::Full)
    }
}

/// Checks that chunks are UTF-8 together, a character possibly cut at a
/// chunk's edge. The delimiters are ASCII, so a valid file has valid cells.
#[derive(Debug, Default)]
struct Utf8Check {
    /// The start of a character the last chunk ended inside (at most 3 bytes).
    carry: Vec<u8>,
}

impl Utf8Check {
    fn check(&mut self, mut chunk: &[u8]) -> Result<(), PageError> {
        let not_utf8 = || PageError::Malformed("a value is not UTF-8".into());
        while !self.carry.is_empty() {
            let Some((&byte, rest)) = chunk.split_first() else {
                return Ok(());
            };
            self.carry.push(byte);
            chunk = rest;
            match std::str::from_utf8(&self.carry) {
                Ok(_) => self.carry.clear(),
                Err(e) if e.error_len().is_none() => {}
                Err(_) => return Err(not_utf8()),
            }
        }
        match std::str::from_utf8(chunk) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                self.carry.extend_from_slice(&chunk[e.valid_up_to()..]);
                Ok(())
            }
            Err(_) => Err(not_utf8()),
        }
    }

    fn finish(&self) -> Result<(), PageError> {
        if self.carry.is_empty() {
            Ok(())
        } else {
            Err(PageError::Malformed(
                "the file ends inside a character".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::result::tests::RowCollector;

    const CSV: &str = "\"a\",\"b\"\n\"1\",\"x, \"\"y\"\"\nz\"\n,\"\"\n\"é€😀\",\n";

    fn read(chunks: &[&[u8]], limit: usize) -> (RowCollector, Fed, u64) {
        let mut reader = RowReader::new(limit, true);
        let mut rows = RowCollector::default();
        for chunk in chunks {
            let fed = reader.feed(chunk, &mut rows).unwrap();
            if fed != Fed::More {
                return (rows, fed, reader.consumed);
            }
        }
        reader.finish().unwrap();
        (rows, Fed::More, reader.consumed)
    }

    #[test]
    fn cells_come_out_the_same_whatever_the_chunks() {
        let whole = read(&[CSV.as_bytes()], 10);
        let expected = vec![
            vec![Some("1".to_string()), Some("x, \"y\"\nz".to_string())],
            vec![None, Some(String::new())],
            vec![Some("é€😀".to_string()), None],
        ];
        assert_eq!(whole.0.rows, expected);
        assert_eq!(whole.2, CSV.len() as u64);
        // Every byte its own chunk: quotes, escapes and characters cut.
        let bytes: Vec<&[u8]> = CSV.as_bytes().chunks(1).collect();
        assert_eq!(read(&bytes, 10).0.rows, expected);
        for cut in 0..CSV.len() {
            let (a, b) = CSV.as_bytes().split_at(cut);
            assert_eq!(read(&[a, b], 10).0.rows, expected, "cut at {cut}");
        }
    }

    #[test]
    fn a_full_page_stops_after_its_last_row() {
        let (rows, fed, consumed) = read(&[CSV.as_bytes()], 2);
        assert_eq!(fed, Fed::Full);
        assert_eq!(rows.rows.len(), 2);
        let third = CSV.find("\"é").unwrap() as u64;
        assert_eq!(consumed, third, "the next page starts at the third row");
    }

    #[test]
    fn bytes_the_writer_never_writes_are_refused() {
        for bad in [
            b"x\n".as_slice(),
            b"\"a\"x\n",
            b"\"a\n",
            b"\"\xff\"\n",
            b"\"\xc3\"\n",
        ] {
            let mut reader = RowReader::new(10, false);
            let mut rows = RowCollector::default();
            let outcome = reader.feed(bad, &mut rows).and_then(|_| reader.finish());
            assert!(
                matches!(outcome, Err(PageError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
