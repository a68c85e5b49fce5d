//! Statements over the Postgres protocol, simple and extended.
//!
//! Session commands (BEGIN, COMMIT, ROLLBACK, SET, SHOW, ...) are answered
//! by `session.rs` and never become jobs. Every other statement is a query job of the session's caller (its token
//! validated again first, renewed from the secret when it expired): a read
//! streams its rows to the client as the query makes them and keeps none
//! (the job says `"via": "pg-wire"`, as Flight SQL's reads do), anything
//! else is submitted, waited for, and its rows sent from the job's typed
//! result; both encoded by arrow-pg in the text or binary format the client
//! asked for, and named for `SHOW lakehost.last_query_id`.
//!
//! Extended protocol: a statement's parameters are inlined as SQL literals
//! (`params.rs`) before it is submitted, so the stored job holds what ran.

use std::{fmt::Debug, sync::Arc, time::Instant};

use async_trait::async_trait;
use datafusion::arrow::{datatypes::Schema, error::ArrowError, record_batch::RecordBatch};
use futures::{Sink, Stream, StreamExt as _, stream};
use pgwire::api::Type;
use pgwire::{
    api::{
        ClientInfo, ClientPortalStore,
        portal::{Format, Portal},
        query::{ExtendedQueryHandler, SimpleQueryHandler},
        results::{
            DescribePortalResponse, DescribeStatementResponse, FieldInfo, QueryResponse, Response,
        },
        stmt::{QueryParser, StoredStatement},
        store::PortalStore,
    },
    error::{PgWireError, PgWireResult},
    messages::PgWireBackendMessage,
};
use tracing::Instrument as _;

use super::{
    PgState,
    cancel::Running,
    catalog, params,
    sqlstate::{self, UNAUTHORIZED, error, error_of, fatal},
    startup::{Session, validated},
};
use crate::{
    auth::LakeCaller,
    observability::metrics::{self, token_rejected},
    query::{
        ipc_batches::IpcBatches,
        service::{StreamStop, WireEnd},
    },
    store::queries::Delivery,
};

use super::session::{LastQuery, session_command};

/// The handler of both query protocols.
pub struct LakeStatements {
    state: PgState,
    parser: Arc<SqlParser>,
}

impl LakeStatements {
    pub fn new(state: PgState) -> Self {
        Self {
            state,
            parser: Arc::new(SqlParser),
        }
    }

    /// The session's caller for a statement: its token authenticated again
    /// (renewed from the secret once it expired), with the scope to run
    /// queries.
    async fn caller<C: ClientInfo>(&self, client: &C, scope: &str) -> PgWireResult<LakeCaller> {
        let Some(session) = client.session_extensions().get::<Session>() else {
            return Err(fatal("28000", UNAUTHORIZED));
        };
        match validated(&self.state, &session, Some(scope)).await {
            Ok(caller) => Ok(caller),
            Err(Some(e)) => Err(e),
            Err(None) => {
                let renewed = session.renewed(&self.state).await.map_err(|_| {
                    token_rejected("renewal_refused");
                    fatal("28000", UNAUTHORIZED)
                })?;
                let caller = validated(&self.state, &renewed, Some(scope))
                    .await
                    .map_err(|e| e.unwrap_or_else(|| fatal("28000", UNAUTHORIZED)))?;
                client.session_extensions().insert(renewed);
                Ok(caller)
            }
        }
    }

