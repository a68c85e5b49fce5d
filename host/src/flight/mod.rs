//! Arrow Flight SQL on `server.flight_listen`: a front end over the same
//! query service as the REST API, never a second engine. A statement is a
//! query job (classification, role rules, the access decision in `scan()`
//! and the spec's refusal texts all apply, and `GET /v2/query/{id}` shows
//! it).
//!
//! - `GetFlightInfo` of a statement (`query:write`) checks and plans it and
//!   answers with the result's schema and one endpoint (the query id is in
//!   `app_metadata` as `{"queryId": ...}`). A read's ticket holds its SQL
//!   and the id its run will have; `DoGet` of it (`query:write`, planned
//!   again for that call's caller) runs the query and streams its rows as
//!   the engine makes them, keeping none (the job shows `"via":
//!   "flight-sql"`). Any other statement is submitted as a stored job, and
//!   `DoGet` of its ticket (the query id; `query:read`, its own caller only)
//!   sends its count once it ends. A FAILED query is `Aborted` with its
//!   reason, a CANCELLED one `Cancelled`.
//! - `Handshake` with `authorization: Basic` exchanges a client id and secret
//!   for a token of the org's realm and opens a session (`sessions.rs`) whose
//!   opaque token it hands back as `authorization: Bearer` (ADBC's username
//!   and password): the session renews its realm token with the secret when
//!   it expires, as a Postgres session does; every other
//!   call carries a bearer token (`caller.rs`), checked before tonic routes
//!   it (`gate.rs`): a call without one is refused and its connection
//!   closed, and each org holds at most its share of the listener's
//!   connections.
//! - Catalog metadata lists what the caller may read (`metadata.rs`).
//! - A prepared statement's handle is its SQL: creating one checks and plans
//!   it (its schema, or the refusal), executing it runs it as a statement.
//!   Binding parameters (`DoPut`) answers a new handle, the original SQL
//!   with the rows bound (`parameters.rs`: each value inlined as the exact
//!   typed literal); binding again replaces them. An update with rows of
//!   parameters (`executemany`) runs as one statement.
//! - `CancelFlightInfo` (and Flight SQL's older `CancelQuery`) cancels the
//!   statement's query job, as `DELETE /v2/query/{id}` does; a read not
//!   started yet is stored CANCELLED.
//! - Every call has a request id, a log line and a count (`calls.rs`).
//!
//! Not here: transactions (none: each statement is its own job).

mod caller;
mod calls;
mod direct_get;
mod frames;
mod gate;
mod handshake;
mod metadata;
mod parameters;
mod results;
pub mod sessions;
mod statements;
mod status;

#[cfg(feature = "fuzzing")]
pub(crate) use statements::ticket_query_id;

use std::{pin::Pin, sync::Arc};

use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
    encode::FlightDataEncoderBuilder,
    flight_service_server::FlightServiceServer,
    sql::{
        ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
        ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any, Command,
        CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
        CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
        CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
        DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
        server::{FlightSqlService, PeekableFlightDataStream},
    },
};
use datafusion::arrow::{array::RecordBatch, datatypes::Schema};
use futures::{Stream, TryStreamExt as _};
use prost::Message;
use statements::{no_transactions, prepared_sql};
use tonic::{Request, Response, Status, Streaming};

use crate::{
    auth::TokenValidator,
    config::Config,
    query::{QueryError, QueryService},
    store::Store,
};

/// The Flight action that cancels a statement.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The Flight action ADBC sends when a connection closes.
const CLOSE_SESSION: &str = "CloseSession";

/// `CloseSessionResult { status: CLOSED }` as protobuf (field 1, varint 1):
/// arrow-flight 59 has no session messages.
const CLOSE_SESSION_CLOSED: [u8; 2] = [0x08, 0x01];

/// `ActionCancelQueryResult.CancelResult.CANCEL_RESULT_CANCELLED` (the enum
/// is not exported by arrow-flight).
const CANCEL_RESULT_CANCELLED: i32 = 1;
/// `CANCEL_RESULT_NOT_CANCELLABLE`: the query had ended already.
const CANCEL_RESULT_NOT_CANCELLABLE: i32 = 3;

/// What `DoAction` answers with.
type DoActionStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::Result, Status>> + Send>>;

/// What `DoPut` answers with.
type DoPutStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::PutResult, Status>> + Send>>;

/// What `DoGet` answers with.
pub type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

/// What the Flight SQL service reaches: the same config, validator, store
/// and query service as the REST API.
#[derive(Clone)]
pub struct FlightState {
    pub config: Arc<Config>,
    pub validator: Arc<TokenValidator>,
    pub store: Store,
    pub queries: Arc<QueryService>,
    /// The sessions handshakes with a client id and secret opened
    /// (`sessions.rs`), on this replica.
    pub sessions: Arc<sessions::FlightSessions>,
}

/// The gRPC service as a router that `listener::serve` serves (HTTP/2).
pub fn router(state: FlightState) -> axum::Router {
    let service = Arc::new(LakeFlightSql {
        state: state.clone(),
    });
    tonic::service::Routes::new(FlightServiceServer::from_arc(service.clone()))
        .into_axum_router()
        .route(
            direct_get::PATH,
            axum::routing::post(direct_get::do_get).with_state(service),
        )
        .layer(axum::middleware::from_fn_with_state(state, gate::admit))
        .layer(axum::middleware::from_fn(calls::call_context))
}

struct LakeFlightSql {
    state: FlightState,
}

impl LakeFlightSql {
    /// The Flight info of a listing `command` (catalogs, tables, SqlInfo),
    /// for a caller with `query:read`: one endpoint whose ticket is the
    /// command itself (the answer is made at `DoGet`).
    async fn listing_info(
        &self,
        command: &impl ProstMessageExt,
        schema: &Schema,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let ticket = Ticket::new(command.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| status::status_of(QueryError::internal("", e)))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }
}

