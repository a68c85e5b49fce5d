//! The caller's side of a stored query: reading its state (only the caller's
//! own, on the API it was submitted to), cancelling it, its result pages (read
//! as they are served, never held whole: `PageSource`, `scan_page`), and its
//! whole result in each format (CSV, Arrow, Parquet): as a stored file to
//! stream, or as a signed link to that file. Every read goes through
//! `readable`: the owner, SUCCEEDED, and the access the query ran with.
//!
//! A small result's CSV and Arrow copy may be kept in its job's row instead
//! of the lake (`query.result_in_store_bytes`): pages and downloads read
//! them from the store; a link, or the Parquet copy, first writes the form
//! it needs to the lake at the path it would have had (once; any replica
//! can, the bytes are in the store), and then goes on as for any result.

use std::{ops::Range, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt as _, stream::BoxStream};
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};
use url::Url;

use super::QueryService;
use crate::{
    auth::LakeCaller,
    engine::columns::ResultColumn,
    lake::{self, ResultFormat, result_file_path},
    observability::jobs,
    query::{
        Denial, QueryError,
        result::{CellSink, CsvSource, PAGE_ROWS, PageCursor, PageExtent, PageSource, scan_page},
        result_parquet::TypedResultError,
    },
    store::queries::{Delivery, QueryJob, QueryState, RowForm},
};

/// A finished query's whole result in one format: a file of known size,
/// streamed from the lake, or a small result's bytes from its job's row.
pub struct ResultFile {
    pub format: ResultFormat,
    pub size: u64,
    /// Its lake path (where a link finds it, once written for one).
    path: String,
    source: ResultSource,
}

/// Where a `ResultFile`'s bytes are.
enum ResultSource {
    Lake(Arc<dyn ObjectStore>),
    Row(Bytes),
}

impl ResultFile {
    /// The file's name, `<query>-<attempt>.<extension>`.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The file's bytes, or those of `range` (within `0..size`).
    pub async fn bytes(
        &self,
        range: Option<Range<u64>>,
    ) -> Result<BoxStream<'static, std::io::Result<Bytes>>, QueryError> {
        match &self.source {
            ResultSource::Lake(store) => lake::object_bytes(store.as_ref(), &self.path, range)
                .await
                .map_err(|e| QueryError::Internal(format!("reading the result: {e}"))),
            ResultSource::Row(bytes) => {
                let end = bytes.len();
                let (start, end) = range.map_or((0, end), |r| {
                    let clamp = |at: u64| usize::try_from(at).unwrap_or(end).min(end);
                    (clamp(r.start), clamp(r.end))
                });
                let part = bytes.slice(start..end.max(start));
                Ok(futures::stream::once(async move { Ok(part) }).boxed())
            }
        }
    }
}

/// Why a typed format of query `id` is not there.
fn no_typed_copy(id: &str) -> QueryError {
    QueryError::FormatUnavailable(format!(
        "Query {id} has no typed copy of its result: it ran before typed results were kept, \
         or while this service kept none. Its result is available as CSV and as JSON pages; \
         run the query again for Arrow or Parquet."
    ))
}

impl QueryService {
    /// The caller's own query on this API, or NotFound (also for another
    /// user's query: its existence is not revealed).
    pub async fn get(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let not_found = || QueryError::NotFound(id.to_string());
        let job = self.store.query_job(id).await?.ok_or_else(not_found)?;
        if !Self::owns(caller, &job) {
            return Err(not_found());
        }
        Ok(job)
    }

    pub(super) fn owns(caller: &LakeCaller, job: &QueryJob) -> bool {
        let q = &job.query;
        q.owner_sub == caller.sub && q.org == caller.org && q.zone == caller.zone
    }

