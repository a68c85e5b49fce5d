//! The data side of a load's pipeline run ([`LoadData`]): the staged files of
//! one load, read with DataFusion as the table `staged`, and the load's target
//! table in the catalog.
//!
//! `append_staged` writes the rows (with `svc$load_id`, and service_client_id
//! from load_as_service_client_id) as lake files through `TableWriter`, and
//! keeps them as a [`PendingAppend`]: they become visible only when the commit
//! records them in the catalog, in one transaction with the load's SUCCESS.
//!
//! `query` is the staged-sql capability: SQL of the shape `staged_sql.rs`
//! accepts, over a session with a memory pool and bounded functions.
//!
//! Reading the rows is where a file whose footer passed validation can still
//! prove not to be parquet (a page header that lies, a page that does not
//! decode). Such a read is kept (`invalid_parquet`) as well as answered to
//! the step, so the commit ends the load ParquetValidation (INVALID_PARQUET)
//! whichever step met the file first, not InternalError.

use std::{
    num::ParseIntError,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use datafusion::{
    arrow::{datatypes::Schema, error::ArrowError},
    datasource::{
        file_format::{FileFormat as _, parquet::ParquetFormat},
        listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl},
    },
    error::DataFusionError,
    execution::{memory_pool::FairSpillPool, runtime_env::RuntimeEnvBuilder},
    parquet::errors::ParquetError,
    prelude::{SessionConfig, SessionContext, lit},
};
use futures::TryStreamExt as _;

use super::{
    parquet_envelope::{EnvelopeError, check_envelope},
    staged_scan::{EveryRowRead, staged_session_state},
    staged_sql::{STAGED_TABLE, StagedSqlError, check_staged_sql, has_aggregate, has_group_by},
    staging_path,
};
use crate::{
    auth::ServiceClientScope,
    engine::{
        EngineError,
        bounded_functions::bound_functions,
        columns::columns_of,
        layout::{SERVICE_CLIENT_COLUMN, TableLayout, partition_field},
        write::write_batches,
    },
    lake::{self, Lake},
    pipeline::{ColumnInfo, DataError, LoadData, StagedFileInfo, TextRows},
    store::{
        self, Store,
        catalog::{LakeDatabase, LakeTable, NewDataFile},
        loads::{LoadFile, LoadRecord},
    },
};

/// Memory the staged SQL of one commit step may hold (check_sum aggregates,
/// the insert), as a query's default limit.
const STAGED_SQL_MEMORY_BYTES: usize = 1 << 30;

