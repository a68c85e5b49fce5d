//! From a plan to a result: `execute` runs a prepared statement, streaming
//! rows to the result CSV (and its typed Arrow copy, when `typed`) or, for
//! CREATE TABLE AS and INSERT, to staged lake files (through `engine::write`)
//! that the job commits with its final state. `stream_rows` runs a read whose
//! rows go to a client as they come (a streamed query), into no file.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use datafusion::{
    arrow::{
        array::{Int64Array, RecordBatch},
        datatypes::{DataType, Field, Schema, SchemaRef},
    },
    common::DataFusionError,
    physical_plan::{ExecutionPlan, execute_stream},
    prelude::SessionContext,
};
use futures::StreamExt as _;
use tokio::sync::mpsc;

use super::{
    QueryError,
    prepare::Prepared,
    result_writer::{ResultWriter, TypedCopies},
};
use crate::{
    auth::Access,
    engine::distributed::{finished_read, worker_failure, workers_reached},
    engine::{
        EngineError,
        columns::{ResultColumn, columns_of},
        layout::{plain_batch, without_view_types},
        table_writer::delete_paths,
        write::write_plan,
    },
    lake::Lake,
    store::queries::{CatalogWrite, ResultInRow},
};

/// What running a statement produced.
pub struct Execution {
    pub columns: Vec<ResultColumn>,
    pub rows: u64,
    pub bytes: u64,
    /// The whole result CSV when it is small (the writer kept a copy).
    pub small_result: Option<bytes::Bytes>,
    /// The result's forms small enough for the job's row, never uploaded.
    pub in_row: ResultInRow,
    pub write: CatalogWrite,
    /// Lake files written for `write`: deleted again unless it is committed.
    pub staged: Vec<String>,
    /// A read's lake snapshot, when its result may be reused (`engine::snapshot`).
    pub snapshot: Option<String>,
    /// How many workers a distributed read ran on (`engine::distributed`).
    pub workers: Option<u32>,
}

/// Where a statement's result goes: the CSV at `csv_path` and, when `typed`
/// says it is written while the query runs, its Arrow copy beside it
/// (`lake::result_file_path`);
/// each form of at most `in_row_limit` bytes to the job's row instead
/// (`query.result_in_store_bytes`).
#[derive(Debug, Clone)]
pub struct ResultTarget {
    pub csv_path: String,
    pub typed: TypedCopies,
    pub in_row_limit: usize,
}

impl ResultTarget {
    async fn writer(&self, lake: &Lake, schema: &Schema) -> std::io::Result<ResultWriter> {
        ResultWriter::create(
            lake.object_store(),
            &self.csv_path,
            schema,
            self.typed,
            self.in_row_limit,
        )
        .await
    }
}

