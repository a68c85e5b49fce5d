//! Statements as query jobs. `GetFlightInfo` of a statement (or of a
//! prepared statement, whose handle is its SQL and any values bound to it)
//! checks and plans it. A read
//! answers with a streamed ticket: `DoGet` of it runs the query and sends
//! its rows as they come (`QueryService::run_streamed`), and no result is
//! kept. Any other statement is submitted as a stored job at once, and
//! `DoGet` of its ticket (the query id) sends its one-row count once it has
//! ended. A cancel names either by its Flight info. An update (`DoPut` of
//! `CommandStatementUpdate`, or of `CommandPreparedStatementUpdate` with its
//! rows of parameters: ADBC's `execute_update` and `executemany`) is
//! submitted the same way and answered with its count once it has ended.

use std::sync::Arc;

use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket,
    sql::{
        ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
        ProstMessageExt, TicketStatementQuery,
    },
};
use datafusion::arrow::{datatypes::Schema, ipc::writer::IpcWriteOptions};
use prost::Message;
use serde::{Deserialize, Serialize};
use tonic::{Code, Request, Response, Status};

use super::{
    LakeFlightSql, caller,
    parameters::{self, PreparedStatement},
    results::TicketRows,
    status,
};
use crate::{
    engine::layout::without_view_types,
    query::{
        QueryError,
        service::{StreamStart, SubmitPreferences, WireEnd},
    },
};

/// A streamed read's ticket (JSON in `TicketStatementQuery`'s handle): the
/// query id its run will have and its SQL. It grants nothing: whoever
/// presents it runs the SQL with their own access, and an id runs once.
#[derive(Serialize, Deserialize)]
struct StreamTicket {
    #[serde(rename = "queryId")]
    query_id: String,
    sql: String,
}

/// What a statement ticket's handle names.
enum Handle {
    /// A read to run and stream.
    Streamed(StreamTicket),
    /// A stored job, by its query id.
    Stored(String),
}

impl Handle {
    fn of(handle: &[u8]) -> Result<Self, Status> {
        if handle.first() == Some(&b'{') {
            return serde_json::from_slice(handle)
                .map(Handle::Streamed)
                .map_err(|_| Status::invalid_argument("the ticket is not one lakehost issued"));
        }
        String::from_utf8(handle.to_vec())
            .map(Handle::Stored)
            .map_err(|_| Status::invalid_argument("the ticket is not a lakehost query id"))
    }

    fn query_id(&self) -> &str {
        match self {
            Handle::Streamed(ticket) => &ticket.query_id,
            Handle::Stored(id) => id,
        }
    }
}

pub(super) fn cancelled(id: &str) -> Status {
    Status::cancelled(format!("query {} was cancelled", status::echo(id)))
}

pub(super) fn no_transactions() -> Status {
    Status::unimplemented("lakehost has no transactions: each statement is its own query")
}

/// The statement a prepared statement's handle holds (the handle is the
/// statement itself, with any values bound to it: `parameters.rs`), so any
/// replica runs it, checked again for whoever executes it.
pub(super) fn prepared_sql(handle: &[u8]) -> Result<PreparedStatement, Status> {
    PreparedStatement::of_handle(handle)
}

/// What a statement's Flight info names: its one endpoint's ticket.
fn handle_of(info: &FlightInfo) -> Result<Handle, Status> {
    info.endpoint
        .first()
        .and_then(|endpoint| endpoint.ticket.as_ref())
        .and_then(|ticket| handle_of_ticket(&ticket.ticket))
        .ok_or_else(|| {
            Status::invalid_argument("the flight info is not one of a lakehost statement")
        })
}

/// What a statement ticket's bytes name, read as `DoGet` reads them (an
/// `Any` holding a `TicketStatementQuery`, then its handle).
fn handle_of_ticket(ticket: &[u8]) -> Option<Handle> {
    let any = Any::decode(ticket).ok()?;
    let handle: TicketStatementQuery = any.unpack().ok().flatten()?;
    Handle::of(&handle.statement_handle).ok()
}

/// The query id a statement ticket's bytes name (the fuzz harness's entry).
#[cfg(feature = "fuzzing")]
pub(crate) fn ticket_query_id(ticket: &[u8]) -> Option<String> {
    handle_of_ticket(ticket).map(|handle| handle.query_id().to_string())
}

