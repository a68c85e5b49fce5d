//! `QueryResults`: result serving. A SUCCEEDED job's result read back for
//! its caller: its pages (read as they are served, never held whole:
//! `PageSource`, `scan_page`) with their signed `next_token`s, the whole
//! result in each format as a file or a signed link (`result_file.rs`), the
//! typed result a wire client reads at a statement's end, and the small
//! results this replica wrote lately, kept in memory for their pages.
//!
//! It is handed the job (`QueryJobs::get` finds the caller's own) and
//! checks, before any read, that the job is the caller's, SUCCEEDED, kept
//! (neither streamed nor deleted by the retention sweep),
//! and read with the access it ran with (`check_readable`). It never
//! changes a job.

use std::{io, sync::Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;

use super::owns;
use crate::{
    auth::LakeCaller,
    clock::SharedClock,
    config::ArrowCompression,
    engine::columns::ResultColumn,
    lake::{Lake, ResultFormat, presigned::ResultLinks},
    query::{
        Denial, QueryError,
        page_tokens::PageTokens,
        recent_results::RecentResults,
        result::{CellSink, CsvSource, PAGE_ROWS, PageCursor, PageExtent, PageSource, scan_page},
        typed_conversions::TypedConversions,
    },
    runtime::EngineRuntime,
    store::{
        Store,
        queries::{Delivery, QueryJob, QueryState},
    },
};

/// Result serving: pages, page tokens, files, links and recent results.
pub struct QueryResults {
    pub(super) store: Store,
    pub(super) lake: Lake,
    pub(super) clock: SharedClock,
    /// How long a result link is valid (`query.csv_link_lifetime_s`).
    pub(super) link_lifetime_s: u64,
    /// The runtime Parquet copies are made on (the statements' own).
    pub(super) engine: std::sync::Arc<EngineRuntime>,
    /// Small results this replica wrote lately, by result path: their pages
    /// are served without reading the file back.
    pub(super) recent_results: Mutex<RecentResults>,
    page_tokens: PageTokens,
    /// Presigned GETs of results on the storage endpoint (lake on disk).
    pub(super) result_links: ResultLinks,
    /// How typed copies read back from a CSV are compressed; `None` when
    /// this service keeps no typed copies (`query.typed_results` off).
    pub(super) typed_copies: Option<ArrowCompression>,
    /// Typed copies of results being made on this replica.
    pub(super) conversions: TypedConversions,
}

/// One page of a SUCCEEDED query's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultPage {
    pub columns: Vec<ResultColumn>,
    /// True on the first page: the spec's header row comes first.
    pub first: bool,
    pub rows: Vec<Vec<Option<String>>>,
    pub next_token: Option<String>,
}