/// Runs a prepared statement; its result goes to `target`.
pub async fn execute(
    context: &SessionContext,
    prepared: Prepared,
    lake: &Lake,
    access: &Access,
    query_id: &str,
    target: &ResultTarget,
) -> Result<Execution, QueryError> {
    match prepared {
        Prepared::Read { plan, snapshot } => {
            let schema = plan.schema();
            let mut writer = target
                .writer(lake, &schema)
                .await
                .map_err(|e| QueryError::internal("result file", e))?;
            let mut stream = execute_stream(plan.clone(), context.task_ctx())
                .map_err(|e| run_error(context, e))?;
            while let Some(batch) = stream.next().await {
                let written = match batch {
                    Ok(batch) => writer
                        .write(&batch)
                        .await
                        .map_err(|e| QueryError::internal("result file", e)),
                    Err(e) => Err(run_error(context, e)),
                };
                if let Err(e) = written {
                    writer.abort().await;
                    return Err(e);
                }
            }
            let written = writer
                .finish()
                .await
                .map_err(|e| QueryError::internal("result file", e))?;
            let ran = finished_read(plan).await;
            crate::observability::metrics::query_scanned(bytes_scanned(ran.as_ref()));
            Ok(Execution {
                columns: columns_of(&schema),
                rows: written.rows,
                bytes: written.bytes,
                small_result: written.small,
                in_row: written.in_row,
                write: CatalogWrite::None,
                staged: Vec::new(),
                snapshot,
                workers: workers_reached(context),
            })
        }
        Prepared::Nothing => empty_result(lake, target, CatalogWrite::None).await,
        Prepared::CreateTable { table } => {
            empty_result(lake, target, CatalogWrite::CreateTable { table }).await
        }
        Prepared::Drop { tables } => {
            empty_result(lake, target, CatalogWrite::DropTables { tables }).await
        }
        Prepared::Alter {
            table_id,
            new_name,
            new_schema_json,
        } => {
            let write = CatalogWrite::AlterTable {
                table_id,
                new_name,
                new_schema_json,
            };
            empty_result(lake, target, write).await
        }
        Prepared::CreateTableAs {
            database,
            table,
            layout,
            plan,
        } => {
            let writer = layout.writer(
                lake.object_store(),
                (&database.name, &table.name),
                query_id,
                access.read_scope(database.kind),
            );
            let written = write_plan(context, plan.clone(), writer).await?;
            crate::observability::metrics::query_scanned(bytes_scanned(plan.as_ref()));
            let (files, rows) = (written.files, written.rows);
            let staged = files.iter().map(|f| f.path.clone()).collect();
            let write = CatalogWrite::CreateTableWithFiles { table, files };
            count_result(lake, target, rows, write, staged).await
        }
        Prepared::Insert {
            database,
            table,
            layout,
            plan,
        } => {
            let writer = layout.writer(
                lake.object_store(),
                (&database.name, &table.name),
                query_id,
                access.read_scope(database.kind),
            );
            let written = write_plan(context, plan.clone(), writer).await?;
            crate::observability::metrics::query_scanned(bytes_scanned(plan.as_ref()));
            let (files, rows) = (written.files, written.rows);
            let staged = files.iter().map(|f| f.path.clone()).collect();
            let write = CatalogWrite::Append {
                table_id: table.id,
                files,
            };
            count_result(lake, target, rows, write, staged).await
        }
    }
}

/// Why a streamed query ends when its client goes away while rows are being
/// sent to it (its connection broke, it was killed mid-result).
pub const CLIENT_GONE: &str =
    "The client went away before it had read the whole result; the query was stopped.";

/// How long a streamed query waits for its client to take the next batch.
/// A client that stops reading would hold its slot and its place under the
/// fair-sharing caps until the time limit.
pub const CLIENT_STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// What a streamed query's client did with its rows: how many it took, and
/// whether it stopped reading on purpose before the last one. A client
/// stops on purpose when it leaves a read where it asked to pause: an
/// extended-protocol Execute's row limit reached (pgjdbc `setMaxRows`), a
/// cursor closed between FETCHes. Such a query ends SUCCEEDED with the rows
/// the client took; one whose client goes away while rows are being sent
/// ends FAILED with [`CLIENT_GONE`], as does a Flight `DoGet` dropped
/// before its end (gRPC does not tell a client's cancel from a lost
/// connection).
#[derive(Clone, Default, Debug)]
pub struct ClientReading(Arc<ReadingState>);

#[derive(Default, Debug)]
struct ReadingState {
    rows: AtomicU64,
    stopped: AtomicBool,
}

impl ClientReading {
    /// The client took `rows` more rows.
    pub fn took(&self, rows: u64) {
        self.0.rows.fetch_add(rows, Ordering::Relaxed);
    }

    /// The client stops reading here, as it asked to: called before the
    /// rows' receiver is dropped.
    pub fn stop_on_purpose(&self) {
        self.0.stopped.store(true, Ordering::Release);
    }

    /// The rows the client took, when it stopped reading on purpose.
    pub fn stopped(&self) -> Option<u64> {
        self.0
            .stopped
            .load(Ordering::Acquire)
            .then(|| self.0.rows.load(Ordering::Relaxed))
    }
}

