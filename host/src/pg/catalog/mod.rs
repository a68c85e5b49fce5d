//! Catalog queries: what psql (`\dt`, `\dn`, `\d`), psycopg, SQLAlchemy and
//! other tools ask of `pg_catalog` and `information_schema`, planned and run
//! by DataFusion in a session of their own, over datafusion-pg-catalog's
//! `pg_catalog` tables, Postgres functions and SQL rewrites.
//!
//! That session holds no lake data. Its schemas are the databases the caller
//! may read (`QueryService::visible_catalog`), each table a placeholder with
//! the table's columns and no rows, so listings show what the caller may read
//! and nothing else. A catalog statement that reads a lake table (a join of
//! `pg_class` with a lake table, say) is refused with 0A000 rather than
//! answered from placeholders. Only queries run here, with a budget that
//! fits the small tables they read: at most [`CATALOG_TIME_LIMIT`] from their
//! start, [`CATALOG_MEMORY_LIMIT`] and no spilling, [`MAX_ROWS`] rows, the
//! expression caps. They are admitted as jobs are, under the per-org and
//! per-caller caps of fair sharing (`admission.rs`), so one caller's
//! statements never hold another org's.
//!
//! A statement is a catalog query when it names a relation in `pg_catalog`
//! or `information_schema` (an unqualified `pg_class` is `pg_catalog`'s, as
//! in Postgres), or names no relation and calls a function only this
//! session has (`current_schema()`, `to_regtype(...)`, ...).
//!
//! - `rewrite.rs`: what DataFusion cannot plan, rewritten first (with
//!   `array_subqueries.rs` and `output_names.rs`);
//! - `booleans.rs`: `boolean = 'f'`, as Postgres reads it;
//! - `arrays.rs`: the Postgres arrays the static tables hold as text,
//!   subscripted and expanded (`_pg_expandarray`) as arrays;
//! - `overlay.rs`: the `pg_catalog` tables lakehost answers itself
//!   (`pg_database`, `pg_tables`, `pg_views`, ...), and `pg_settings.rs`
//!   its `pg_settings` from lakehost's settings;
//! - `descriptions.rs`: the functions psql's `\d+`, `\df` and dbt call that
//!   the others lack (`pg_size_pretty`, `obj_description`, ...);
//! - `privileges.rs`: `has_table_privilege` and the like, from the caller's
//!   grants;
//! - `session.rs`: a connection's catalog session, and the placeholders;
//! - `admission.rs`: which statements run now, under the caps.

mod admission;
mod array_subqueries;
mod arrays;
mod booleans;
mod descriptions;
mod output_names;
mod overlay;
mod pg_settings;
mod privileges;
mod rewrite;
#[cfg(test)]
mod routing_tests;
mod session;

pub use admission::CatalogAdmission;
pub use session::KeptCatalog;
use session::LakePlaceholder;
use std::{
    collections::HashSet,
    sync::{Arc, LazyLock},
    time::Duration,
};

use datafusion::{
    arrow::record_batch::RecordBatch,
    common::tree_node::TreeNodeRecursion,
    datasource::source_as_provider,
    error::DataFusionError,
    execution::context::SQLOptions,
    logical_expr::LogicalPlan,
    prelude::SessionContext,
    sql::{
        parser::Statement as EngineStatement,
        sqlparser::ast::{self, ObjectName, Statement, visit_expressions, visit_relations},
    },
};
use datafusion_pg_catalog::{
    pg_catalog::{PG_CATALOG_TABLES, context::EmptyContextProvider},
    setup_pg_catalog,
    sql::PostgresCompatibilityParser,
};
use futures::{StreamExt as _, stream};
use pgwire::{
    api::{portal::Format, results::FieldInfo, results::Response},
    error::PgWireResult,
};

use super::{
    PgState, code_tokens,
    sqlstate::{error, error_of},
    statements::rows_response,
};
use crate::{auth::LakeCaller, engine::expression_limits, query::QueryError};

/// The most rows a catalog query answers with.
pub const MAX_ROWS: usize = 100_000;