impl LakeFlightSql {
    /// Cancels the query of `info` for the call's caller (as
    /// `DELETE /v2/query/{id}` does; a query already ended stays as it is).
    /// True when it was cancelled now, false when it had ended already.
    pub(super) async fn cancel(
        &self,
        info: &FlightInfo,
        request: &Request<Action>,
    ) -> Result<bool, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        let queries = &self.state.queries;
        let cancelled = match handle_of(info)? {
            Handle::Streamed(ticket) => {
                queries
                    .cancel_streamed(&caller, &ticket.query_id, &ticket.sql)
                    .await
            }
            Handle::Stored(id) => queries.cancel(&caller, &id).await,
        };
        cancelled.map_err(status::status_of)
    }

    /// A statement checked and planned for the call's caller: its result's
    /// schema and one endpoint, whose ticket names a streamed read or the
    /// stored job of any other statement (the query id is also in
    /// `app_metadata` as `{"queryId": ...}`).
    pub(super) async fn run_statement(
        &self,
        sql: &str,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        let queries = &self.state.queries;
        let plan = queries
            .plan_streamed(&caller, sql)
            .await
            .map_err(status::status_of)?;
        let (id, handle) = match plan.streamed_id {
            Some(id) => {
                let ticket = StreamTicket {
                    query_id: id.clone(),
                    sql: sql.to_string(),
                };
                (
                    id,
                    serde_json::to_vec(&ticket).expect("a ticket serialises"),
                )
            }
            None => {
                let submitted = queries
                    .submit(&caller, sql, None, SubmitPreferences::default(), None)
                    .await
                    .map_err(status::status_of)?;
                (submitted.id.clone(), submitted.id.into_bytes())
            }
        };
        let handle = TicketStatementQuery {
            statement_handle: handle.into(),
        };
        let ticket = Ticket::new(handle.as_any().encode_to_vec());
        let schema = without_view_types(&plan.schema);
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| status::status_of(QueryError::internal("", e)))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner())
            .with_app_metadata(serde_json::json!({ "queryId": id }).to_string());
        Ok(Response::new(info))
    }

    /// A prepared statement, created: checked and planned for the call's
    /// caller (a statement with parameters is planned when it runs with its
    /// values: its columns are not known before); its handle is its SQL.
    pub(super) async fn create_prepared(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        if query.transaction_id.is_some() {
            return Err(no_transactions());
        }
        let schema = if parameters::count(&query.query)? > 0 {
            Arc::new(Schema::empty())
        } else {
            self.state
                .queries
                .describe(&caller, &query.query)
                .await
                .map_err(status::status_of)?
        };
        let schema = without_view_types(&schema);
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: datafusion::arrow::error::ArrowError| {
                status::status_of(QueryError::internal("", e))
            })?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into(),
            dataset_schema,
            parameter_schema: Default::default(),
        })
    }

    /// An update's count: `sql` (not a read: those are queries) submitted
    /// as a stored job for the call's caller, answered once it has ended.
    pub(super) async fn run_update(
        &self,
        sql: &str,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<i64, Status> {
        let caller = caller::caller_of(&self.state, metadata, "query:write").await?;
        let queries = &self.state.queries;
        let plan = queries
            .plan_streamed(&caller, sql)
            .await
            .map_err(status::status_of)?;
        if plan.streamed_id.is_some() {
            return Err(Status::invalid_argument(
                "this statement is a read: run it as a query (GetFlightInfo), not an update",
            ));
        }
        let submitted = queries
            .submit(&caller, sql, None, SubmitPreferences::default(), None)
            .await
            .map_err(status::status_of)?;
        let end = queries
            .typed_result_at_end(&caller, &submitted.id)
            .await
            .map_err(status::status_of)?;
        let bytes = match end {
            WireEnd::Rows(bytes) => bytes,
            WireEnd::Cancelled => return Err(cancelled(&submitted.id)),
            WireEnd::Failed(reason) => return Err(status::bounded(Code::Aborted, reason)),
        };
        count_of(bytes).await
    }

    /// A statement's rows, for `DoGet` of its ticket: a streamed read runs
    /// now, for the caller of this call; a stored job's result (its own
    /// caller only) once it has ended.
    pub(super) async fn rows_of(
        &self,
        ticket: &TicketStatementQuery,
        request: &Request<Ticket>,
    ) -> Result<TicketRows, Status> {
        let handle = Handle::of(&ticket.statement_handle)?;
        let scope = match handle {
            Handle::Streamed(_) => "query:write",
            Handle::Stored(_) => "query:read",
        };
        let caller = caller::caller_of(&self.state, request.metadata(), scope).await?;
        let queries = &self.state.queries;
        let id = handle.query_id().to_string();
        let stored = match handle {
            Handle::Streamed(ticket) => {
                let started = queries
                    .run_streamed(&caller, &ticket.query_id, &ticket.sql)
                    .await
                    .map_err(status::status_of)?;
                return match started {
                    StreamStart::Rows(rows) => Ok(TicketRows::streamed(rows)),
                    StreamStart::Cancelled => Err(cancelled(&id)),
                };
            }
            Handle::Stored(id) => queries.typed_result_at_end(&caller, &id).await,
        };
        let bytes = match stored.map_err(status::status_of)? {
            WireEnd::Rows(bytes) => bytes,
            WireEnd::Cancelled => return Err(cancelled(&id)),
            WireEnd::Failed(reason) => return Err(status::bounded(Code::Aborted, reason)),
        };
        TicketRows::stored(bytes).await
    }
}

/// The count an update's result holds (its first column's first value;
/// 0 for a statement without one, as DDL).
async fn count_of(
    bytes: futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
) -> Result<i64, Status> {
    use datafusion::arrow::{
        array::{Array as _, Int64Array},
        compute::cast,
        datatypes::DataType,
    };
    let unreadable = |e: datafusion::arrow::error::ArrowError| {
        status::status_of(QueryError::internal("an update's count", e))
    };
    let mut batches = crate::query::ipc_batches::IpcBatches::new(bytes);
    let Some(batch) = batches.next_batch().await.map_err(unreadable)? else {
        return Ok(0);
    };
    if batch.num_columns() == 0 || batch.num_rows() == 0 {
        return Ok(0);
    }
    let counts = cast(batch.column(0), &DataType::Int64).map_err(unreadable)?;
    Ok(counts
        .as_any()
        .downcast_ref::<Int64Array>()
        .filter(|counts| counts.is_valid(0))
        .map_or(0, |counts| counts.value(0)))
}
