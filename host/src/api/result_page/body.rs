//! A result page's body without the page held whole. Rows are capped at
//! 1,000 by the spec; their bytes are not, so a page of wide rows can be
//! hundreds of megabytes, and a body built whole costs that much per reader
//! for as long as the reader is slow (issue 45).
//!
//! So a page is read in two passes at most. `read_page` reads its cells once
//! (`QueryService::scan_page`), writing their JSON while it stays under
//! `WHOLE_ROWS_BYTES` and only counting past that, which gives the page's
//! exact length (its `Content-Length`) and its `nextToken`, which the
//! envelope holds before the rows (serde_json writes keys sorted). A page
//! under the bound is then answered from memory, as before; a larger one is
//! read again as its body is sent, a chunk at a time, so a slow reader holds
//! one chunk of the file and about `STREAM_CHUNK_BYTES` of JSON, never the
//! page. A page longer than `query.max_page_bytes` is refused with 409 (the
//! first pass stops there): it is what the whole-result downloads are for,
//! and refusing it bounds the reading one request costs.
//!
//! The envelope is `page_body`'s, serialized with a stand-in string for the
//! rows that is then cut out, so keys, order and escapes stay serde_json's
//! and the body is byte for byte the one `page_body` gives for the same page.

use axum::{
    body::Body,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse as _, Response},
};
use bytes::Bytes;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde_json::{Map, Value};

use super::{PageShape, header_row, page_body, rows_json::RowsJson};
use crate::{
    api::error::{ApiError, QueryOperation},
    query::{
        QueryService,
        result::{PageCells, PageError, PageExtent, PageSource},
        service::ResultPage,
    },
};

/// The most rows' JSON a page keeps from its first reading: a page whose
/// rows come to more is read again as it is sent.
pub const WHOLE_ROWS_BYTES: u64 = 256 * 1024;

/// About how much JSON a streamed page sends at a time.
const STREAM_CHUNK_BYTES: usize = 64 * 1024;

/// What stands for the rows in the serialized envelope. Its serialized form
/// (`"Rows":"\u0000rows\u0000"`) cannot occur inside another string of the
/// envelope, where every quote is escaped.
const ROWS_STAND_IN: &str = "\u{0}rows\u{0}";

/// A page read once: its extent, and its rows' JSON when they are small.
pub struct PageRows {
    source: PageSource,
    shape: PageShape,
    extent: PageExtent,
    /// The header row's JSON (the first page), else empty.
    header: Vec<u8>,
    /// The rows' JSON, when at most `WHOLE_ROWS_BYTES`.
    whole: Option<Vec<u8>>,
    rows_bytes: u64,
}

/// The first reading of `source`'s page in `shape`: 409 when its body would
/// be longer than `max_bytes` (`query.max_page_bytes`).
pub async fn read_page(
    queries: &QueryService,
    source: PageSource,
    shape: PageShape,
    max_bytes: u64,
) -> Result<PageRows, ApiError> {
    let mut first = FirstReading::new(source, shape, WHOLE_ROWS_BYTES, max_bytes)?;
    let extent = queries
        .scan_page(&first.source, &mut first.sink)
        .await
        .map_err(|e| ApiError::query(e, QueryOperation::Results))?;
    first.finish(extent)
}

/// A page's first reading, before and after its rows are scanned.
struct FirstReading {
    source: PageSource,
    shape: PageShape,
    header: Vec<u8>,
    sink: RowsJson,
    max_bytes: u64,
}

impl FirstReading {
    fn new(
        source: PageSource,
        shape: PageShape,
        keep: u64,
        max_bytes: u64,
    ) -> Result<Self, ApiError> {
        let header = if source.first && !source.columns.is_empty() {
            serde_json::to_vec(&header_row(&source.columns, shape))
                .map_err(|e| ApiError::failed("result page header", e))?
        } else {
            Vec::new()
        };
        let sink = RowsJson::new(shape, &source.columns, !header.is_empty(), keep, max_bytes);
        Ok(Self {
            source,
            shape,
            header,
            sink,
            max_bytes,
        })
    }

