//! Arrow Flight SQL on `server.flight_listen`: a front end over the same
//! query service as the REST API, never a second engine. A statement is
//! submitted as a query job (classification, role rules, the access decision
//! in `scan()` and the spec's refusal texts all apply, and
//! `GET /v2/query/{id}` shows it); its rows are sent from the job's typed
//! result once it has ended.
//!
//! - `GetFlightInfo` of a statement submits it (`query:write`) and answers
//!   with the result's schema and one endpoint whose ticket is the query id
//!   (the id is also in `app_metadata` as `{"queryId": ...}`).
//! - `DoGet` of that ticket (`query:read`, the query's own caller only) waits
//!   for the query's end, then streams its Arrow result; a FAILED query is
//!   `Aborted` with its reason, a CANCELLED one `Cancelled`.
//! - `Handshake` with `authorization: Basic` exchanges a client id and secret
//!   for a token of the org's realm and hands it back as
//!   `authorization: Bearer` (ADBC's username and password); every other
//!   call carries a bearer token (`caller.rs`).
//! - Catalog metadata lists what the caller may read (`metadata.rs`).
//!
//! Not here yet: prepared statements, cancellation through Flight, results
//! streamed as the query runs (today the result is written first, as for
//! REST), transactions (none: each statement is its own job).

mod caller;
mod handshake;
mod metadata;
mod results;
mod status;

use std::{pin::Pin, sync::Arc, time::Duration};

use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
    encode::FlightDataEncoderBuilder,
    flight_service_server::FlightServiceServer,
    sql::{
        Any, CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
        CommandGetTables, CommandStatementQuery, ProstMessageExt, SqlInfo, TicketStatementQuery,
        server::FlightSqlService,
    },
};
use datafusion::arrow::{array::RecordBatch, datatypes::Schema};
use futures::{Stream, TryStreamExt as _};
use prost::Message as _;
use tonic::{Request, Response, Status, Streaming};

pub use caller::{ORG_HEADER, ZONE_HEADER};

use crate::{
    auth::TokenValidator,
    config::Config,
    engine::layout::without_view_types,
    lake::ResultFormat,
    query::QueryService,
    store::{Store, queries::QueryState},
};

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
}

/// The gRPC service as a router that `listener::serve` serves (HTTP/2).
pub fn router(state: FlightState) -> axum::Router {
    tonic::service::Routes::new(FlightServiceServer::new(LakeFlightSql { state }))
        .into_axum_router()
}

/// How long one look for a query's end lasts before the next (the call
/// itself waits until the query ends, or its client goes away).
const END_WAIT: Duration = Duration::from_secs(30);

struct LakeFlightSql {
    state: FlightState,
}

/// A Flight info whose one endpoint's ticket is `command` itself (metadata
/// calls: the answer is made at `DoGet`).
fn info_for_command(
    command: &impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// One batch as a `DoGet` answer.
fn one_batch(batch: RecordBatch) -> Response<DoGetStream> {
    let batches = futures::stream::iter([Ok(batch)]);
    let data = FlightDataEncoderBuilder::new()
        .build(batches)
        .map_err(Status::from);
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
        handshake::handshake(&self.state, request.metadata()).await
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:write").await?;
        if query.transaction_id.is_some() {
            return Err(Status::unimplemented(
                "lakehost has no transactions: each statement is its own query",
            ));
        }
        let submitted = self
            .state
            .queries
            .submit(&caller, &query.query, None, None, None)
            .await
            .map_err(status::status_of)?;
        let handle = TicketStatementQuery {
            statement_handle: submitted.id.clone().into(),
        };
        let ticket = Ticket::new(handle.as_any().encode_to_vec());
        let schema = without_view_types(&submitted.schema);
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner())
            .with_app_metadata(serde_json::json!({ "queryId": submitted.id }).to_string());
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let id = std::str::from_utf8(&ticket.statement_handle)
            .map_err(|_| Status::invalid_argument("the ticket is not a lakehost query id"))?;
        let queries = &self.state.queries;
        let job = loop {
            if let Some(job) = queries
                .wait_for_end(&caller, id, END_WAIT)
                .await
                .map_err(status::status_of)?
            {
                break job;
            }
        };
        match job.state {
            QueryState::Succeeded => {}
            QueryState::Cancelled => {
                return Err(Status::cancelled(format!("query {id} was cancelled")));
            }
            _ => {
                let reason = job.state_change_reason.unwrap_or_default();
                return Err(Status::aborted(reason));
            }
        }
        let file = queries
            .result_file(&caller, id, ResultFormat::Arrow)
            .await
            .map_err(status::status_of)?;
        let bytes = file.bytes(None).await.map_err(status::status_of)?;
        Ok(Response::new(results::flight_data_of(bytes).await?))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let schema = query.into_builder().schema();
        info_for_command(&query, &schema, request.into_inner())
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
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let schema = query.clone().into_builder().schema();
        info_for_command(&query, &schema, request.into_inner())
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
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let schema = query.clone().into_builder().schema();
        info_for_command(&query, &schema, request.into_inner())
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
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let batch = metadata::table_types()?;
        info_for_command(&query, &batch.schema(), request.into_inner())
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
        caller::caller_of(&self.state, request.metadata(), "query:read").await?;
        let schema = query.clone().into_builder(&metadata::SQL_INFO).schema();
        info_for_command(&query, &schema, request.into_inner())
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
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(one_batch(batch))
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "lakehost does not serve {} tickets",
            message.type_url
        )))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