    /// One statement, with a request id (its span), a log line and a count
    /// (`lakehost_pg_statements_total`), as REST requests have.
    async fn run<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
    ) -> PgWireResult<Response> {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let span = tracing::info_span!("pg_statement", %request_id);
        let last_query = || {
            client
                .session_extensions()
                .get::<LastQuery>()
                .map(|last| last.0.clone())
        };
        let before = last_query();
        let started = Instant::now();
        let (kind, answer) = self
            .statement(client, sql, format)
            .instrument(span.clone())
            .await;
        let sqlstate = match &answer {
            Ok(_) => "00000",
            Err(e) => sqlstate::label_of(e),
        };
        metrics::pg_statement(kind, sqlstate);
        // The job this statement made, if it made one.
        let query_id = last_query().filter(|id| Some(id) != before.as_ref());
        span.in_scope(|| {
            tracing::info!(
                kind,
                sqlstate,
                query_id = query_id.as_deref().unwrap_or(""),
                latency_ms = started.elapsed().as_secs_f64() * 1000.0,
                "postgres statement"
            );
        });
        answer
    }

    /// One statement: a session command's answer, a catalog query's, or the
    /// rows of its job; with its kind.
    async fn statement<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
    ) -> (&'static str, PgWireResult<Response>) {
        if let Some(answer) = session_command(client, sql) {
            return ("session", answer);
        }
        if catalog::is_catalog_query(sql) {
            let answer = async {
                let caller = self.caller(client, "query:read").await?;
                let statement = catalog_statement(client, caller, sql)?;
                catalog::answer(&self.state, statement, format).await
            };
            return ("catalog", answer.await);
        }
        ("query", self.job(client, sql, format).await)
    }

    /// A statement run as a query job: a read's rows streamed to the client
    /// as the query makes them (none kept), any other statement's read from
    /// its typed result once it ended.
    async fn job<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
    ) -> PgWireResult<Response> {
        let caller = self.caller(client, "query:write").await?;
        let queries = &self.state.queries;
        // Cancellable by the session's backend key while it runs.
        let running = client
            .session_extensions()
            .get::<Arc<Running>>()
            .map(|running| Arc::clone(&*running));
        let streamed = queries
            .stream_if_read(&caller, sql, Delivery::PgWire)
            .await
            .map_err(error_of)?;
        if let Some(streamed) = streamed {
            client
                .session_extensions()
                .insert(LastQuery(streamed.id.clone()));
            // Running until its rows are sent: the guard goes with them.
            let running = running.map(|running| running.start(&caller, &streamed.id));
            let batches = streamed.batches.map(move |batch| {
                let _running = &running;
                batch.map_err(|stop| match stop {
                    StreamStop::Cancelled => error(CANCELED, CANCELED_BY_USER),
                    StreamStop::Failed(reason) => sqlstate::failed(reason),
                })
            });
            return rows_response(&streamed.schema, batches, format);
        }
        let submitted = queries
            .submit(&caller, sql, None, None, None)
            .await
            .map_err(error_of)?;
        client
            .session_extensions()
            .insert(LastQuery(submitted.id.clone()));
        let _running = running.map(|running| running.start(&caller, &submitted.id));
        let bytes = match queries
            .typed_result_at_end(&caller, &submitted.id)
            .await
            .map_err(error_of)?
        {
            WireEnd::Rows(bytes) => bytes,
            WireEnd::Cancelled => return Err(error(CANCELED, CANCELED_BY_USER)),
            // A refusal found while it ran is the spec's, as at submission.
            WireEnd::Failed(reason) => return Err(sqlstate::failed(reason)),
        };
        let mut batches = IpcBatches::new(bytes);
        let unreadable =
            |e: ArrowError| error_of(crate::query::QueryError::internal("reading the result", e));
        let schema = batches.schema().await.map_err(unreadable)?;
        let batches = batches
            .into_stream()
            .map(move |batch| batch.map_err(unreadable));
        rows_response(&schema, batches, format)
    }
}

/// A statement's end when its client cancelled it (Postgres's words).
const CANCELED: &str = "57014";
const CANCELED_BY_USER: &str = "canceling statement due to user request";

/// The Postgres columns of `schema`, in `format`.
fn fields_of(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    arrow_pg::datatypes::arrow_schema_to_pg_fields(schema, format, None)
}

/// `batches` (of `schema`) as the rows of a query response, encoded by
/// arrow-pg in `format`; an error ends the rows.
pub fn rows_response(
    schema: &Schema,
    batches: impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static,
    format: &Format,
) -> PgWireResult<Response> {
    let fields = Arc::new(fields_of(schema, format)?);
    let rows = {
        let fields = fields.clone();
        batches.flat_map(move |batch| {
            let rows: Box<dyn Iterator<Item = PgWireResult<_>> + Send> = match batch {
                Ok(batch) => Box::new(arrow_pg::datatypes::encode_recordbatch(
                    fields.clone(),
                    batch,
                )),
                Err(e) => Box::new(std::iter::once(Err(e))),
            };
            stream::iter(rows)
        })
    };
    Ok(Response::Query(QueryResponse::new(fields, rows)))
}