    fn finish(self, extent: PageExtent) -> Result<PageRows, ApiError> {
        if extent.stopped {
            return Err(too_large(&self.source.query_id, self.max_bytes));
        }
        let page = PageRows {
            rows_bytes: self.sink.written(),
            whole: self.sink.whole(),
            source: self.source,
            shape: self.shape,
            extent,
            header: self.header,
        };
        let (prefix, suffix) = page.around_rows(&Value::Object(page.fields()))?;
        if page.length(&prefix, &suffix) > self.max_bytes {
            return Err(too_large(&page.source.query_id, self.max_bytes));
        }
        Ok(page)
    }
}

/// 409: the page is too long to answer as JSON. Not a 5xx: the result is
/// there and asking again gives the same answer; the same 409 this endpoint
/// answers when a result cannot be given in the form asked for.
fn too_large(query_id: &str, max_bytes: u64) -> ApiError {
    ApiError::Conflict(format!(
        "This result page is larger than {max_bytes} bytes as JSON, the most this service \
         answers in one page (query.max_page_bytes). Get the whole result as CSV \
         (GET /v2/query/{query_id}/csv, or this endpoint with Accept: text/csv) or as an Arrow \
         IPC stream (Accept: application/vnd.apache.arrow.stream), or select fewer or \
         narrower columns."
    ))
}

impl PageRows {
    /// The page's fields (`resultSet`, and `nextToken` when there are more
    /// rows), a stand-in where the rows go: put them in the answer's object
    /// and give that to `into_body`.
    pub fn fields(&self) -> Map<String, Value> {
        let envelope = ResultPage {
            columns: self.source.columns.clone(),
            first: self.source.first,
            rows: Vec::new(),
            next_token: self.extent.next_token.clone(),
        };
        let mut body = page_body(&envelope, self.shape);
        body["resultSet"]["Rows"] = Value::String(ROWS_STAND_IN.into());
        match body {
            Value::Object(fields) => fields,
            _ => Map::new(),
        }
    }

    /// The body: `object` (holding `fields()`) with the rows in place.
    pub fn into_body(self, object: &Value) -> Result<PageBody, ApiError> {
        let (prefix, suffix) = self.around_rows(object)?;
        let length = self.length(&prefix, &suffix);
        let content = match self.whole {
            Some(rows) => Content::Whole([prefix, rows, suffix].concat()),
            None => Content::Streamed(Box::new(Streamed {
                cells: self.source.cells(&self.extent),
                sink: RowsJson::new(
                    self.shape,
                    &self.source.columns,
                    !self.header.is_empty(),
                    u64::MAX,
                    u64::MAX,
                ),
                prefix: Bytes::from(prefix),
                suffix: Bytes::from(suffix),
            })),
        };
        Ok(PageBody { length, content })
    }

    /// `object` serialized, cut where the rows go: what comes before them
    /// (up to the header row) and after.
    fn around_rows(&self, object: &Value) -> Result<(Vec<u8>, Vec<u8>), ApiError> {
        let text =
            serde_json::to_vec(object).map_err(|e| ApiError::failed("result page envelope", e))?;
        let stand_in = format!("\"Rows\":{}", Value::String(ROWS_STAND_IN.into()));
        let at = text
            .windows(stand_in.len())
            .position(|window| window == stand_in.as_bytes())
            .ok_or_else(|| ApiError::broken("result page envelope: no place for the rows"))?;
        let prefix = [
            &text[..at],
            b"\"Rows\":[".as_slice(),
            self.header.as_slice(),
        ]
        .concat();
        let suffix = [b"]".as_slice(), &text[at + stand_in.len()..]].concat();
        Ok((prefix, suffix))
    }

    fn length(&self, prefix: &[u8], suffix: &[u8]) -> u64 {
        prefix.len() as u64 + self.rows_bytes + suffix.len() as u64
    }
}

/// An answer's body holding a page: whole, or streamed from the result.
pub struct PageBody {
    length: u64,
    content: Content,
}

enum Content {
    Whole(Vec<u8>),
    Streamed(Box<Streamed>),
}

/// A page body read again as it is sent: the envelope around its rows.
struct Streamed {
    prefix: Bytes,
    cells: PageCells,
    sink: RowsJson,
    suffix: Bytes,
}

