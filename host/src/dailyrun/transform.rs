//! The data side of the daily run's `lake-sql` capability: read-only SQL over
//! the org's databases and the refresh of an insights table from a SELECT.
//!
//! The daily run is the org's own job, so its SQL runs with the whole org's
//! access (every service client, every database) but only through the same
//! session as queries: the catalog's tables, no files, no URLs. A refresh
//! writes new files under a fresh id, then swaps the table in one catalog
//! transaction that also checks the run still holds (not TIMED_OUT or
//! ABORTED meanwhile); the replaced table's files are deleted after it.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    arrow::error::ArrowError,
    error::DataFusionError,
    physical_plan::{ExecutionPlan, execute_stream},
    prelude::SessionContext,
};
use futures::StreamExt as _;

use crate::{
    auth::{Access, ServiceClientScope},
    clock::SharedClock,
    engine::{
        EngineError,
        layout::{StringColumns, TableLayout, check_table_name},
        plan_sql,
        session::{SessionError, SessionScope, session_for},
        statement::{Action, StatementError, StatementType, classify},
        table_writer::delete_paths,
        write::write_plan,
    },
    lake::Lake,
    pipeline::{DailyData, DataError, TextRows, rows_as_text},
    store::{self, Store, new_id},
};

/// Why a `lake-sql` call failed: the step is told this text.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error(transparent)]
    Statement(#[from] StatementError),
    #[error("only a SELECT (or WITH ... SELECT) runs here")]
    NotASelect,
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The plan would not start (its text without a backtrace).
    #[error("{}", .0.strip_backtrace())]
    Start(#[source] DataFusionError),
    /// The answer's rows could not be shown as text.
    #[error(transparent)]
    Rows(#[from] ArrowError),
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error("database {0} does not exist")]
    NoDatabase(String),
    #[error("the run ended (timed out or aborted) before the table was replaced")]
    RunEnded,
    #[error("replacing the table: {0}")]
    Replace(#[source] store::Error),
}

/// The `lake-sql` answers for one execution of one org.
pub struct LakeTransform {
    pub store: Store,
    pub lake: Lake,
    pub clock: SharedClock,
    pub org: String,
    pub lake_database: String,
    pub insights_database: String,
    /// The execution and the server holding it.
    pub execution: String,
    pub holder: String,
    /// Memory one statement may hold before it spills (`query.memory_limit_bytes`).
    pub memory_limit: usize,
}

/// Everything of the org: the daily run reads every service client.
fn org_access() -> Access {
    Access::new(["ZoneAdmin"], [0])
}

impl LakeTransform {
    /// Plans one read-only SELECT (or WITH) in an org-wide session (which
    /// the plan runs in: it holds the lake's object store and memory pool).
    async fn plan(
        &self,
        sql: &str,
    ) -> Result<(SessionContext, Arc<dyn ExecutionPlan>), TransformError> {
        let classified = classify(sql)?;
        if classified.statement_type != StatementType::Dml || classified.action != Action::Read {
            return Err(TransformError::NotASelect);
        }
        let access = org_access();
        let scope = SessionScope {
            org: &self.org,
            zone: None,
            access: &access,
            default_database: &self.lake_database,
            memory_limit: Some(self.memory_limit),
            metadata_cache: None,
            read_cache: None,
            strings: StringColumns::Views,
            cluster: None,
            target_partitions: 0,
        };
        let context = session_for(&self.store, &self.lake, &scope).await?;
        let plan = plan_sql(&context, sql).await?;
        Ok((context, plan))
    }

    async fn run_query(&self, sql: &str, max_rows: u32) -> Result<TextRows, TransformError> {
        let (context, plan) = self.plan(sql).await?;
        let mut stream = execute_stream(plan, context.task_ctx()).map_err(TransformError::Start)?;
        let mut batches = Vec::new();
        let mut rows = 0usize;
        while rows < max_rows as usize {
            let Some(batch) = stream.next().await else {
                break;
            };
            let batch = batch.map_err(EngineError::run)?;
            let keep = batch.num_rows().min(max_rows as usize - rows);
            rows += keep;
            batches.push(batch.slice(0, keep));
        }
        Ok(rows_as_text(&batches)?)
    }

    async fn refresh(&self, table: &str, sql: &str) -> Result<u64, TransformError> {
        check_table_name(table)?;
        let database = self
            .store
            .database(&self.org, None, &self.insights_database)
            .await?
            .ok_or_else(|| TransformError::NoDatabase(self.insights_database.clone()))?;
        let (context, plan) = self.plan(sql).await?;
        let schema = plan.schema();
        let layout = TableLayout::for_rows(&schema)?;
        let now = self.clock.now().timestamp_micros();
        let new_table = layout.catalog_entry(&database.id, table, now);
        // A fresh id per refresh: the new files never share a path with the
        // files of the table they replace.
        let writer = layout.writer(
            self.lake.object_store(),
            (&database.name, table),
            &new_id(),
            ServiceClientScope::All,
        );
        let written = write_plan(&context, plan, writer).await?;
        let (rows, paths) = (written.rows, written.paths());
        let swapped = self
            .store
            .replace_table_for_run(
                &self.execution,
                &self.holder,
                &new_table,
                &written.files,
                now,
            )
            .await;
        let store = self.lake.object_store();
        match swapped {
            // The replaced files are retired; the sweeper deletes them.
            Ok(true) => Ok(rows),
            Ok(false) => {
                delete_paths(store.as_ref(), &paths).await;
                Err(TransformError::RunEnded)
            }
            Err(e) => {
                delete_paths(store.as_ref(), &paths).await;
                Err(TransformError::Replace(e))
            }
        }
    }
}

#[async_trait]
impl DailyData for LakeTransform {
    async fn query(&self, sql: &str, max_rows: u32) -> Result<TextRows, DataError> {
        self.run_query(sql, max_rows).await.map_err(DataError::new)
    }

    async fn refresh_table(&self, table: &str, sql: &str) -> Result<u64, DataError> {
        self.refresh(table, sql).await.map_err(DataError::new)
    }
}