/// Runs the read `plan`, sending its rows to `rows` as they come, each batch
/// with view types made plain (the types the client was told). A full
/// channel holds the scan back until the client reads, for at most
/// `CLIENT_STALL_LIMIT`; a dropped receiver stops it at once, also while no
/// batch is ready: SUCCEEDED with the rows the client took when `reading`
/// says it stopped on purpose, else FAILED (`CLIENT_GONE`). Nothing is
/// written: the execution has no small result, no write and no snapshot to
/// reuse.
pub async fn stream_rows(
    context: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    rows: mpsc::Sender<RecordBatch>,
    reading: ClientReading,
) -> Result<Execution, QueryError> {
    let schema = plan.schema();
    let plain = Arc::new(without_view_types(&schema));
    let mut stream =
        execute_stream(plan.clone(), context.task_ctx()).map_err(|e| run_error(context, e))?;
    let (mut sent_rows, mut sent_bytes) = (0u64, 0u64);
    // The client left: on purpose (the rows it took), or gone.
    let left = |sent_bytes: u64| match reading.stopped() {
        Some(taken) => {
            crate::observability::metrics::query_scanned(bytes_scanned(plan.as_ref()));
            Ok(Execution {
                columns: columns_of(&schema),
                rows: taken,
                bytes: sent_bytes,
                small_result: None,
                in_row: ResultInRow::default(),
                write: CatalogWrite::None,
                staged: Vec::new(),
                snapshot: None,
                workers: workers_reached(context),
            })
        }
        None => Err(QueryError::Failed(CLIENT_GONE.into())),
    };
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            () = rows.closed() => return left(sent_bytes),
        };
        let Some(batch) = next else { break };
        let batch = plain_batch(&batch.map_err(|e| run_error(context, e))?, &plain)
            .map_err(|e| QueryError::internal("result batch", e))?;
        let (batch_rows, batch_bytes) = (batch.num_rows() as u64, batch.get_array_memory_size());
        match tokio::time::timeout(CLIENT_STALL_LIMIT, rows.send(batch)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return left(sent_bytes),
            Err(_) => {
                return Err(QueryError::Failed(format!(
                    "The client read none of the result for {} seconds; the query was stopped.",
                    CLIENT_STALL_LIMIT.as_secs()
                )));
            }
        }
        sent_rows += batch_rows;
        sent_bytes += batch_bytes as u64;
    }
    let ran = finished_read(plan).await;
    crate::observability::metrics::query_scanned(bytes_scanned(ran.as_ref()));
    Ok(Execution {
        columns: columns_of(&schema),
        rows: sent_rows,
        bytes: sent_bytes,
        small_result: None,
        in_row: ResultInRow::default(),
        write: CatalogWrite::None,
        staged: Vec::new(),
        snapshot: None,
        workers: workers_reached(context),
    })
}

/// A failure while running: permission refusals keep their friendly message,
/// anything else is the engine's message.
fn run_error(context: &SessionContext, error: DataFusionError) -> QueryError {
    if let Some(reason) = worker_failure(context, &error) {
        return QueryError::Failed(reason);
    }
    EngineError::run(error).into()
}

/// The result of a statement that returns no rows: an empty CSV (and an
/// Arrow stream of no columns).
async fn empty_result(
    lake: &Lake,
    target: &ResultTarget,
    write: CatalogWrite,
) -> Result<Execution, QueryError> {
    let schema = Schema::empty();
    let writer = target
        .writer(lake, &schema)
        .await
        .map_err(|e| QueryError::internal("result file", e))?;
    let written = writer
        .finish()
        .await
        .map_err(|e| QueryError::internal("result file", e))?;
    Ok(Execution {
        columns: Vec::new(),
        rows: written.rows,
        bytes: written.bytes,
        small_result: written.small,
        in_row: written.in_row,
        write,
        staged: Vec::new(),
        snapshot: None,
        workers: None,
    })
}

/// The columns of a write's result: one, the number of rows written.
fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "rows",
        DataType::Int64,
        false,
    )]))
}