impl PageBody {
    /// A body in memory (an answer without a page).
    pub fn whole(bytes: Vec<u8>) -> Self {
        Self {
            length: bytes.len() as u64,
            content: Content::Whole(bytes),
        }
    }

    /// The body's exact length.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Whether the body is read from the result as it is sent.
    pub fn is_streamed(&self) -> bool {
        matches!(self.content, Content::Streamed(_))
    }

    /// 200 with this body, its `Content-Type` and `Content-Length`.
    pub fn into_response(self, content_type: &'static str) -> Response {
        let body = match self.content {
            Content::Whole(bytes) => Body::from(bytes),
            Content::Streamed(streamed) => {
                let Streamed {
                    prefix,
                    cells,
                    sink,
                    suffix,
                } = *streamed;
                let span = tracing::Span::current();
                let rows = streamed_rows(cells, sink).inspect_err(move |e| {
                    // The status is sent: the client sees the body cut short.
                    tracing::error!(parent: &span, error = %e, "a streamed result page failed");
                });
                let parts = futures::stream::once(async move { Ok(prefix) })
                    .chain(rows)
                    .chain(futures::stream::once(async move { Ok(suffix) }));
                Body::from_stream(parts)
            }
        };
        let mut response = (StatusCode::OK, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(self.length));
        response
    }
}

/// The rows' JSON, written as the page is read again, sent about
/// `STREAM_CHUNK_BYTES` at a time (or a file chunk's worth, when more).
fn streamed_rows(
    cells: PageCells,
    sink: RowsJson,
) -> impl Stream<Item = Result<Bytes, PageError>> + Send + 'static {
    futures::stream::try_unfold(Some((cells, sink)), next_rows)
}

type Streaming = Option<(PageCells, RowsJson)>;