/// One batch as a `DoGet` answer.
fn one_batch(batch: RecordBatch) -> Response<DoGetStream> {
    let batches = futures::stream::iter([Ok(batch)]);
    let data = FlightDataEncoderBuilder::new()
        .build(batches)
        .map_err(results::internal);
    Response::new(Box::pin(data))
}

#[tonic::async_trait]
impl FlightSqlService for LakeFlightSql {
    type FlightService = LakeFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let (metadata, extensions, _) = request.into_parts();
        handshake::handshake(&self.state, &metadata, &extensions).await
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        if query.transaction_id.is_some() {
            return Err(no_transactions());
        }
        self.run_statement(&query.query, request).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        self.create_prepared(query, request).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let sql = prepared_sql(&query.prepared_statement_handle)?;
        self.run_statement(&sql, request).await
    }

    /// Parameters bound: the new handle is the statement with its values
    /// (`parameters.rs`), checked like any statement when it runs.
    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        let sql = prepared_sql(&query.prepared_statement_handle)?;
        let row = parameters::row_of(request.into_inner()).await?;
        let bound = parameters::bind(&sql, &row)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(bound.into()),
        })
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        if command.transaction_id.is_some() {
            return Err(no_transactions());
        }
        self.run_update(&command.query, request.metadata()).await
    }

    /// `executemany`: the statement with every row bound (`parameters.rs`
    /// makes one INSERT of them all, so all are written or none).
    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let prepared = prepared_sql(&command.prepared_statement_handle)?;
        let metadata = request.metadata().clone();
        let rows = parameters::rows_if_any(request.into_inner()).await?;
        let bound = match rows {
            Some(rows) => {
                parameters::PreparedStatement::of_handle(&parameters::bind(&prepared, &rows)?)?
            }
            None => prepared,
        };
        self.run_update(&bound, &metadata).await
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // The handle is the statement itself: nothing is kept to close.
        Ok(())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let rows = self.rows_of(&ticket, &request).await?;
        Ok(Response::new(rows.into_flight_data()))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.listing_info(&query, &schema, request).await
    }

    async fn do_get_catalogs(
        &self,
        _query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        Ok(one_batch(metadata::catalogs()?))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.listing_info(&query, &schema, request).await
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        Ok(one_batch(
            metadata::db_schemas(&self.state, &caller, query).await?,
        ))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.listing_info(&query, &schema, request).await
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        Ok(one_batch(
            metadata::tables(&self.state, &caller, query).await?,
        ))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let batch = metadata::table_types()?;
        self.listing_info(&query, &batch.schema(), request).await
    }

    async fn do_get_table_types(
        &self,
        _query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        Ok(one_batch(metadata::table_types()?))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&metadata::SQL_INFO).schema();
        self.listing_info(&query, &schema, request).await
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let batch = query
            .into_builder(&metadata::SQL_INFO)
            .build()
            .map_err(|e| status::status_of(QueryError::internal("", e)))?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(&metadata::XDBC_TYPE_INFO).schema();
        self.listing_info(&query, &schema, request).await
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        Ok(one_batch(metadata::xdbc_type_info(query)?))
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let info = FlightInfo::decode(query.info).map_err(|_| {
            Status::invalid_argument("the cancel request's flight info is malformed")
        })?;
        let result = if self.cancel(&info, &request).await? {
            CANCEL_RESULT_CANCELLED
        } else {
            CANCEL_RESULT_NOT_CANCELLABLE
        };
        Ok(ActionCancelQueryResult { result })
    }

    /// `CancelFlightInfo`, the Flight action that replaced Flight SQL's
    /// `CancelQuery`, and `CloseSession`; any other action is refused.
    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<DoActionStream>, Status> {
        if request.get_ref().r#type == CLOSE_SESSION {
            // No session state is kept: the session is closed as asked.
            let answer = arrow_flight::Result {
                body: CLOSE_SESSION_CLOSED.to_vec().into(),
            };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(answer)]))));
        }
        if request.get_ref().r#type != CANCEL_FLIGHT_INFO {
            let action: String = request.get_ref().r#type.chars().take(64).collect();
            tracing::debug!(action, "unknown flight action refused");
            return Err(Status::invalid_argument(format!(
                "lakehost has no action {:?}",
                status::echo(&request.get_ref().r#type)
            )));
        }
        let cancel = CancelFlightInfoRequest::decode(request.get_ref().body.clone())
            .map_err(|_| Status::invalid_argument("the CancelFlightInfo request is malformed"))?;
        let info = cancel
            .info
            .ok_or_else(|| Status::invalid_argument("the CancelFlightInfo request has no info"))?;
        let status = if self.cancel(&info, &request).await? {
            CancelStatus::Cancelled
        } else {
            CancelStatus::NotCancellable
        };
        let result = CancelFlightInfoResult {
            status: status as i32,
        };
        let answer = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(answer)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.to_string(),
            description: "Cancel the query of a statement's FlightInfo".to_string(),
        })])
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "lakehost does not serve {} tickets",
            status::echo(&message.type_url)
        )))
    }

    // arrow-flight's own fallbacks quote the command's type URL whole.
    async fn get_flight_info_fallback(
        &self,
        command: Command,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(format!(
            "lakehost does not serve {} commands",
            status::echo(command.type_url())
        )))
    }

    async fn do_put_fallback(
        &self,
        _request: Request<PeekableFlightDataStream>,
        message: Any,
    ) -> Result<Response<DoPutStream>, Status> {
        Err(Status::unimplemented(format!(
            "lakehost does not take {} uploads",
            status::echo(&message.type_url)
        )))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
