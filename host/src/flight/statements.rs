//! Statements as query jobs: `GetFlightInfo` of a statement (or of a
//! prepared statement, whose handle is its SQL) submits it, `DoGet` of its
//! ticket (the query id) sends its rows once it has ended, and a cancel
//! names it by its Flight info.

use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket,
    sql::{Any, ProstMessageExt, TicketStatementQuery},
};
use prost::Message;
use tonic::{Request, Response, Status};

use super::{DoGetStream, LakeFlightSql, caller, results, status};
use crate::{
    engine::layout::without_view_types,
    query::{QueryError, service::WireEnd},
};

pub(super) fn no_transactions() -> Status {
    Status::unimplemented("lakehost has no transactions: each statement is its own query")
}

/// The SQL a prepared statement's handle holds (the handle is the statement
/// itself, so any replica runs it, checked again for whoever executes it).
pub(super) fn prepared_sql(handle: &[u8]) -> Result<String, Status> {
    String::from_utf8(handle.to_vec())
        .map_err(|_| Status::invalid_argument("the prepared statement handle is not lakehost's"))
}

/// The query a statement's Flight info names: its one endpoint's ticket.
fn query_id_of(info: &FlightInfo) -> Result<String, Status> {
    let not_ours =
        || Status::invalid_argument("the flight info is not one of a lakehost statement");
    let ticket = info
        .endpoint
        .first()
        .and_then(|endpoint| endpoint.ticket.as_ref())
        .ok_or_else(not_ours)?;
    let any = Any::decode(&*ticket.ticket).map_err(|_| not_ours())?;
    let handle: TicketStatementQuery = any.unpack().ok().flatten().ok_or_else(not_ours)?;
    String::from_utf8(handle.statement_handle.to_vec()).map_err(|_| not_ours())
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
        let id = query_id_of(info)?;
        self.state
            .queries
            .cancel(&caller, &id)
            .await
            .map_err(status::status_of)
    }

    /// A statement submitted as a query job for the call's caller: its
    /// result's schema and one endpoint, whose ticket is the query id.
    pub(super) async fn run_statement(
        &self,
        sql: &str,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        let submitted = self
            .state
            .queries
            .submit(&caller, sql, None, None, None)
            .await
            .map_err(status::status_of)?;
        let handle = TicketStatementQuery {
            statement_handle: submitted.id.clone().into(),
        };
        let ticket = Ticket::new(handle.as_any().encode_to_vec());
        let schema = without_view_types(&submitted.schema);
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| status::status_of(QueryError::Internal(e.to_string())))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner())
            .with_app_metadata(serde_json::json!({ "queryId": submitted.id }).to_string());
        Ok(Response::new(info))
    }

    /// A statement's rows, for `DoGet` of its ticket: the query's own caller
    /// only; waits for the query's end (until it ends or the client goes away).
    pub(super) async fn rows_of(
        &self,
        ticket: &TicketStatementQuery,
        request: &Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let id = std::str::from_utf8(&ticket.statement_handle)
            .map_err(|_| Status::invalid_argument("the ticket is not a lakehost query id"))?;
        let bytes = match self
            .state
            .queries
            .typed_result_at_end(&caller, id)
            .await
            .map_err(status::status_of)?
        {
            WireEnd::Rows(bytes) => bytes,
            WireEnd::Cancelled => {
                return Err(Status::cancelled(format!("query {id} was cancelled")));
            }
            WireEnd::Failed(reason) => return Err(Status::aborted(reason)),
        };
        Ok(Response::new(results::flight_data_of(bytes).await?))
    }
}
