//! The one loop that writes rows into lake files: a stream of batches
//! through a `TableWriter`, every staged file deleted again when a batch or
//! a write fails. The files become visible only when the caller commits
//! them to the catalog with its job's end.

use std::sync::Arc;

use datafusion::{
    arrow::array::RecordBatch,
    physical_plan::{ExecutionPlan, execute_stream},
    prelude::SessionContext,
};
use futures::{Stream, StreamExt as _, TryStreamExt as _};

use super::{EngineError, table_writer::TableWriter};
use crate::store::catalog::NewDataFile;

/// Files staged by one write, and the rows they hold.
#[derive(Debug)]
pub struct Written {
    pub files: Vec<NewDataFile>,
    pub rows: u64,
}

impl Written {
    /// The staged files' paths, for deleting them when the commit fails.
    pub fn paths(&self) -> Vec<String> {
        self.files.iter().map(|f| f.path.clone()).collect()
    }
}

/// Runs `plan` in `context` and writes its rows through `writer`.
pub async fn write_plan(
    context: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    writer: TableWriter,
) -> Result<Written, EngineError> {
    match execute_stream(plan, context.task_ctx()) {
        Ok(stream) => write_batches(stream.map_err(EngineError::run), writer).await,
        Err(e) => {
            writer.abort().await;
            Err(EngineError::run(e))
        }
    }
}

/// Writes every batch of `batches` through `writer`; on the first error the
/// files staged so far are deleted.
pub async fn write_batches(
    batches: impl Stream<Item = Result<RecordBatch, EngineError>>,
    mut writer: TableWriter,
) -> Result<Written, EngineError> {
    let mut batches = std::pin::pin!(batches);
    let mut rows = 0u64;
    while let Some(batch) = batches.next().await {
        let written = match batch {
            Ok(batch) => {
                rows += batch.num_rows() as u64;
                writer.write(&batch).await.map_err(EngineError::from)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            writer.abort().await;
            return Err(e);
        }
    }
    let files = writer.finish().await?;
    Ok(Written { files, rows })
}