/// The columns `prepared` returns once run, as the engine types them: a
/// read's rows, a write's count, none for the rest.
pub fn result_schema(prepared: &Prepared) -> SchemaRef {
    match prepared {
        Prepared::Read { plan, .. } => plan.schema(),
        Prepared::CreateTableAs { .. } | Prepared::Insert { .. } => count_schema(),
        Prepared::Nothing
        | Prepared::CreateTable { .. }
        | Prepared::Drop { .. }
        | Prepared::Alter { .. } => Arc::new(Schema::empty()),
    }
}

/// The result of a write: one row, the number of rows written.
async fn count_result(
    lake: &Lake,
    target: &ResultTarget,
    rows: u64,
    write: CatalogWrite,
    staged: Vec<String>,
) -> Result<Execution, QueryError> {
    let schema = count_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![rows as i64]))],
    )
    .map_err(|e| QueryError::internal("", e))?;
    let outcome = async {
        let mut writer = target.writer(lake, &schema).await?;
        writer.write(&batch).await?;
        writer.finish().await
    }
    .await;
    match outcome {
        Ok(written) => Ok(Execution {
            columns: columns_of(&schema),
            rows: written.rows,
            bytes: written.bytes,
            small_result: written.small,
            in_row: written.in_row,
            write,
            staged,
            snapshot: None,
            workers: None,
        }),
        Err(e) => {
            delete_paths(lake.object_store().as_ref(), &staged).await;
            Err(QueryError::internal("result file", e))
        }
    }
}

/// The parquet bytes a finished plan read (reads, CREATE TABLE AS, INSERT):
/// DataFusion's `bytes_scanned` metric summed over the plan's nodes (a
/// distributed read's after `finished_read`), which
/// its parquet scans keep anyway, so this costs one walk of the plan.
fn bytes_scanned(plan: &dyn ExecutionPlan) -> u64 {
    let own = plan
        .metrics()
        .and_then(|metrics| metrics.sum_by_name("bytes_scanned"))
        .map_or(0, |value| value.as_usize() as u64);
    own + plan
        .children()
        .into_iter()
        .map(|child| bytes_scanned(child.as_ref()))
        .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    /// A read of ten rows in batches of two, its rows sent to a channel of
    /// one batch, and the reading its client reports to.
    async fn streaming() -> (
        tokio::task::JoinHandle<Result<Execution, QueryError>>,
        mpsc::Receiver<RecordBatch>,
        ClientReading,
    ) {
        let config = datafusion::prelude::SessionConfig::new().with_batch_size(2);
        let context = SessionContext::new_with_config(config);
        let frame = context.sql("SELECT value FROM range(0, 10)").await.unwrap();
        let plan = frame.create_physical_plan().await.unwrap();
        let (rows, received) = mpsc::channel(1);
        let reading = ClientReading::default();
        let run = {
            let reading = reading.clone();
            tokio::spawn(async move { stream_rows(&context, plan, rows, reading).await })
        };
        (run, received, reading)
    }

    #[tokio::test]
    async fn a_client_that_stops_on_purpose_ends_the_read_with_the_rows_it_took() {
        let (run, mut received, reading) = streaming().await;
        let first = received.recv().await.expect("a first batch");
        assert!(first.column(0).as_any().is::<Int64Array>());
        assert!(first.num_rows() < 10);
        reading.took(first.num_rows() as u64);
        reading.stop_on_purpose();
        drop(received);
        let execution = run.await.unwrap().expect("the read succeeded");
        assert_eq!(execution.rows, first.num_rows() as u64);
    }

    #[tokio::test]
    async fn a_client_that_goes_away_mid_result_fails_the_read() {
        let (run, mut received, reading) = streaming().await;
        let first = received.recv().await.expect("a first batch");
        reading.took(first.num_rows() as u64);
        drop(received);
        match run.await.unwrap() {
            Err(QueryError::Failed(reason)) => assert_eq!(reason, CLIENT_GONE),
            other => panic!("not gone: {:?}", other.map(|e| e.rows)),
        }
    }
}