/// Why a catalog statement other than a query is refused.
const ONLY_QUERIES: &str = "only queries are answered on pg_catalog and information_schema";

/// Why a catalog statement that reads a lake table is refused.
const READS_LAKE: &str = "a statement on pg_catalog or information_schema cannot read lake \
                          tables: query them on their own";

/// The schemas whose relations make a statement a catalog query.
const CATALOG_SCHEMAS: [&str; 2] = ["pg_catalog", "information_schema"];

/// The catalog session's table functions (`FROM pg_get_keywords()`).
const CATALOG_TABLE_FUNCTIONS: [&str; 1] = ["pg_get_keywords"];

/// datafusion-pg-catalog's parser: Postgres SQL, rewritten into what
/// DataFusion plans (`OPERATOR(pg_catalog.~)`, `'x'::regclass`, `= ANY(...)`).
static PARSER: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// The functions the catalog session has and the engine's sessions lack.
static CATALOG_FUNCTIONS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let engine = SessionContext::new().state();
    let catalog = SessionContext::new();
    if setup_pg_catalog(&catalog, "datafusion", EmptyContextProvider).is_err() {
        return HashSet::new();
    }
    let mut names: HashSet<String> = catalog
        .state()
        .scalar_functions()
        .keys()
        .filter(|name| !engine.scalar_functions().contains_key(*name))
        .cloned()
        .collect();
    names.insert("to_regtype".to_string());
    names
});

/// The longest catalog statement (tools send a few KiB at most).
const MAX_CATALOG_TEXT: usize = 64 * 1024;

/// The deepest parentheses of a catalog statement (tools nest 6 deep).
const MAX_CATALOG_NESTING: usize = 10;

