//! A SUCCEEDED query's whole result in each format (CSV, Arrow, Parquet):
//! as a stored file to stream (`result_file`), or as a signed link to that
//! file (`result_link`).
//!
//! A result written Arrow or Parquet first (`Prefer: result-format=`) whose
//! CSV was too big to keep has its CSV made from that file on first request
//! (`csv_in_lake`); pages and CSV links then read it as any other. One
//! written Parquet first has its Arrow copy made from the Parquet file.
//!
//! A small result's CSV and Arrow copy may be kept in its job's row instead
//! of the lake (`query.result_in_store_bytes`): pages and downloads read
//! them from the store (an Arrow copy its row lacks is read back from the
//! row's CSV in memory); a link, or the Parquet copy, first writes the form
//! it needs to the lake at the path it would have had (once; any replica
//! can, the bytes are in the store), and then goes on as for any result.

use std::{ops::Range, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt as _, stream::BoxStream};
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};
use url::Url;

use super::QueryResults;
use crate::{
    auth::LakeCaller,
    engine::columns::ResultColumn,
    lake::{self, ResultFormat, result_file_path},
    query::{
        QueryError,
        csv_read_back::schema_of,
        result_arrow::TypedCopy,
        result_parquet::TypedResultError,
        typed_conversions::{ReadBack, arrow_from_csv, read_back_writer},
    },
    store::queries::{QueryJob, ResultFirst, RowForm},
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
                .map_err(|e| QueryError::internal("reading the result", e)),
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

/// The typed file `job`'s query wrote its result to first, if not its CSV
/// (`Prefer: result-format=`).
fn first_file(job: &QueryJob) -> Option<ResultFormat> {
    match job.query.result_first {
        ResultFirst::Csv => None,
        ResultFirst::Arrow => Some(ResultFormat::Arrow),
        ResultFirst::Parquet => Some(ResultFormat::Parquet),
    }
}

/// A typed copy that could not be had, as the caller is answered.
fn typed_error(id: &str, error: TypedResultError) -> QueryError {
    match error {
        TypedResultError::NoTypedCopy => no_typed_copy(id),
        TypedResultError::NotHeld => QueryError::FormatUnavailable(format!(
            "Query {id} has columns Parquet cannot hold (intervals with nanoseconds, unions or \
             times of day in seconds). Its result is available as CSV, as JSON pages and as Arrow."
        )),
        TypedResultError::Failed(cause) => QueryError::Internal(cause),
    }
}

impl QueryResults {
    /// The result of `job`, the caller's, in `format`: the CSV; the Arrow
    /// copy, written while it ran or read back from the CSV on first
    /// request (`typed_conversions.rs`); the Parquet copy, made on first
    /// request from the Arrow copy or read back from the CSV
    /// (`result_parquet.rs`). Each from the job's row when it keeps it.
    pub async fn result_file(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        format: ResultFormat,
    ) -> Result<ResultFile, QueryError> {
        Self::check_readable(caller, job)?;
        let id = job.query.id.as_str();
        let csv_path = job
            .result_path
            .clone()
            .ok_or_else(|| QueryError::unexpected(format!("query {id} has no result")))?;
        let path = result_file_path(&csv_path, format);
        if let Some(bytes) = self.result_in_row(job, format).await? {
            return Ok(ResultFile {
                format,
                size: bytes.len() as u64,
                path,
                source: ResultSource::Row(bytes),
            });
        }
        let store = self.lake.object_store();
        let size = match format {
            ResultFormat::Csv => self.csv_in_lake(job, &csv_path).await?,
            ResultFormat::Arrow => {
                if let Some(bytes) = self.arrow_read_back_in_row(job).await? {
                    return Ok(ResultFile {
                        format,
                        size: bytes.len() as u64,
                        path,
                        source: ResultSource::Row(bytes),
                    });
                }
                self.arrow_in_lake(job, &csv_path).await?
            }
            // Written first, or made by an earlier request: nothing to
            // read or convert.
            ResultFormat::Parquet => match self.found(&path).await? {
                Some(size) => size,
                None => self.parquet_in_lake(job, &csv_path).await?,
            },
        };
        Ok(ResultFile {
            format,
            size,
            path,
            source: ResultSource::Lake(store),
        })
    }

    /// The size of `job`'s CSV in the lake at `csv_path`: as its query
    /// wrote it, or, for a result written Arrow or Parquet first whose CSV
    /// was too big to keep, made from that file now (once per replica at a
    /// time).
    pub(super) async fn csv_in_lake(
        &self,
        job: &QueryJob,
        csv_path: &str,
    ) -> Result<u64, QueryError> {
        let store = self.lake.object_store();
        if let Some(first) = first_file(job) {
            return self
                .conversions
                .ensure_csv(self.engine.handle(), store, csv_path, first)
                .await
                .map_err(|e| typed_error(&job.query.id, e));
        }
        match job.result_bytes {
            Some(bytes) => Ok(u64::try_from(bytes).unwrap_or(0)),
            None => match store.head(&Path::from(csv_path)).await {
                Ok(meta) => Ok(meta.size),
                Err(e) => Err(QueryError::internal("result file", e)),
            },
        }
    }

    /// How `job`'s Arrow copy is read back from its CSV; `None` when this
    /// service keeps no typed copies or its columns do not read back (then
    /// the copy was written while it ran, or there is none).
    fn read_back(&self, job: &QueryJob) -> Option<ReadBack> {
        let compression = self.typed_copies?;
        let columns: Vec<ResultColumn> =
            serde_json::from_str(job.result_columns_json.as_deref()?).ok()?;
        Some(ReadBack {
            schema: schema_of(&columns)?,
            compression,
            csv_bytes: job.result_bytes.and_then(|b| u64::try_from(b).ok())?,
        })
    }

    /// The size of `job`'s Arrow copy in the lake: there already, or read
    /// back from its CSV in the lake now (once per replica at a time).
    async fn arrow_in_lake(&self, job: &QueryJob, csv_path: &str) -> Result<u64, QueryError> {
        let id = job.query.id.as_str();
        let store = self.lake.object_store();
        // Written Parquet first: made from the Parquet file.
        if let (Some(ResultFormat::Parquet), Some(compression)) =
            (first_file(job), self.typed_copies)
        {
            return self
                .conversions
                .ensure_arrow_from_parquet(self.engine.handle(), store, csv_path, compression)
                .await
                .map_err(|e| typed_error(id, e));
        }
        // A result that reads back: `ensure_arrow` finds the copy or makes it.
        if let Some(read_back) = self.read_back(job) {
            return self
                .conversions
                .ensure_arrow(self.engine.handle(), store, csv_path, read_back)
                .await
                .map_err(|e| typed_error(id, e));
        }
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        self.found(&arrow_path)
            .await?
            .ok_or_else(|| no_typed_copy(id))
    }

    /// The size of the result file at `path` when the lake has it (known to
    /// this replica, or found by a HEAD).
    async fn found(&self, path: &str) -> Result<Option<u64>, QueryError> {
        let store = self.lake.object_store();
        self.conversions
            .found(store.as_ref(), path)
            .await
            .map_err(|e| QueryError::internal("result file", e))
    }

    /// Makes `job`'s Parquet copy in the lake (once per replica at a time):
    /// straight from its CSV when its columns read back and it has no Arrow
    /// copy yet, else from its Arrow copy (put in the lake first).
    async fn parquet_in_lake(&self, job: &QueryJob, csv_path: &str) -> Result<u64, QueryError> {
        let id = job.query.id.as_str();
        let store = self.lake.object_store();
        let kept_in_row = job.in_row.csv_bytes.is_some() || job.in_row.arrow_bytes.is_some();
        let read_back = self.read_back(job).filter(|_| !kept_in_row);
        let made = match read_back {
            // A result in the lake that reads back: from its Arrow copy when
            // that was read back already (no text to parse), else from its CSV.
            Some(read_back) => {
                let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
                match self.found(&arrow_path).await? {
                    Some(_) => {
                        self.conversions
                            .ensure_parquet(self.engine.handle(), store, csv_path)
                            .await
                    }
                    None => {
                        self.conversions
                            .ensure_parquet_read_back(
                                self.engine.handle(),
                                store,
                                csv_path,
                                read_back.schema,
                            )
                            .await
                    }
                }
            }
            None => {
                self.arrow_for_parquet(job, csv_path).await?;
                self.conversions
                    .ensure_parquet(self.engine.handle(), store, csv_path)
                    .await
            }
        };
        made.map_err(|e| typed_error(id, e))
    }

    /// Puts `job`'s Arrow copy in the lake for its Parquet copy to be made
    /// from: from its row (kept, or read back from the row's CSV), or
    /// found or read back in the lake.
    async fn arrow_for_parquet(&self, job: &QueryJob, csv_path: &str) -> Result<(), QueryError> {
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        let in_row = match self.result_in_row(job, ResultFormat::Arrow).await? {
            Some(arrow) => Some(arrow),
            None => self.arrow_read_back_in_row(job).await?,
        };
        match in_row {
            Some(arrow) => self.write_to_lake(&arrow_path, arrow).await,
            None => self.arrow_in_lake(job, csv_path).await.map(|_| ()),
        }
    }

    /// The Arrow copy of a small result whose CSV its row keeps (and not
    /// its Arrow copy), read back in memory; `None` for any other result.
    async fn arrow_read_back_in_row(&self, job: &QueryJob) -> Result<Option<Bytes>, QueryError> {
        if job.in_row.csv_bytes.is_none() || job.in_row.arrow_bytes.is_some() {
            return Ok(None);
        }
        let (Some(read_back), Some(csv_path)) = (self.read_back(job), &job.result_path) else {
            return Ok(None);
        };
        let Some(csv) = self.result_in_row(job, ResultFormat::Csv).await? else {
            return Ok(None);
        };
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        let store = self.lake.object_store();
        let id = job.query.id.as_str();
        let writer = read_back_writer(
            store,
            &arrow_path,
            &read_back.schema,
            read_back.compression,
            read_back.csv_bytes,
        )
        .await
        .map_err(|e| typed_error(id, e))?;
        let source = futures::stream::once(async move { Ok(csv) }).boxed();
        match arrow_from_csv(source, read_back.schema, writer, usize::MAX).await {
            Ok(TypedCopy::InRow(bytes)) => Ok(Some(bytes)),
            // Too big to hand back: it is in the lake now.
            Ok(TypedCopy::Stored(_)) => Ok(None),
            Err(e) => Err(typed_error(id, e)),
        }
    }

    /// The form of `job`'s result in `format` that its row keeps, read from
    /// the store (the CSV from memory when this replica kept it); `None`
    /// when the lake keeps it (or it is Parquet, which the lake always keeps).
    pub(super) async fn result_in_row(
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
            && let Some(csv) = self.recent(path)
        {
            return Ok(Some(csv));
        }
        let id = &job.query.id;
        match self.store.result_in_row(id, form).await? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(QueryError::unexpected(format!(
                "query {id}'s row lost its result"
            ))),
        }
    }

    /// Writes a result kept in a row to the lake at `path`, unless it is
    /// there already (another request, or replica, wrote it): the same
    /// bytes either way.
    async fn write_to_lake(&self, path: &str, bytes: Bytes) -> Result<(), QueryError> {
        if self.found(path).await?.is_some() {
            return Ok(());
        }
        let size = bytes.len() as u64;
        self.lake
            .object_store()
            .put(&Path::from(path), bytes.into())
            .await
            .map_err(|e| QueryError::internal("writing the result", e))?;
        self.conversions.remember(path, size);
        Ok(())
    }

    /// GET /query/{id}/csv (`format` CSV, or another with `?format=`): a
    /// signed link to `job`'s whole result, valid for
    /// `query.csv_link_lifetime_s`: S3's own presigned GET when the lake is
    /// on S3, else the storage endpoint's presigned GET (`lake::presigned`).
    pub async fn result_link(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        format: ResultFormat,
    ) -> Result<Url, QueryError> {
        let file = self.result_file(caller, job, format).await?;
        if let ResultSource::Row(bytes) = file.source {
            self.write_to_lake(&file.path, bytes).await?;
        }
        let path = file.path;
        let lifetime = Duration::from_secs(self.link_lifetime_s);
        let presigned = self
            .lake
            .presigned_get(&path, lifetime)
            .await
            .map_err(|e| QueryError::internal("presigning the result", e))?;
        match presigned {
            Some(url) => Ok(url),
            None => self
                .result_links
                .sign(&path, self.link_lifetime_s, self.clock.now())
                .map_err(|e| QueryError::internal("presigning the result", e)),
        }
    }
}
