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
        query::{ExtendedQueryHandler, SimpleQueryHandler, send_describe_response},
        results::{
            DescribePortalResponse, DescribeStatementResponse, FieldInfo, QueryResponse, Response,
        },
        stmt::{QueryParser, StoredStatement},
        store::PortalStore,
    },
    error::{PgWireError, PgWireResult},
    messages::{
        PgWireBackendMessage,
        extendedquery::{Describe, TARGET_TYPE_BYTE_PORTAL},
    },
};
use tracing::Instrument as _;

use super::{
    PgState, catalog, copy, cursors, params, reads,
    sqlstate::{self, UNAUTHORIZED, error_of, fatal},
    startup::{Session, validated},
};
use crate::{
    auth::LakeCaller,
    observability::metrics::{self, token_rejected},
    query::{
        ipc_batches::IpcBatches,
        service::{StreamStop, SubmitPreferences, WireEnd},
    },
};

use super::session::{LastQuery, session_command};

/// The handler of both query protocols.
pub struct LakeStatements {
    pub(super) state: PgState,
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
    pub(super) async fn caller<C: ClientInfo>(
        &self,
        client: &C,
        scope: &str,
    ) -> PgWireResult<LakeCaller> {
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
        max_rows: usize,
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
            .statement(client, sql, format, max_rows)
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

    /// One statement: a session command's answer, a catalog query's, a
    /// cursor's or COPY's (`reads.rs`), or the rows of its job; with its
    /// kind.
    async fn statement<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
        max_rows: usize,
    ) -> (&'static str, PgWireResult<Response>) {
        if let Some(answer) = session_command(client, sql) {
            super::session::ran(client, &answer);
            return ("session", answer);
        }
        if let Some(command) = cursors::command_of(sql) {
            let answer = async { self.cursor(client, command?, format).await };
            return ("query", answer.await);
        }
        if copy::is_copy(sql) {
            return ("query", self.copy(client, sql).await);
        }
        if catalog::is_catalog_query(sql) {
            let answer = async {
                let caller = self.caller(client, "query:read").await?;
                let statement = catalog_statement(client, caller, sql)?;
                catalog::answer(&self.state, statement, format).await
            };
            return ("catalog", answer.await);
        }
        ("query", self.job(client, sql, format, max_rows).await)
    }

    /// A statement run as a query job: a read's rows streamed to the client
    /// as the query makes them (none kept), any other statement's read from
    /// its typed result once it ended. A read an Execute asked `max_rows`
    /// of at a time and that the client leaves at such a pause is its stop
    /// on purpose (`reads::paused_rows`).
    async fn job<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
        format: &Format,
        max_rows: usize,
    ) -> PgWireResult<Response> {
        self.room_beside_cursors(client)?;
        let caller = self.caller(client, "query:write").await?;
        let queries = &self.state.queries;
        let running = reads::running_of(client);
        if let Some(streamed) = self.start_read(client, &caller, sql).await? {
            // Running until its rows are sent: the guard goes with them.
            let running = running.map(|running| running.start(&caller, &streamed.id));
            let reading = streamed.reading;
            let batches = streamed.batches.map(move |batch| {
                let _running = &running;
                batch.map_err(sqlstate::stopped)
            });
            let response = rows_response(&streamed.schema, batches, format)?;
            return Ok(reads::paused_rows(response, max_rows, reading));
        }
        let submitted = queries
            .submit(&caller, sql, None, SubmitPreferences::default(), None)
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
            WireEnd::Cancelled => return Err(sqlstate::stopped(StreamStop::Cancelled)),
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

/// The Postgres columns of `schema`, in `format`.
pub(super) fn fields_of(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
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
            match self.run(client, &sql, &Format::UnifiedText, 0).await {
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
            None if cursors::command_of(sql).is_some() || copy::is_copy(sql) => {
                return reads::describe(client, sql, format);
            }
            None if params::count(sql)? > 0 && catalog::is_catalog_query(sql) => {
                return Ok(Vec::new());
            }
            // Planned with NULL parameters (pgjdbc reads results by it from
            // its 5th run); one that cannot be is described when it runs.
            None if params::count(sql)? > 0 => {
                let caller = self.caller(client, "query:write").await?;
                let queries = &self.state.queries;
                return match queries.describe(&caller, &params::with_nulls(sql)?).await {
                    Ok(schema) => fields_of(&schema, format),
                    Err(_) => Ok(Vec::new()),
                };
            }
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
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = params::inline(portal)?;
        self.run(client, &sql, &portal.result_column_format, max_rows)
            .await
    }

    /// A portal's description, or an open cursor's (psycopg describes its
    /// named cursor's portal after DECLARE, as Postgres keeps a cursor as a
    /// portal of its name).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_PORTAL
            && let Some(name) = &message.name
            && client.portal_store().get_portal(name).is_none()
            && let Some(fields) = reads::cursor_fields(client, name)
        {
            let described = DescribePortalResponse::new(fields?);
            return send_describe_response(client, &described).await;
        }
        self._on_describe(client, message).await
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