/// `sql` as `caller`'s catalog statement on the session's database
/// (`current_database()`: `demo`, or `lab.demo` for zone `lab`), with the
/// connection's kept catalog session (made on first use).
fn catalog_statement<C: ClientInfo>(
    client: &C,
    caller: LakeCaller,
    sql: &str,
) -> PgWireResult<catalog::CatalogStatement> {
    let extensions = client.session_extensions();
    let Some(session) = extensions.get::<Session>() else {
        return Err(fatal("28000", UNAUTHORIZED));
    };
    let kept = match extensions.get::<catalog::KeptCatalog>() {
        Some(kept) => kept,
        None => {
            extensions.insert(catalog::KeptCatalog::default());
            extensions
                .get::<catalog::KeptCatalog>()
                .expect("just inserted")
        }
    };
    Ok(catalog::CatalogStatement {
        database: session.database(),
        kept,
        caller,
        sql: sql.to_string(),
    })
}

/// The statements of a simple query's text, each as its own text. Text that
/// does not parse, or is past the caps any parse needs first, is sent whole,
/// for the query service's own error.
fn statements_of(sql: &str) -> Vec<String> {
    // The engine's parse, caps and budget included: the Postgres dialect's
    // parser takes time that doubles with each level of nested calls, on the
    // connection's task, and any parser can backtrack exponentially.
    match crate::engine::expression_limits::parse_statements(sql) {
        Ok(statements) if statements.len() > 1 => {
            statements.iter().map(ToString::to_string).collect()
        }
        _ => vec![sql.to_string()],
    }
}

#[async_trait]
impl SimpleQueryHandler for LakeStatements {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut responses = Vec::new();
        for sql in statements_of(query) {
            match self.run(client, &sql, &Format::UnifiedText).await {
                Ok(response) => responses.push(response),
                // A failed statement ends the query string, as in Postgres.
                Err(PgWireError::UserError(info)) if info.severity != "FATAL" => {
                    responses.push(Response::Error(info));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(responses)
    }
}

/// Extended-protocol statements are their SQL text: checked when they run.
#[derive(Debug)]
pub struct SqlParser;

#[async_trait]
impl QueryParser for SqlParser {
    type Statement = String;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<String>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        Ok(Some(sql.to_string()))
    }

    fn get_parameter_types(&self, statement: &String) -> PgWireResult<Vec<Type>> {
        Ok(vec![Type::UNKNOWN; params::count(statement)?])
    }

    fn get_result_schema(
        &self,
        _statement: &String,
        _column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        // Described by the handler, which plans the statement.
        Ok(Vec::new())
    }
}

impl LakeStatements {
    /// The columns `sql` answers with: planned for the session's caller (a
    /// session command or a statement that writes: none described).
    async fn describe<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match session_command(client, sql) {
            Some(Ok(Response::Query(answer))) => return Ok(answer.row_schema().to_vec()),
            Some(_) => return Ok(Vec::new()),
            None if params::count(sql)? > 0 => return Ok(Vec::new()),
            None if catalog::is_catalog_query(sql) => {
                let caller = self.caller(client, "query:read").await?;
                let statement = catalog_statement(client, caller, sql)?;
                return catalog::describe(&self.state, statement, format).await;
            }
            None => {}
        }
        let caller = self.caller(client, "query:write").await?;
        let schema = self
            .state
            .queries
            .describe(&caller, sql)
            .await
            .map_err(error_of)?;
        fields_of(&schema, format)
    }
}

#[async_trait]
impl ExtendedQueryHandler for LakeStatements {
    type Statement = String;
    type QueryParser = SqlParser;

    fn query_parser(&self) -> Arc<SqlParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<String>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = params::inline(portal)?;
        self.run(client, &sql, &portal.result_column_format).await
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        statement: &StoredStatement<String>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = &statement.statement;
        let parameters = (0..params::count(sql)?)
            .map(|i| {
                statement
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        let fields = self.describe(client, sql, &Format::UnifiedText).await?;
        Ok(DescribeStatementResponse::new(parameters, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<String>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = params::inline(portal)?;
        let fields = self
            .describe(client, &sql, &portal.result_column_format)
            .await?;
        Ok(DescribePortalResponse::new(fields))
    }
}
