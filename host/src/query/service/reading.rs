//! The caller's side of a stored query: reading its state (only the caller's
//! own, on the API it was submitted to), cancelling it, its result pages and
//! its signed CSV link.

use std::time::Duration;

use url::Url;

use super::{QueryService, ResultPage};
use crate::{
    auth::LakeCaller,
    engine::columns::ResultColumn,
    observability::jobs,
    query::{
        Denial, QueryError,
        result::{PAGE_ROWS, PageCursor, page_from_bytes, read_page},
    },
    store::queries::{QueryJob, QueryState},
};

impl QueryService {
    /// The caller's own query on this API, or NotFound (also for another
    /// user's query: its existence is not revealed).
    pub async fn get(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let not_found = || QueryError::NotFound(id.to_string());
        let job = self.store.query_job(id).await?.ok_or_else(not_found)?;
        let q = &job.query;
        if q.owner_sub != caller.sub || q.org != caller.org || q.zone != caller.zone {
            return Err(not_found());
        }
        Ok(job)
    }

    /// DELETE /query: cancels a QUEUED or RUNNING query and stops its work; a
    /// final query stays as it is.
    pub async fn cancel(&self, caller: &LakeCaller, id: &str) -> Result<(), QueryError> {
        let job = self.get(caller, id).await?;
        if job.state.is_final() {
            return Ok(());
        }
        if self.store.cancel_query(id, self.now()).await? {
            self.ended.notify_waiters();
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
        Ok(())
    }

    /// A SUCCEEDED query the caller may still read (same roles and service
    /// clients as at submission).
    async fn readable(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let job = self.get(caller, id).await?;
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
        Ok(job)
    }

    /// GET /query/{id}/result: the first page, or the one `next_token` names.
    pub async fn page(
        &self,
        caller: &LakeCaller,
        id: &str,
        next_token: Option<&str>,
    ) -> Result<ResultPage, QueryError> {
        let job = self.readable(caller, id).await?;
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

    /// GET /query/{id}/csv: a signed link to the whole result, valid for
    /// `query.csv_link_lifetime_s`: S3's own presigned GET when the lake is on
    /// S3, else the storage endpoint's presigned GET (`lake::presigned`).
    pub async fn csv_link(&self, caller: &LakeCaller, id: &str) -> Result<Url, QueryError> {
        let job = self.readable(caller, id).await?;
        let path = job
            .result_path
            .ok_or_else(|| QueryError::Internal(format!("query {id} has no result")))?;
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