    /// DELETE /query: cancels a QUEUED or RUNNING query and stops its work; a
    /// final query stays as it is. True when this call cancelled it.
    pub async fn cancel(&self, caller: &LakeCaller, id: &str) -> Result<bool, QueryError> {
        let job = self.get(caller, id).await?;
        if job.state.is_final() {
            return Ok(false);
        }
        let cancelled = self.store.cancel_query(id, self.now()).await?;
        if cancelled {
            self.ended.announce(id);
            jobs::query_ended(id, QueryState::Cancelled, &job.query.statement_type, None);
            let token = self
                .running
                .lock()
                .expect("running map lock")
                .get(id)
                .cloned();
            if let Some(token) = token {
                token.cancel();
            }
        }
        Ok(cancelled)
    }

    /// A SUCCEEDED query the caller may still read (same roles and service
    /// clients as at submission).
    async fn readable(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let job = self.get(caller, id).await?;
        Self::check_readable(caller, &job)?;
        Ok(job)
    }

    /// Whether `caller` may read the result of `job`, their own query.
    fn check_readable(caller: &LakeCaller, job: &QueryJob) -> Result<(), QueryError> {
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
            return Err(super::streamed::not_kept(&job.query.id, job.delivery));
        }
        Ok(())
    }

    /// GET /query/{id}/result: the first page, or the one `next_token`
    /// names, before any of its rows is read.
    pub async fn page_source(
        &self,
        caller: &LakeCaller,
        id: &str,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        let job = self.readable(caller, id).await?;
        self.page_source_of_readable(&job, next_token).await
    }

    /// A page of `job`, just read from the store or stored (the POST that
    /// waited for it), without reading the job again.
    pub async fn page_source_of(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        if !Self::owns(caller, job) {
            return Err(QueryError::NotFound(job.query.id.clone()));
        }
        Self::check_readable(caller, job)?;
        self.page_source_of_readable(job, next_token).await
    }

    async fn page_source_of_readable(
        &self,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        let id = job.query.id.as_str();
        let (Some(path), Some(bytes), Some(columns)) = (
            job.result_path.as_deref(),
            job.result_bytes,
            job.result_columns_json.as_deref(),
        ) else {
            return Err(QueryError::Internal(format!("query {id} has no result")));
        };
        let columns: Vec<ResultColumn> = serde_json::from_str(columns)
            .map_err(|e| QueryError::Internal(format!("result columns: {e}")))?;
        let cursor = match next_token {
            Some(token) => self.page_tokens.cursor(id, token)?,
            None => PageCursor { row: 0, offset: 0 },
        };
        let mut kept = self
            .recent_results
            .lock()
            .expect("recent results lock")
            .get(path);
        if kept.is_none()
            && let Some(csv) = self.result_in_row(job, ResultFormat::Csv).await?
        {
            self.recent_results
                .lock()
                .expect("recent results lock")
                .insert(path.to_string(), csv.clone());
            kept = Some(csv);
        }
        let csv = match kept {
            Some(csv) => CsvSource::Memory(csv),
            None => CsvSource::Lake {
                store: self.lake.object_store(),
                path: path.to_string(),
                size: u64::try_from(bytes).unwrap_or(0),
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
            .map_err(|e| QueryError::Internal(format!("result page: {e}")))?;
        let next_token = scan
            .next
            .map(|next| self.page_tokens.token(&page.query_id, next));
        Ok(PageExtent::new(scan, next_token))
    }

    /// The caller's result in `format`: the CSV; the Arrow copy written
    /// with it; the Parquet copy, made from the Arrow copy on first request
    /// (`result_parquet.rs`). Each from the job's row when it keeps it.
    pub async fn result_file(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<ResultFile, QueryError> {
        let job = self.readable(caller, id).await?;
        let csv_path = job
            .result_path
            .clone()
            .ok_or_else(|| QueryError::Internal(format!("query {id} has no result")))?;
        let path = result_file_path(&csv_path, format);
        if let Some(bytes) = self.result_in_row(&job, format).await? {
            return Ok(ResultFile {
                format,
                size: bytes.len() as u64,
                path,
                source: ResultSource::Row(bytes),
            });
        }
        let store = self.lake.object_store();
        let size = match (format, job.result_bytes) {
            (ResultFormat::Csv, Some(bytes)) => u64::try_from(bytes).unwrap_or(0),
            (ResultFormat::Csv, None) | (ResultFormat::Arrow, _) => {
                match store.head(&Path::from(path.as_str())).await {
                    Ok(meta) => meta.size,
                    Err(object_store::Error::NotFound { .. }) if format == ResultFormat::Arrow => {
                        return Err(no_typed_copy(id));
                    }
                    Err(e) => return Err(QueryError::Internal(format!("result file: {e}"))),
                }
            }
            (ResultFormat::Parquet, _) => {
                if let Some(arrow) = self.result_in_row(&job, ResultFormat::Arrow).await? {
                    let arrow_path = result_file_path(&csv_path, ResultFormat::Arrow);
                    self.write_to_lake(&arrow_path, arrow).await?;
                }
                self.parquet_conversions
                    .ensure(self.engine.handle(), store.clone(), &csv_path)
                    .await
                    .map_err(|e| match e {
                        TypedResultError::NoTypedCopy => no_typed_copy(id),
                        TypedResultError::Failed(why) => QueryError::Internal(why),
                    })?
            }
        };
        Ok(ResultFile {
            format,
            size,
            path,
            source: ResultSource::Lake(store),
        })
    }

    /// The form of `job`'s result in `format` that its row keeps, read from
    /// the store (the CSV from memory when this replica kept it); `None`
    /// when the lake keeps it (or it is Parquet, which the lake always keeps).
    async fn result_in_row(
        &self,
        job: &QueryJob,
        format: ResultFormat,
    ) -> Result<Option<Bytes>, QueryError> {
        let form = match format {
            ResultFormat::Csv if job.in_row.csv_bytes.is_some() => RowForm::Csv,
            ResultFormat::Arrow if job.in_row.arrow_bytes.is_some() => RowForm::Arrow,
            _ => return Ok(None),
        };
        if form == RowForm::Csv
            && let Some(path) = &job.result_path
            && let Some(csv) = self
                .recent_results
                .lock()
                .expect("recent results lock")
                .get(path)
        {
            return Ok(Some(csv));
        }
        let id = &job.query.id;
        match self.store.result_in_row(id, form).await? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(QueryError::Internal(format!(
                "query {id}'s row lost its result"
            ))),
        }
    }

    /// Writes a result kept in a row to the lake at `path`, unless it is
    /// there already (another request, or replica, wrote it): the same
    /// bytes either way.
    async fn write_to_lake(&self, path: &str, bytes: Bytes) -> Result<(), QueryError> {
        let store = self.lake.object_store();
        let at = Path::from(path);
        match store.head(&at).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(QueryError::Internal(format!("result file: {e}"))),
        }
        store
            .put(&at, bytes.into())
            .await
            .map_err(|e| QueryError::Internal(format!("writing the result: {e}")))?;
        Ok(())
    }

    /// GET /query/{id}/csv (`format` CSV, or another with `?format=`): a
    /// signed link to the whole result, valid for `query.csv_link_lifetime_s`:
    /// S3's own presigned GET when the lake is on S3, else the storage
    /// endpoint's presigned GET (`lake::presigned`).
    pub async fn result_link(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<Url, QueryError> {
        let file = self.result_file(caller, id, format).await?;
        if let ResultSource::Row(bytes) = file.source {
            self.write_to_lake(&file.path, bytes).await?;
        }
        let path = file.path;
        let lifetime = Duration::from_secs(self.limits.csv_link_lifetime_s);
        let presigned = self
            .lake
            .presigned_get(&path, lifetime)
            .await
            .map_err(|e| QueryError::Internal(format!("presigning the result: {e}")))?;
        match presigned {
            Some(url) => Ok(url),
            None => self
                .result_links
                .sign(&path, self.limits.csv_link_lifetime_s, self.clock.now())
                .map_err(|e| QueryError::Internal(format!("presigning the result: {e}"))),
        }
    }
}