/// The next chunk of a streamed page's rows, and what is left to stream.
async fn next_rows(state: Streaming) -> Result<Option<(Bytes, Streaming)>, PageError> {
    let Some((mut cells, mut sink)) = state else {
        return Ok(None);
    };
    loop {
        if !cells.feed_next(&mut sink).await? {
            return Ok(Some((sink.take(), None)));
        }
        if sink.pending() >= STREAM_CHUNK_BYTES {
            let chunk = sink.take();
            return Ok(Some((chunk, Some((cells, sink)))));
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::{
        engine::columns::ResultColumn,
        query::result::{CsvSource, PAGE_ROWS, PageCursor, scan_page},
    };

    fn column(name: &str, sql_type: &str) -> ResultColumn {
        ResultColumn {
            name: name.into(),
            sql_type: sql_type.into(),
            precision: 0,
            scale: 0,
            nullable: true,
        }
    }

    fn page(first: bool, next_token: Option<&str>) -> ResultPage {
        let cell = |text: &str| Some(text.to_string());
        let wide = "wide \"text\", \\ / é😀 ".repeat(300);
        let digits = "9".repeat(100);
        ResultPage {
            columns: vec![
                column("i", "bigint"),
                column("f", "double"),
                column("b", "boolean"),
                column("d", "decimal"),
                column("s", "varchar"),
            ],
            first,
            rows: vec![
                vec![
                    cell("9223372036854775807"),
                    cell("0.1"),
                    cell("true"),
                    cell("12345678901234567890.123456789"),
                    cell("a \"quoted\", comma\nline\ttab\r\u{1}\u{8}\u{c}\u{1f}\u{7f}"),
                ],
                vec![None, cell("NaN"), cell("maybe"), None, cell("")],
                vec![cell(&digits), cell("-inf"), None, cell("0.00"), cell(&wide)],
                vec![cell("x"), cell("1e300"), cell("false"), None, None],
            ],
            next_token: next_token.map(str::to_string),
        }
    }

    /// The CSV the result writer writes for `page` (header row first).
    fn csv(page: &ResultPage) -> (String, u64) {
        let quote = |text: &str| format!("\"{}\"", text.replace('"', "\"\""));
        let names: Vec<String> = page.columns.iter().map(|c| quote(&c.name)).collect();
        let header = format!("{}\n", names.join(","));
        let mut text = header.clone();
        for row in &page.rows {
            let cells: Vec<String> = row
                .iter()
                .map(|cell| cell.as_deref().map(quote).unwrap_or_default())
                .collect();
            text.push_str(&cells.join(","));
            text.push('\n');
        }
        (text, header.len() as u64)
    }

    /// `page` read as `read_page` reads it (keeping `keep` bytes of rows, at
    /// most `max_bytes` in all), and its body as sent.
    async fn body_of(
        page: &ResultPage,
        shape: PageShape,
        keep: u64,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, bool), ApiError> {
        let (text, header_bytes) = csv(page);
        let offset = if page.first { 0 } else { header_bytes };
        let cursor = PageCursor { row: 0, offset };
        let csv = CsvSource::Memory(Bytes::from(text));
        let source = PageSource::new("q1".into(), page.columns.clone(), cursor, csv);
        let mut first = FirstReading::new(source, shape, keep, max_bytes)?;
        let scan = scan_page(first.source.csv(), cursor, PAGE_ROWS, &mut first.sink)
            .await
            .unwrap();
        let rows = first.finish(PageExtent::new(scan, page.next_token.clone()))?;
        let object = Value::Object(rows.fields());
        let body = rows.into_body(&object)?;
        let (length, streamed) = (body.length(), body.is_streamed());
        let response = body.into_response(shape.content_type());
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_LENGTH],
            length.to_string()
        );
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(bytes.len() as u64, length);
        Ok((bytes.to_vec(), streamed))
    }

    #[tokio::test]
    async fn pages_are_page_body_byte_for_byte_whole_or_streamed() {
        for shape in [PageShape::Spec, PageShape::Native] {
            for (first, next_token) in [(true, None), (true, Some("1.2.abc")), (false, None)] {
                let page = page(first, next_token);
                let expected = serde_json::to_vec(&page_body(&page, shape)).unwrap();
                // Kept whole; kept for a while, then only counted; never kept.
                for keep in [WHOLE_ROWS_BYTES, 100, 0] {
                    let (body, streamed) = body_of(&page, shape, keep, u64::MAX).await.unwrap();
                    assert_eq!(streamed, keep != WHOLE_ROWS_BYTES, "{shape:?} {keep}");
                    assert!(
                        body == expected,
                        "{shape:?} first={first} keep={keep}:\n{}\n{}",
                        String::from_utf8_lossy(&body),
                        String::from_utf8_lossy(&expected)
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn column_names_cannot_be_taken_for_the_rows() {
        let mut page = page(true, None);
        page.columns[0].name = ROWS_STAND_IN.into();
        page.columns[1].name = "Rows".into();
        page.columns[2].name = format!("\"Rows\":{}", Value::String(ROWS_STAND_IN.into()));
        let expected = serde_json::to_vec(&page_body(&page, PageShape::Spec)).unwrap();
        let (body, _) = body_of(&page, PageShape::Spec, 0, u64::MAX).await.unwrap();
        assert!(body == expected, "{}", String::from_utf8_lossy(&body));
    }

    #[tokio::test]
    async fn a_page_longer_than_the_cap_is_409_whether_its_rows_or_its_envelope_pass_it() {
        let page = page(true, None);
        let expected = serde_json::to_vec(&page_body(&page, PageShape::Spec)).unwrap();
        let length = expected.len() as u64;
        let (body, _) = body_of(&page, PageShape::Spec, 0, length).await.unwrap();
        assert_eq!(
            body.len() as u64,
            length,
            "a page of exactly the cap is served"
        );
        // The rows alone pass a small cap (the reading stops), or only the
        // envelope does (the last byte).
        for max_bytes in [1000, length - 1] {
            let refused = body_of(&page, PageShape::Spec, 0, max_bytes)
                .await
                .unwrap_err();
            assert_eq!(refused.status(), StatusCode::CONFLICT);
            let ApiError::Conflict(message) = refused else {
                panic!("{refused:?}");
            };
            assert!(
                message.starts_with(&format!(
                    "This result page is larger than {max_bytes} bytes as JSON"
                )),
                "{message}"
            );
            assert!(message.contains("GET /v2/query/q1/csv"), "{message}");
        }
    }
}
