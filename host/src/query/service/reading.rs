//! The caller's side of a stored query: reading its state (only the caller's
//! own, on the API it was submitted to), cancelling it, its result pages, and
//! its whole result in each format (CSV, Arrow, Parquet): as a stored file to
//! stream, or as a signed link to that file. Every read goes through
//! `readable`: the owner, SUCCEEDED, and the access the query ran with.

use std::{ops::Range, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};
use url::Url;

use super::{QueryService, ResultPage};
use crate::{
    auth::LakeCaller,
    engine::columns::ResultColumn,
    lake::{self, ResultFormat, result_file_path},
    observability::jobs,
    query::{
        Denial, QueryError,
        result::{PAGE_ROWS, PageCursor, page_from_bytes, read_page},
        result_parquet::TypedResultError,
    },
    store::queries::{Delivery, QueryJob, QueryState},
};

/// A finished query's whole result in one format: a stored file of known
/// size, streamed from the lake.
pub struct ResultFile {
    pub format: ResultFormat,
    pub size: u64,
    path: String,
    store: Arc<dyn ObjectStore>,
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
        lake::object_bytes(self.store.as_ref(), &self.path, range)
            .await
            .map_err(|e| QueryError::Internal(format!("reading the result: {e}")))
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

    /// GET /query/{id}/result: the first page, or the one `next_token` names.
    pub async fn page(
        &self,
        caller: &LakeCaller,
        id: &str,
        next_token: Option<&str>,
    ) -> Result<ResultPage, QueryError> {
        let job = self.readable(caller, id).await?;
        self.page_of_readable(&job, next_token).await
    }

    /// A page of `job`, just read from the store or stored (the POST that
    /// waited for it), without reading it again.
    pub async fn page_of(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<ResultPage, QueryError> {
        if !Self::owns(caller, job) {
            return Err(QueryError::NotFound(job.query.id.clone()));
        }
        Self::check_readable(caller, job)?;
        self.page_of_readable(job, next_token).await
    }

    async fn page_of_readable(
        &self,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<ResultPage, QueryError> {
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
        let kept = self
            .recent_results
            .lock()
            .expect("recent results lock")
            .get(path);
        let page = match kept {
            Some(csv) => page_from_bytes(&csv, cursor, PAGE_ROWS),
            None => {
                read_page(
                    self.lake.object_store().as_ref(),
                    path,
                    bytes as u64,
                    cursor,
                    PAGE_ROWS,
                )
                .await
            }
        }
        .map_err(|e| QueryError::Internal(format!("result page: {e}")))?;
        Ok(ResultPage {
            columns,
            first: cursor.offset == 0,
            rows: page.rows,
            next_token: page.next.map(|next| self.page_tokens.token(id, next)),
        })
    }

    /// The stored file of the caller's result in `format` and its size: the
    /// CSV; the Arrow copy written with it; the Parquet copy, made from the
    /// Arrow copy on first request (`result_parquet.rs`).
    async fn stored_result(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<(String, u64), QueryError> {
        let job = self.readable(caller, id).await?;
        let csv_path = job
            .result_path
            .ok_or_else(|| QueryError::Internal(format!("query {id} has no result")))?;
        let path = result_file_path(&csv_path, format);
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
            (ResultFormat::Parquet, _) => self
                .parquet_conversions
                .ensure(self.engine.handle(), store, &csv_path)
                .await
                .map_err(|e| match e {
                    TypedResultError::NoTypedCopy => no_typed_copy(id),
                    TypedResultError::Failed(why) => QueryError::Internal(why),
                })?,
        };
        Ok((path, size))
    }

    /// GET /query/{id}/result with a whole-result media type: the file to stream.
    pub async fn result_file(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<ResultFile, QueryError> {
        let (path, size) = self.stored_result(caller, id, format).await?;
        Ok(ResultFile {
            format,
            size,
            path,
            store: self.lake.object_store(),
        })
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
        let (path, _) = self.stored_result(caller, id, format).await?;
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
