//! A page's rows as the items of `resultSet.Rows`, written cell by cell as
//! the result CSV is read (`query::result::CellSink`): byte for byte what
//! serde_json writes for `page_body`'s rows, without holding a row or a
//! cell. Text is escaped as serde_json escapes it (`"`, `\`, and control
//! characters: `\b \t \n \f \r` or `\u00xx`; everything else as it is).
//!
//! It keeps what it writes only up to the bound it is given, then only
//! counts; it never holds more.

use std::ops::ControlFlow;

use bytes::Bytes;

use super::{NativeKind, PageShape};
use crate::{engine::columns::ResultColumn, query::result::CellSink};

/// The longest cell of a native integer, float or boolean column read as a
/// value: the CSV's text of such a value is at most 24 bytes. A longer one
/// is not that type's text and stays a string, as `NativeKind::value` keeps
/// any text that does not read as its column's type.
const NUMBER_BYTES: usize = 64;

/// The cell being written.
enum Cell {
    /// NULL: written whole at its start.
    Null,
    /// A string: opened at its start, escaped as it comes, closed at its end.
    Text,
    /// A native number or boolean: its text, written as a value at its end.
    Number(Vec<u8>),
}

/// Writes rows (after the header row, if `after_item`) as JSON.
pub(super) struct RowsJson {
    shape: PageShape,
    kinds: Vec<NativeKind>,
    /// Written and not yet taken, while keeping.
    out: Vec<u8>,
    /// Bytes written in all, kept or not.
    written: u64,
    /// Written bytes are kept up to this many; past it, only counted.
    keep: u64,
    /// Past this many bytes written, the sink stops the reading.
    max: u64,
    /// An item (the header row or a row) came before: a comma goes first.
    after_item: bool,
    column: usize,
    cell: Cell,
}

impl RowsJson {
    /// A sink for rows of `columns`, after the header row when `after_item`,
    /// keeping up to `keep` bytes and stopping past `max`.
    pub fn new(
        shape: PageShape,
        columns: &[ResultColumn],
        after_item: bool,
        keep: u64,
        max: u64,
    ) -> Self {
        Self {
            shape,
            kinds: columns.iter().map(NativeKind::of).collect(),
            out: Vec::new(),
            written: 0,
            keep,
            max,
            after_item,
            column: 0,
            cell: Cell::Null,
        }
    }

    /// Bytes written in all.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Every byte written, when all were kept.
    pub fn whole(self) -> Option<Vec<u8>> {
        (self.written <= self.keep).then_some(self.out)
    }

    /// Bytes written and not yet taken.
    pub fn pending(&self) -> usize {
        self.out.len()
    }

    /// Takes what was written so far.
    pub fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.out))
    }

    fn put(&mut self, bytes: &[u8]) {
        self.written += bytes.len() as u64;
        if self.written <= self.keep {
            self.out.extend_from_slice(bytes);
        } else if !self.out.is_empty() {
            self.out = Vec::new();
        }
    }

    /// `text` inside a JSON string, escaped as serde_json escapes it.
    fn put_escaped(&mut self, text: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut run = 0;
        for (at, &byte) in text.iter().enumerate() {
            let control;
            let escape: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0x08 => b"\\b",
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                0x0c => b"\\f",
                b'\r' => b"\\r",
                0..=0x1f => {
                    control = [
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(byte >> 4)],
                        HEX[usize::from(byte & 0xf)],
                    ];
                    &control
                }
                _ => continue,
            };
            self.put(&text[run..at]);
            self.put(escape);
            run = at + 1;
        }
        self.put(&text[run..]);
    }

    fn within_max(&self) -> ControlFlow<()> {
        if self.written > self.max {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl CellSink for RowsJson {
    fn row_start(&mut self) {
        if self.after_item {
            self.put(b",");
        }
        self.after_item = true;
        self.put(b"{\"Data\":[");
        self.column = 0;
    }

    fn cell_start(&mut self, present: bool) {
        if self.column > 0 {
            self.put(b",");
        }
        let kind = self
            .kinds
            .get(self.column)
            .copied()
            .unwrap_or(NativeKind::Text);
        self.cell = match (self.shape, present, kind) {
            (PageShape::Spec, false, _) => {
                self.put(b"{}");
                Cell::Null
            }
            (PageShape::Native, false, _) => {
                self.put(b"null");
                Cell::Null
            }
            (PageShape::Spec, true, _) => {
                self.put(b"{\"VarCharValue\":\"");
                Cell::Text
            }
            (PageShape::Native, true, NativeKind::Text) => {
                self.put(b"\"");
                Cell::Text
            }
            (PageShape::Native, true, _) => Cell::Number(Vec::new()),
        };
    }

    fn cell_text(&mut self, text: &[u8]) -> ControlFlow<()> {
        match &mut self.cell {
            Cell::Number(number) if number.len() + text.len() <= NUMBER_BYTES => {
                number.extend_from_slice(text);
            }
            Cell::Number(number) => {
                // Too long to be the column's type: a string from here on.
                let number = std::mem::take(number);
                self.cell = Cell::Text;
                self.put(b"\"");
                self.put_escaped(&number);
                self.put_escaped(text);
            }
            Cell::Text => self.put_escaped(text),
            // The reader gives no text to a NULL.
            Cell::Null => {}
        }
        self.within_max()
    }

    fn cell_end(&mut self) {
        match std::mem::replace(&mut self.cell, Cell::Null) {
            Cell::Null => {}
            Cell::Text => match self.shape {
                PageShape::Spec => self.put(b"\"}"),
                PageShape::Native => self.put(b"\""),
            },
            Cell::Number(number) => {
                let kind = self
                    .kinds
                    .get(self.column)
                    .copied()
                    .unwrap_or(NativeKind::Text);
                // The reader checked the file's UTF-8.
                let text = String::from_utf8_lossy(&number);
                let value = serde_json::to_vec(&kind.value(&text)).unwrap_or_default();
                self.put(&value);
            }
        }
        self.column += 1;
    }

    fn row_end(&mut self) -> ControlFlow<()> {
        self.put(b"]}");
        self.within_max()
    }
}