/// Refuses text the Postgres dialect's parser would take too long on: its
/// parse of nested calls and parentheses doubles with each level (18
/// levels: about a second), so a catalog statement is short and shallow.
/// Read with the tokenizer, which does not recurse.
fn within_catalog_caps(sql: &str) -> Result<(), QueryError> {
    use datafusion::sql::sqlparser::tokenizer::Token;
    if sql.len() > MAX_CATALOG_TEXT {
        return Err(QueryError::Invalid(format!(
            "a catalog statement is at most {MAX_CATALOG_TEXT} bytes long"
        )));
    }
    let tokens = code_tokens(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
    let mut depth: usize = 0;
    for token in tokens {
        match token {
            Token::LParen | Token::LBracket => depth += 1,
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_CATALOG_NESTING {
            return Err(QueryError::Invalid(format!(
                "a catalog statement nests parentheses at most {MAX_CATALOG_NESTING} deep"
            )));
        }
    }
    Ok(())
}

/// `sql` parsed (and rewritten) for the catalog session, within the
/// expression caps.
fn parse(sql: &str) -> Result<Vec<Statement>, QueryError> {
    expression_limits::check_text(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
    within_catalog_caps(sql)?;
    let statements = PARSER
        .parse(sql)
        .map_err(|e| QueryError::Invalid(e.to_string()))?;
    for statement in &statements {
        expression_limits::check(statement).map_err(|e| QueryError::Invalid(e.to_string()))?;
    }
    Ok(statements)
}

/// Whether `name` is a catalog schema's relation (`pg_catalog.pg_class`,
/// `db.information_schema.tables`) or a `pg_catalog` table unqualified.
fn names_catalog(name: &ObjectName) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|part| {
            part.as_ident()
                .map(|ident| ident.value.to_ascii_lowercase())
        })
        .collect();
    match parts.as_slice() {
        [table] => {
            PG_CATALOG_TABLES.contains(&table.as_str())
                || CATALOG_TABLE_FUNCTIONS.contains(&table.as_str())
        }
        [qualifiers @ .., _] => qualifiers
            .iter()
            .any(|q| CATALOG_SCHEMAS.contains(&q.as_str())),
        [] => false,
    }
}

/// Whether `sql` names a catalog schema in code (never in a string, a
/// quoted name or a comment): `pg_catalog.` or `information_schema.`. Such
/// a statement is answered here even when it does not parse or is not a
/// query, so its error is the catalog's.
fn names_catalog_schema(sql: &str) -> bool {
    use datafusion::sql::sqlparser::tokenizer::Token;
    let Ok(code) = code_tokens(sql) else {
        return false;
    };
    code.windows(2).any(|pair| {
        matches!(&pair[0], Token::Word(word)
            if word.quote_style.is_none()
                && CATALOG_SCHEMAS.iter().any(|schema| word.value.eq_ignore_ascii_case(schema)))
            && matches!(pair[1], Token::Period)
    })
}

/// Whether `sql` is answered here rather than run as a query job.
pub fn is_catalog_query(sql: &str) -> bool {
    if names_catalog_schema(sql) {
        return true;
    }
    let Ok(statements) = parse(sql) else {
        return false;
    };
    let [statement] = statements.as_slice() else {
        return false;
    };
    let (mut catalog_relation, mut other_relation) = (false, false);
    let _ = visit_relations(statement, |name| {
        if names_catalog(name) {
            catalog_relation = true;
        } else {
            other_relation = true;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if catalog_relation {
        return true;
    }
    if other_relation {
        return false;
    }
    let mut catalog_function = false;
    let _ = visit_expressions(statement, |expr| {
        if let ast::Expr::Function(function) = expr
            && let Some(name) = function.name.0.last().and_then(|part| part.as_ident())
            && CATALOG_FUNCTIONS.contains(&name.value.to_ascii_lowercase())
        {
            catalog_function = true;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    catalog_function
}

/// A catalog statement runs at most this long once admitted (or
/// `query.time_limit_s` when shorter), and waits at most as long to be
/// admitted. It reads tables of a few thousand rows at most: tools' listings
/// take milliseconds, and one that takes seconds is an attack on the
/// catalog's tables, not a question about them. Counted from the start, so
/// a wait for room never eats the budget, nor a flood's wait another's.
const CATALOG_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The memory a catalog statement may use (or `query.memory_limit_bytes`
/// when smaller), with nothing spilled to disk: its sorts and joins are of
/// the catalog's small tables.
const CATALOG_MEMORY_LIMIT: usize = 128 << 20;

/// Postgres's own words for a statement past its time limit (57014).
const STATEMENT_TIMEOUT: &str = "canceling statement due to statement timeout";

/// What a catalog statement is: the database the connection names, its
/// kept session, the caller and the SQL.
pub struct CatalogStatement {
    pub database: String,
    pub kept: Arc<KeptCatalog>,
    pub caller: LakeCaller,
    pub sql: String,
}

/// `sql` planned in the caller's catalog session.
async fn plan(
    state: &PgState,
    statement: &CatalogStatement,
) -> PgWireResult<(SessionContext, LogicalPlan)> {
    let statements = parse(&statement.sql).map_err(error_of)?;
    let [mut parsed] = <[Statement; 1]>::try_from(statements).map_err(|_| {
        error(
            "0A000",
            "a catalog statement must be sent on its own, one at a time",
        )
    })?;
    if !matches!(parsed, Statement::Query(_)) {
        return Err(error("0A000", ONLY_QUERIES));
    }
    rewrite::rewrite(&mut parsed);
    // The rewrites add subqueries (`to_regtype`): the caps hold for what is
    // planned, not only for what was sent.
    expression_limits::check(&parsed).map_err(|e| error_of(QueryError::Invalid(e.to_string())))?;
    let visible = state
        .queries
        .visible_catalog(&statement.caller)
        .await
        .map_err(error_of)?;
    let memory_limit = usize::try_from(state.config.query.memory_limit_bytes)
        .unwrap_or(usize::MAX)
        .min(CATALOG_MEMORY_LIMIT);
    let context = statement
        .kept
        .session(
            &statement.caller,
            &visible,
            &statement.database,
            memory_limit,
        )
        .await
        .map_err(error_of)?;
    let plan = context
        .state()
        .statement_to_plan(EngineStatement::Statement(Box::new(parsed)))
        .await
        .map_err(|e| error_of(QueryError::Invalid(e.to_string())))?;
    // A query only: `SELECT ... INTO` plans as a table's creation.
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(&plan)
        .map_err(|_| error("0A000", ONLY_QUERIES))?;
    let mut reads_lake = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && source_as_provider(&scan.source).is_ok_and(|provider| {
                provider
                    .as_ref()
                    .downcast_ref::<LakePlaceholder>()
                    .is_some()
            })
        {
            reads_lake = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| error_of(QueryError::internal("", e)))?;
    if reads_lake {
        return Err(error("0A000", READS_LAKE));
    }
    Ok((context, plan))
}

/// Aborts a task when dropped: a statement whose client left, or whose
/// time ran out, stops.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `work`, a statement of `caller`, run on the engine runtime (never on the
/// one serving connections) once admitted under the caps
/// (`admission.rs`), within the catalog's time limit from then on.
async fn on_engine<T: Send + 'static>(
    state: &PgState,
    caller: &LakeCaller,
    work: impl Future<Output = PgWireResult<T>> + Send + 'static,
) -> PgWireResult<T> {
    let limit = CATALOG_TIME_LIMIT.min(Duration::from_secs(state.config.query.time_limit_s));
    let admitted = state
        .catalog_admission
        .admit(&caller.org, &caller.sub, limit)
        .await
        .map_err(|refused| error("53300", refused.to_string()))?;
    // Counted until the work stops, not only until its client stops
    // waiting for it.
    let task = state.queries.spawn_on_engine(async move {
        let _admitted = admitted;
        work.await
    });
    let _abort = AbortOnDrop(task.abort_handle());
    match tokio::time::timeout(limit, task).await {
        Ok(answer) => answer.map_err(|e| error_of(QueryError::internal("catalog statement", e)))?,
        Err(_) => Err(error("57014", STATEMENT_TIMEOUT)),
    }
}

/// The columns catalog query `sql` answers with, planned, not run.
pub async fn describe(
    state: &PgState,
    statement: CatalogStatement,
    format: &Format,
) -> PgWireResult<Vec<FieldInfo>> {
    let caller = statement.caller.clone();
    let planning = {
        let state = state.clone();
        async move {
            let (_, plan) = plan(&state, &statement).await?;
            Ok(plan.schema().as_arrow().clone())
        }
    };
    let schema = on_engine(state, &caller, planning).await?;
    arrow_pg::datatypes::arrow_schema_to_pg_fields(&schema, format, None)
}

/// The rows of a catalog statement, run in the caller's catalog session.
pub async fn answer(
    state: &PgState,
    statement: CatalogStatement,
    format: &Format,
) -> PgWireResult<Response> {
    let caller = statement.caller.clone();
    let running = {
        let state = state.clone();
        async move {
            let (context, plan) = plan(&state, &statement).await?;
            let schema = plan.schema().as_arrow().clone();
            let batches = rows_of(&context, plan)
                .await
                .map_err(|e| match e.find_root() {
                    DataFusionError::ResourcesExhausted(why) => error("53200", why.clone()),
                    _ => error_of(QueryError::Failed(e.to_string())),
                })?;
            let batches = batches.ok_or_else(|| {
                error(
                    "54000",
                    format!("a catalog query may answer with at most {MAX_ROWS} rows"),
                )
            })?;
            Ok((schema, batches))
        }
    };
    let (schema, batches) = on_engine(state, &caller, running).await?;
    rows_response(&schema, stream::iter(batches.into_iter().map(Ok)), format)
}

/// The rows `plan` answers with; `None` past [`MAX_ROWS`].
async fn rows_of(
    context: &SessionContext,
    plan: LogicalPlan,
) -> Result<Option<Vec<RecordBatch>>, DataFusionError> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut rows = 0;
    let mut stream = context
        .execute_logical_plan(plan)
        .await?
        .execute_stream()
        .await?;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        rows += batch.num_rows();
        if rows > MAX_ROWS {
            return Ok(None);
        }
        batches.push(batch);
    }
    Ok(Some(batches))
}
