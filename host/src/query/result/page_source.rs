//! A page as the query service hands it to a front end: where its rows are
//! (`PageSource`, before any is read) and what its first reading found
//! (`PageExtent`). Neither holds a row.

use super::{CsvSource, PageCells, PageCursor, PageScan};
use crate::engine::columns::ResultColumn;

/// A page of a SUCCEEDED query's result before its rows are read: its
/// columns, whether it is the first (the spec's header row comes first), and
/// where its rows are. `QueryService::scan_page` reads them.
#[derive(Debug)]
pub struct PageSource {
    pub query_id: String,
    pub columns: Vec<ResultColumn>,
    pub first: bool,
    cursor: PageCursor,
    csv: CsvSource,
}

impl PageSource {
    pub(crate) fn new(
        query_id: String,
        columns: Vec<ResultColumn>,
        cursor: PageCursor,
        csv: CsvSource,
    ) -> Self {
        Self {
            query_id,
            columns,
            first: cursor.offset == 0,
            cursor,
            csv,
        }
    }

    pub(crate) fn csv(&self) -> &CsvSource {
        &self.csv
    }

    pub(crate) fn cursor(&self) -> PageCursor {
        self.cursor
    }

    /// The page's cells again, exactly the rows `extent` counted, for a
    /// body streamed after its page was measured.
    pub fn cells(&self, extent: &PageExtent) -> PageCells {
        PageCells::new(self.csv.clone(), self.cursor, extent.scan)
    }
}

/// What `QueryService::scan_page` found.
#[derive(Debug, Clone)]
pub struct PageExtent {
    /// Rows given to the sink.
    pub rows: usize,
    /// The sink stopped the reading; the rest says nothing about the page.
    pub stopped: bool,
    /// The next page's token, when the result goes on.
    pub next_token: Option<String>,
    scan: PageScan,
}

impl PageExtent {
    pub(crate) fn new(scan: PageScan, next_token: Option<String>) -> Self {
        Self {
            rows: scan.rows,
            stopped: scan.stopped,
            next_token,
            scan,
        }
    }
}