/// Why a capability call over a load's staged files failed: the step is
/// told this text.
#[derive(Debug, thiserror::Error)]
pub enum StagedError {
    #[error("no uploaded file {0}")]
    NoUploadedFile(String),
    #[error("no files were uploaded")]
    NoFilesUploaded,
    #[error("database {0} does not exist")]
    NoDatabase(String),
    /// A staged file whose envelope is not parquet's, named.
    #[error("file {file_key}: {source}")]
    File {
        file_key: String,
        #[source]
        source: EnvelopeError,
    },
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error(transparent)]
    Sql(#[from] StagedSqlError),
    #[error("only aggregate expressions over the staged rows are accepted here")]
    NotAggregate,
    #[error("load_as_service_client_id {text} is not a number")]
    ServiceClientId {
        text: String,
        #[source]
        source: ParseIntError,
    },
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The stored table's schema does not read.
    #[error(transparent)]
    Table(#[from] lake::Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// The answer's rows could not be shown as text.
    #[error(transparent)]
    Rows(#[from] ArrowError),
}

/// The load a pipeline run is for: its record, its files at commit time and
/// the database of its table.
pub struct StagedTarget {
    pub record: LoadRecord,
    pub files: Vec<LoadFile>,
    pub database: String,
}

/// One load's staged files, as the pipeline's capabilities see them.
pub struct StagedLoad {
    store: Store,
    lake: Lake,
    record: LoadRecord,
    files: Vec<LoadFile>,
    /// The database the load's table lives in.
    database: String,
    /// The service clients the caller may load (checked again per row).
    write_scope: ServiceClientScope,
    now_micros: i64,
    pending: Mutex<Option<PendingAppend>>,
    /// The first read of the staged rows that failed on a file's contents.
    invalid_parquet: Mutex<Option<String>>,
}

impl StagedLoad {
    /// `files` is the load's file list at commit time.
    pub fn new(
        store: Store,
        lake: Lake,
        target: StagedTarget,
        write_scope: ServiceClientScope,
        now_micros: i64,
    ) -> Self {
        Self {
            store,
            lake,
            record: target.record,
            files: target.files,
            database: target.database,
            write_scope,
            now_micros,
            pending: Mutex::new(None),
            invalid_parquet: Mutex::new(None),
        }
    }

    /// Why reading the staged rows failed on a file's contents, if it did.
    pub fn invalid_parquet(&self) -> Option<String> {
        self.invalid_parquet.lock().expect("invalid lock").clone()
    }

    /// Keeps a failed read of the staged rows that failed on a file's
    /// contents, for the commit's verdict.
    fn note_read_failure(&self, error: &DataFusionError) {
        if decodes_no_parquet(error) {
            self.invalid_parquet
                .lock()
                .expect("invalid lock")
                .get_or_insert_with(|| error.to_string());
        }
    }

    /// A failed read of the staged rows, as the step is told it (and kept
    /// when it failed on a file's contents).
    fn read_error(&self, error: DataFusionError) -> StagedError {
        self.note_read_failure(&error);
        StagedError::DataFusion(error)
    }

    fn file(&self, file_key: &str) -> Result<&LoadFile, StagedError> {
        self.files
            .iter()
            .find(|f| f.file_key == file_key && f.uploaded_at.is_some())
            .ok_or_else(|| StagedError::NoUploadedFile(file_key.to_string()))
    }

    /// The lake database the load writes to.
    async fn target_database(&self) -> Result<LakeDatabase, StagedError> {
        let load = &self.record.load;
        self.store
            .database(&load.org, load.zone.as_deref(), &self.database)
            .await?
            .ok_or_else(|| StagedError::NoDatabase(self.database.clone()))
    }

    /// A session whose table `staged` is every uploaded file of the load.
    async fn session(&self) -> Result<SessionContext, StagedError> {
        // As a query's: memory bounded by a pool, growing functions bounded.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(STAGED_SQL_MEMORY_BYTES)))
            .build_arc()?;
        // Every answer read from the rows, never a footer's (`staged_scan`).
        let context =
            SessionContext::new_with_state(staged_session_state(SessionConfig::new(), runtime));
        bound_functions(&context);
        let lake_url = self.lake.object_store_url().as_ref();
        context.register_object_store(lake_url, self.lake.object_store());
        let uploaded: Vec<&LoadFile> = self
            .files
            .iter()
            .filter(|f| f.uploaded_at.is_some())
            .collect();
        // No parquet reader sees a file whose envelope is not parquet's,
        // whatever steps an org's manifest runs before this one.
        for file in &uploaded {
            check_envelope(
                self.lake.object_store().as_ref(),
                &staging_path(&file.object_key),
            )
            .await
            .map_err(|source| StagedError::File {
                file_key: file.file_key.clone(),
                source,
            })?;
        }
        let urls = uploaded
            .iter()
            .map(|f| {
                ListingTableUrl::parse(format!(
                    "{}{}",
                    self.lake.object_store_url().as_str(),
                    staging_path(&f.object_key)
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if urls.is_empty() {
            return Err(StagedError::NoFilesUploaded);
        }
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .infer_schema(&context.state())
            .await?;
        let table = ListingTable::try_new(config)?;
        let table = EveryRowRead {
            inner: Arc::new(table),
        };
        context.register_table(STAGED_TABLE, Arc::new(table))?;
        Ok(context)
    }

    async fn run_query(&self, sql: &str, max_rows: u32) -> Result<TextRows, StagedError> {
        check_staged_sql(sql)?;
        let context = self.session().await?;
        let plan = context.state().create_logical_plan(sql).await?;
        if !has_group_by(sql) && !has_aggregate(&plan) {
            return Err(StagedError::NotAggregate);
        }
        let frame = context
            .execute_logical_plan(plan)
            .await?
            .limit(0, Some(max_rows as usize))?;
        let batches = frame.collect().await.map_err(|e| self.read_error(e))?;
        Ok(crate::pipeline::rows_as_text(&batches)?)
    }

    async fn parquet_columns_of(&self, file_key: &str) -> Result<Vec<ColumnInfo>, StagedError> {
        let file = self.file(file_key)?;
        let path = staging_path(&file.object_key);
        let store = self.lake.object_store();
        let meta = check_envelope(store.as_ref(), &path).await?;
        let state = SessionContext::new().state();
        let schema = ParquetFormat::default()
            .infer_schema(&state, &store, &[meta])
            .await?;
        Ok(columns_of(&schema)
            .into_iter()
            .map(|c| ColumnInfo {
                name: c.name,
                sql_type: c.sql_type,
                nullable: c.nullable,
            })
            .collect())
    }

    async fn table_columns_of(&self) -> Result<Option<Vec<ColumnInfo>>, StagedError> {
        let database = self.target_database().await?;
        let Some(table) = self
            .store
            .table(&database.id, &self.record.load.table_name)
            .await?
        else {
            return Ok(None);
        };
        // The file columns, then the partition columns as queries see them.
        let layout = TableLayout::of(&table)?;
        let mut fields: Vec<_> = layout.file_schema.fields().iter().cloned().collect();
        for partition in &layout.partition_columns {
            if !fields.iter().any(|f| f.name() == partition) {
                fields.push(partition_field(partition));
            }
        }
        let columns = columns_of(&Schema::new(fields))
            .into_iter()
            .map(|c| ColumnInfo {
                name: c.name,
                sql_type: c.sql_type,
                nullable: c.nullable,
            })
            .collect();
        Ok(Some(columns))
    }
}

#[async_trait]
impl LoadData for StagedLoad {
    fn list_files(&self) -> Result<Vec<StagedFileInfo>, DataError> {
        Ok(self
            .files
            .iter()
            .map(|f| StagedFileInfo {
                file_key: f.file_key.clone(),
                size_bytes: f.size_bytes.unwrap_or(0).max(0) as u64,
                uploaded: f.uploaded_at.is_some(),
            })
            .collect())
    }

    async fn parquet_columns(&self, file_key: &str) -> Result<Vec<ColumnInfo>, DataError> {
        self.parquet_columns_of(file_key)
            .await
            .map_err(DataError::new)
    }

    async fn query(&self, sql: &str, max_rows: u32) -> Result<TextRows, DataError> {
        self.run_query(sql, max_rows).await.map_err(DataError::new)
    }

    async fn table_columns(&self) -> Result<Option<Vec<ColumnInfo>>, DataError> {
        self.table_columns_of().await.map_err(DataError::new)
    }

    async fn append_staged(&self) -> Result<u64, DataError> {
        self.append().await.map_err(DataError::new)
    }
}

/// What the insert step wrote: lake files that become visible only when the
/// commit records them (with the new table, if any) in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAppend {
    /// The table to create with the files; `None` when it exists.
    pub new_table: Option<LakeTable>,
    pub table_id: String,
    pub files: Vec<NewDataFile>,
    pub rows: u64,
}

impl StagedLoad {
    /// The insert step's result, for the commit to record.
    pub fn take_pending(&self) -> Option<PendingAppend> {
        self.pending.lock().expect("pending lock").take()
    }

    async fn append(&self) -> Result<u64, StagedError> {
        let load = &self.record.load;
        let context = self.session().await?;
        let mut frame = context.table(STAGED_TABLE).await?;
        if let Some(text) = &load.load_as_service_client_id {
            let id: i64 = text
                .trim()
                .parse()
                .map_err(|source| StagedError::ServiceClientId {
                    text: text.clone(),
                    source,
                })?;
            frame = frame.with_column(SERVICE_CLIENT_COLUMN, lit(id))?;
        }
        let database = self.target_database().await?;
        let existing = self.store.table(&database.id, &load.table_name).await?;
        let (layout, new_table, table_id) = match existing {
            Some(table) => (TableLayout::of(&table)?, None, table.id),
            None => {
                let staged = frame.schema().as_arrow().clone();
                let layout = TableLayout::for_loads(&staged, &load.partitions)?;
                let table = layout.catalog_entry(&database.id, &load.table_name, self.now_micros);
                let id = table.id.clone();
                (layout, Some(table), id)
            }
        };
        let writer = layout
            .writer(
                self.lake.object_store(),
                (&database.name, &load.table_name),
                &load.id,
                self.write_scope.clone(),
            )
            .named(format!("{}-a{}", load.id, self.record.attempts));
        let stream = frame
            .execute_stream()
            .await
            .map_err(|e| self.read_error(e))?;
        let rows = stream.map_err(|e| {
            self.note_read_failure(&e);
            EngineError::run(e)
        });
        let written = write_batches(rows, writer).await?;
        let (files, rows) = (written.files, written.rows);
        *self.pending.lock().expect("pending lock") = Some(PendingAppend {
            new_table,
            table_id,
            files,
            rows,
        });
        Ok(rows)
    }
}

/// Whether `error` came from decoding a staged file's contents (a page, its
/// encoding or compression) rather than from the SQL or the host.
fn decodes_no_parquet(error: &DataFusionError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<ParquetError>()
            || matches!(
                error.downcast_ref::<ArrowError>(),
                Some(ArrowError::ParquetError(_))
            )
        {
            return true;
        }
        cause = error.source();
    }
    false
}