/// How a statement sent over a wire protocol ended.
pub enum WireEnd {
    /// SUCCEEDED: the bytes of its typed (Arrow IPC stream) result.
    Rows(BoxStream<'static, io::Result<Bytes>>),
    Cancelled,
    /// FAILED (or TIMED_OUT), with the job's reason.
    Failed(String),
}

/// What `QueryResults::new` is made of.
pub(super) struct ResultsParts {
    pub store: Store,
    pub lake: Lake,
    pub clock: SharedClock,
    pub link_lifetime_s: u64,
    pub engine: std::sync::Arc<EngineRuntime>,
    pub page_tokens: PageTokens,
    pub result_links: ResultLinks,
    pub typed_copies: Option<ArrowCompression>,
}

/// The answer for a streamed query's result, which was not kept.
pub fn not_kept(id: &str, delivery: Delivery) -> QueryError {
    let client = match delivery {
        Delivery::PgWire => "Postgres",
        Delivery::FlightSql | Delivery::Stored => "Flight SQL",
    };
    QueryError::FormatUnavailable(format!(
        "Query {id} was streamed to its {client} client as it ran; its result was not kept. \
         Run the statement again to read its rows."
    ))
}

/// The result of query `id` was deleted at `at` (microseconds) by the
/// retention sweep (docs/operating.md "Retention").
pub fn expired(id: &str, at: i64) -> QueryError {
    let when = chrono::DateTime::from_timestamp_micros(at).map_or_else(
        || at.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    QueryError::FormatUnavailable(format!(
        "Query {id}'s result was deleted at {when}: results are kept for retention.results_days \
         days after their query ends. Run the query again to read its rows."
    ))
}

impl QueryResults {
    pub(super) fn new(parts: ResultsParts) -> Self {
        let ResultsParts {
            store,
            lake,
            clock,
            link_lifetime_s,
            engine,
            page_tokens,
            result_links,
            typed_copies,
        } = parts;
        Self {
            store,
            lake,
            clock,
            link_lifetime_s,
            engine,
            recent_results: Mutex::new(RecentResults::default()),
            page_tokens,
            result_links,
            typed_copies,
            conversions: TypedConversions::default(),
        }
    }

    /// Whether `caller` may read the result of `job`: their own (else
    /// NotFound, as for a query that does not exist), SUCCEEDED, kept, and
    /// with the same roles and service clients as at submission.
    pub(super) fn check_readable(caller: &LakeCaller, job: &QueryJob) -> Result<(), QueryError> {
        if !owns(caller, job) {
            return Err(QueryError::NotFound(job.query.id.clone()));
        }
        match job.state {
            QueryState::Succeeded => {}
            QueryState::Queued | QueryState::Running => {
                return Err(QueryError::NoResult(format!(
                    "Query has not yet finished. Current state: {}",
                    job.state.as_str()
                )));
            }
            QueryState::Failed | QueryState::Cancelled => {
                return Err(QueryError::NoResult(format!(
                    "Query did not succeed. Current state: {}",
                    job.state.as_str()
                )));
            }
        }
        if job.query.access_fingerprint != caller.grant.fingerprint() {
            return Err(QueryError::Denied(Denial::Data));
        }
        if job.delivery != Delivery::Stored {
            return Err(not_kept(&job.query.id, job.delivery));
        }
        if let Some(at) = job.result_expired_at {
            return Err(expired(&job.query.id, at));
        }
        Ok(())
    }

    /// GET /query/{id}/result: the first page of `job`, or the one
    /// `next_token` names, before any of its rows is read.
    pub async fn page_source(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        Self::check_readable(caller, job)?;
        let id = job.query.id.as_str();
        let (Some(path), Some(columns)) = (
            job.result_path.as_deref(),
            job.result_columns_json.as_deref(),
        ) else {
            return Err(QueryError::unexpected(format!("query {id} has no result")));
        };
        let columns: Vec<ResultColumn> =
            serde_json::from_str(columns).map_err(|e| QueryError::internal("result columns", e))?;
        let cursor = match next_token {
            Some(token) => self.page_tokens.cursor(id, token)?,
            None => PageCursor { row: 0, offset: 0 },
        };
        let mut kept = self.recent(path);
        if kept.is_none()
            && let Some(csv) = self.result_in_row(job, ResultFormat::Csv).await?
        {
            self.keep_small_result(path, csv.clone());
            kept = Some(csv);
        }
        let csv = match kept {
            Some(csv) => CsvSource::Memory(csv),
            None => CsvSource::Lake {
                store: self.lake.object_store(),
                path: path.to_string(),
                size: self.csv_in_lake(job, path).await?,
            },
        };
        Ok(PageSource::new(id.to_string(), columns, cursor, csv))
    }

    /// Reads `page`'s rows (up to `PAGE_ROWS`) into `sink`, which may stop
    /// the reading; says how many there are and the next page's token.
    /// Nothing of the page is kept here: to have its rows again (a body
    /// streamed once it is measured), `PageSource::cells`.
    pub async fn scan_page(
        &self,
        page: &PageSource,
        sink: &mut impl CellSink,
    ) -> Result<PageExtent, QueryError> {
        let scan = scan_page(page.csv(), page.cursor(), PAGE_ROWS, sink)
            .await
            .map_err(|e| QueryError::internal("result page", e))?;
        let next_token = scan
            .next
            .map(|next| self.page_tokens.token(&page.query_id, next));
        Ok(PageExtent::new(scan, next_token))
    }

    /// The answer to a wire client for `job`, the caller's statement, once
    /// it is final: its typed result when it SUCCEEDED, else how it ended.
    pub async fn wire_end(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
    ) -> Result<WireEnd, QueryError> {
        match job.state {
            QueryState::Succeeded => {}
            QueryState::Cancelled => return Ok(WireEnd::Cancelled),
            _ => {
                let reason = job
                    .state_change_reason
                    .clone()
                    .unwrap_or_else(|| format!("query {} failed", job.query.id));
                return Ok(WireEnd::Failed(reason));
            }
        }
        let file = self.result_file(caller, job, ResultFormat::Arrow).await?;
        Ok(WireEnd::Rows(file.bytes(None).await?))
    }

    /// The storage endpoint's presigned result links (it serves them).
    pub fn result_links(&self) -> ResultLinks {
        self.result_links.clone()
    }

    /// Keeps a small result's CSV, just written at `path`, in memory, so
    /// its pages are served without reading the file back (a run keeps it
    /// before its end is recorded: the first page read after SUCCEEDED
    /// finds it).
    pub(super) fn keep_small_result(&self, path: &str, csv: Bytes) {
        self.recent_results
            .lock()
            .expect("recent results lock")
            .insert(path.to_string(), csv);
    }

    /// The CSV at `path`, when this replica keeps it in memory.
    pub(super) fn recent(&self, path: &str) -> Option<Bytes> {
        self.recent_results
            .lock()
            .expect("recent results lock")
            .get(path)
    }
}
