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
//! answered from placeholders. Only queries run here, under the query limits
//! (`query.memory_limit_bytes`, `query.time_limit_s`, the expression caps) and
//! with at most [`MAX_ROWS`] rows.
//!
//! A statement is a catalog query when it names a relation in `pg_catalog`
//! or `information_schema` (an unqualified `pg_class` is `pg_catalog`'s, as
//! in Postgres), or names no relation and calls a function only this
//! session has (`current_schema()`, `to_regtype(...)`, ...).

use std::{
    collections::{BTreeMap, HashSet},
    sync::{Arc, LazyLock},
    time::Duration,
};

use async_trait::async_trait;
use datafusion::{
    arrow::{datatypes::SchemaRef, record_batch::RecordBatch},
    catalog::{CatalogProvider, SchemaProvider, Session, TableProvider},
    common::{plan_err, tree_node::TreeNodeRecursion},
    datasource::{TableType, source_as_provider},
    error::DataFusionError,
    execution::{SessionStateBuilder, memory_pool::FairSpillPool, runtime_env::RuntimeEnvBuilder},
    logical_expr::{Expr, LogicalPlan},
    physical_plan::ExecutionPlan,
    prelude::{SessionConfig, SessionContext},
    sql::{
        parser::Statement as EngineStatement,
        sqlparser::ast::{
            self, ObjectName, Statement, visit_expressions, visit_expressions_mut, visit_relations,
        },
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
use crate::{
    auth::LakeCaller,
    engine::{bounded_functions::bound_functions, expression_limits},
    query::{
        QueryError,
        service::{VisibleCatalog, columns_of},
    },
};

/// The most rows a catalog query answers with.
pub const MAX_ROWS: usize = 100_000;

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

/// `sql` parsed (and rewritten) for the catalog session, within the
/// expression caps.
fn parse(sql: &str) -> Result<Vec<Statement>, QueryError> {
    expression_limits::check_text(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
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

/// A lake table in the catalog session: its columns, never its rows.
#[derive(Debug)]
struct LakePlaceholder {
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for LakePlaceholder {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
        plan_err!("{READS_LAKE}")
    }
}

/// A catalog whose schemas list in name order. pg_catalog numbers the
/// relations it lists in that order, so the same caller sees the same oids
/// in every statement (psql's `\d` finds a table by oid in its next query);
/// DataFusion's memory catalog lists in no fixed order.
#[derive(Debug, Default)]
struct SortedCatalog {
    schemas: std::sync::Mutex<BTreeMap<String, Arc<dyn SchemaProvider>>>,
}

impl CatalogProvider for SortedCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.schemas
            .lock()
            .expect("catalog lock")
            .keys()
            .cloned()
            .collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.schemas
            .lock()
            .expect("catalog lock")
            .get(name)
            .cloned()
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>, DataFusionError> {
        Ok(self
            .schemas
            .lock()
            .expect("catalog lock")
            .insert(name.to_string(), schema))
    }
}

/// A lake database in the catalog session: its tables' placeholders, in
/// name order.
#[derive(Debug, Default)]
struct SortedSchema {
    tables: BTreeMap<String, Arc<dyn TableProvider>>,
}

#[async_trait]
impl SchemaProvider for SortedSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        Ok(self.tables.get(name).cloned())
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
}

/// A connection's catalog session, kept while what its caller may read
/// stays the same: pg_catalog numbers relations (their oids) as statements
/// first list them, and keeps the numbers for the session's life, so a
/// table's oid from one statement finds it in the next (psql's `\d` asks
/// `pg_class` for the oid, then `pg_attribute` by it).
#[derive(Default)]
pub struct KeptCatalog(std::sync::Mutex<Option<(u64, SessionContext)>>);

/// What a catalog session is built from, as one number.
fn fingerprint(visible: &VisibleCatalog, database: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    database.hash(&mut hasher);
    for lake_database in &visible.databases {
        (&lake_database.id, &lake_database.name).hash(&mut hasher);
    }
    for table in &visible.tables {
        (&table.database_id, &table.name, &table.schema_json).hash(&mut hasher);
        table.partition_columns.hash(&mut hasher);
    }
    hasher.finish()
}

impl KeptCatalog {
    /// The session for `visible`: the kept one, or a new one kept instead.
    fn session(
        &self,
        visible: &VisibleCatalog,
        database: &str,
        memory_limit: usize,
    ) -> Result<SessionContext, QueryError> {
        let print = fingerprint(visible, database);
        let mut kept = self.0.lock().expect("kept catalog lock");
        if let Some((kept_print, context)) = kept.as_ref()
            && *kept_print == print
        {
            return Ok(context.clone());
        }
        let context = session(visible, database, memory_limit)?;
        *kept = Some((print, context.clone()));
        Ok(context)
    }
}

/// The catalog session of a caller on `database` (the name it connected
/// with): `visible`'s databases as schemas of placeholders, and pg_catalog.
fn session(
    visible: &VisibleCatalog,
    database: &str,
    memory_limit: usize,
) -> Result<SessionContext, QueryError> {
    let internal = |e: DataFusionError| QueryError::Internal(format!("catalog session: {e}"));
    let config = SessionConfig::new()
        .with_default_catalog_and_schema(database, "public")
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true)
        .with_target_partitions(1);
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(memory_limit)))
        .build_arc()
        .map_err(internal)?;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let context = SessionContext::new_with_state(state);
    let catalog = SortedCatalog::default();
    catalog
        .register_schema("public", Arc::new(SortedSchema::default()))
        .map_err(internal)?;
    for lake_database in &visible.databases {
        let mut schema = SortedSchema::default();
        for table in visible
            .tables
            .iter()
            .filter(|t| t.database_id == lake_database.id)
        {
            let placeholder = LakePlaceholder {
                schema: Arc::new(columns_of(table)?),
            };
            schema
                .tables
                .insert(table.name.clone(), Arc::new(placeholder));
        }
        catalog
            .register_schema(&lake_database.name, Arc::new(schema))
            .map_err(internal)?;
    }
    context.register_catalog(database, Arc::new(catalog));
    setup_pg_catalog(&context, database, EmptyContextProvider).map_err(|e| internal(*e))?;
    super::functions::register(&context);
    bound_functions(&context);
    Ok(context)
}

/// An expression parsed from `sql` (built from parts already parsed).
fn expression(sql: &str) -> Option<ast::Expr> {
    use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
        .ok()
}

/// What DataFusion cannot plan, rewritten into what it can:
/// - `to_regtype('name')`: the subquery of `pg_type` Postgres' function
///   answers (the type's oid, or NULL);
/// - `LIKE p ESCAPE 'c'` (SQLAlchemy escapes with `/`): DataFusion only
///   knows `\`, so `c` in the pattern becomes `\` (and a `\` there a
///   literal one);
/// - a scalar subquery's value as `first_value(...)`: DataFusion plans a
///   correlated scalar subquery only when it aggregates (SQLAlchemy's
///   inspector sends them; Postgres would fail on a second row, and the
///   catalog's have at most one);
/// - a correlated scalar subquery inside CASE as NULL: DataFusion cannot
///   decorrelate it there. SQLAlchemy's inspector asks that way for a
///   column's default, identity and collation, which a lake's columns do
///   not have, so NULL is the answer Postgres would give.
fn rewrite(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        match expr {
            ast::Expr::Subquery(query) => first_row(query),
            ast::Expr::Case { .. } => {
                let _ = visit_expressions_mut(expr, |inner| {
                    if let ast::Expr::Subquery(query) = inner
                        && is_correlated(query)
                    {
                        *inner = ast::Expr::Value(ast::Value::Null.with_empty_span());
                    }
                    std::ops::ControlFlow::<()>::Continue(())
                });
            }
            ast::Expr::Function(function)
                if function.name.to_string().eq_ignore_ascii_case("to_regtype") =>
            {
                if let ast::FunctionArguments::List(list) = &function.args
                    && let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(name))] =
                        list.args.as_slice()
                    && let Some(lookup) = expression(&format!(
                        "(SELECT first_value(oid) FROM pg_catalog.pg_type WHERE typname = {name})"
                    ))
                {
                    *expr = lookup;
                }
            }
            ast::Expr::Like {
                pattern,
                escape_char: escape @ Some(_),
                ..
            }
            | ast::Expr::ILike {
                pattern,
                escape_char: escape @ Some(_),
                ..
            } => {
                if let Some(ast::Value::SingleQuotedString(c)) = escape.as_ref().map(|e| &e.value)
                    && c.chars().count() == 1
                    && c != "\\"
                    && let Some(escaped) = expression(&format!(
                        "replace(replace(({pattern}), '\\', '\\\\'), '{}', '\\')",
                        c.replace('\'', "''")
                    ))
                {
                    **pattern = escaped;
                    *escape =
                        Some(ast::Value::SingleQuotedString("\\".to_string()).with_empty_span());
                }
            }
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The names a query's own relations go by: each relation's name, its last
/// part and its alias, lowercase.
#[derive(Default)]
struct OwnRelations(HashSet<String>);

impl ast::Visitor for OwnRelations {
    type Break = ();

    fn pre_visit_table_factor(
        &mut self,
        factor: &ast::TableFactor,
    ) -> std::ops::ControlFlow<Self::Break> {
        if let ast::TableFactor::Table { name, alias, .. } = factor {
            self.0.insert(name.to_string().to_ascii_lowercase());
            if let Some(last) = name.0.last() {
                self.0.insert(last.to_string().to_ascii_lowercase());
            }
            if let Some(alias) = alias {
                self.0.insert(alias.name.value.to_ascii_lowercase());
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// Whether `query` names a column of a relation it does not read itself
/// (`outer.column`).
fn is_correlated(query: &ast::Query) -> bool {
    let mut own = OwnRelations::default();
    let _ = ast::Visit::visit(query, &mut own);
    let mut correlated = false;
    let _ = visit_expressions(query, |expr| {
        if let ast::Expr::CompoundIdentifier(parts) = expr
            && let [qualifier @ .., _] = parts.as_slice()
            && !qualifier.is_empty()
        {
            let qualifier = qualifier
                .iter()
                .map(|part| part.value.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(".");
            if !own.0.contains(&qualifier) {
                correlated = true;
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    correlated
}

/// Aggregate functions: a subquery that projects one is left as it is.
const AGGREGATES: [&str; 9] = [
    "count",
    "min",
    "max",
    "sum",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "first_value",
];

/// `(SELECT e FROM ... WHERE ...)` as `(SELECT first_value(e) FROM ...)`,
/// when it has one column, no grouping, ordering or DISTINCT, and `e` does
/// not aggregate already.
fn first_row(query: &mut ast::Query) {
    if query.order_by.is_some() {
        return;
    }
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let ungrouped = matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if !ungrouped || select.distinct.is_some() || select.having.is_some() {
        return;
    }
    let [item] = select.projection.as_mut_slice() else {
        return;
    };
    let value = match item {
        ast::SelectItem::UnnamedExpr(value)
        | ast::SelectItem::ExprWithAlias { expr: value, .. } => value,
        _ => return,
    };
    if let ast::Expr::Function(function) = value
        && AGGREGATES.contains(&function.name.to_string().to_ascii_lowercase().as_str())
    {
        return;
    }
    if let Some(first) = expression(&format!("first_value({value})")) {
        *value = first;
    }
}

/// `sql` planned in the caller's catalog session.
async fn plan(
    state: &PgState,
    caller: &LakeCaller,
    (database, kept): (&str, &KeptCatalog),
    sql: &str,
) -> PgWireResult<(SessionContext, LogicalPlan)> {
    let statements = parse(sql).map_err(error_of)?;
    let [statement] = <[Statement; 1]>::try_from(statements).map_err(|_| {
        error(
            "0A000",
            "a catalog statement must be sent on its own, one at a time",
        )
    })?;
    let mut statement = statement;
    if !matches!(statement, Statement::Query(_)) {
        return Err(error(
            "0A000",
            "only queries are answered on pg_catalog and information_schema",
        ));
    }
    rewrite(&mut statement);
    let visible = state
        .queries
        .visible_catalog(caller)
        .await
        .map_err(error_of)?;
    let memory_limit = usize::try_from(state.config.query.memory_limit_bytes).unwrap_or(usize::MAX);
    let context = kept
        .session(&visible, database, memory_limit)
        .map_err(error_of)?;
    let plan = context
        .state()
        .statement_to_plan(EngineStatement::Statement(Box::new(statement)))
        .await
        .map_err(|e| error_of(QueryError::Invalid(e.to_string())))?;
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
    .map_err(|e| error_of(QueryError::Internal(e.to_string())))?;
    if reads_lake {
        return Err(error("0A000", READS_LAKE));
    }
    Ok((context, plan))
}

/// The columns catalog query `sql` answers with, planned, not run.
pub async fn describe(
    state: &PgState,
    caller: &LakeCaller,
    session: (&str, &KeptCatalog),
    sql: &str,
    format: &Format,
) -> PgWireResult<Vec<FieldInfo>> {
    let (_, plan) = plan(state, caller, session, sql).await?;
    arrow_pg::datatypes::arrow_schema_to_pg_fields(plan.schema().as_arrow(), format, None)
}

/// The rows of catalog query `sql`, run in the caller's catalog session
/// (`session`: the database the connection names, and its kept session).
pub async fn answer(
    state: &PgState,
    caller: &LakeCaller,
    session: (&str, &KeptCatalog),
    sql: &str,
    format: &Format,
) -> PgWireResult<Response> {
    let (context, plan) = plan(state, caller, session, sql).await?;
    let schema = plan.schema().as_arrow().clone();
    let run = async {
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
        Ok::<_, DataFusionError>(Some(batches))
    };
    let limit = Duration::from_secs(state.config.query.time_limit_s);
    let batches = match tokio::time::timeout(limit, run).await {
        Err(_) => {
            return Err(error(
                "57014",
                "canceling statement due to statement timeout",
            ));
        }
        Ok(Err(e)) => return Err(error_of(QueryError::Failed(e.to_string()))),
        Ok(Ok(None)) => {
            return Err(error(
                "54000",
                format!("a catalog query may answer with at most {MAX_ROWS} rows"),
            ));
        }
        Ok(Ok(Some(batches))) => batches,
    };
    rows_response(
        &schema,
        stream::iter(batches.into_iter().map(Ok::<_, DataFusionError>)),
        format,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_relations_and_functions_route_here_and_lake_statements_do_not() {
        assert!(is_catalog_query("select 1 from PG_CATALOG.pg_type"));
        assert!(is_catalog_query("SELECT typname FROM pg_type"));
        assert!(is_catalog_query(
            "SELECT table_name FROM information_schema.tables"
        ));
        assert!(is_catalog_query("select current_schema()"));
        assert!(is_catalog_query("SELECT to_regtype('hstore')"));
        assert!(is_catalog_query(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN demo_lake_v2.trips t ON true"
        ));
        assert!(!is_catalog_query("SELECT 'pg_catalog.pg_class' AS word"));
        assert!(!is_catalog_query("SELECT 1 -- FROM pg_catalog.pg_class"));
        assert!(!is_catalog_query("SELECT count(*) FROM demo_lake_v2.trips"));
        assert!(!is_catalog_query(
            "SELECT current_schema() FROM demo_lake_v2.trips"
        ));
        assert!(!is_catalog_query("SELECT 1"));
        assert!(!is_catalog_query("not sql at all"));
        assert!(is_catalog_query("DROP TABLE information_schema.tables"));
        assert!(is_catalog_query(PSQL_POLICIES));
        assert!(parse(PSQL_POLICIES).is_ok());
    }

    /// The fourth query of psql 15's `\d table`.
    const PSQL_POLICIES: &str = "SELECT pol.polname, pol.polpermissive,
  CASE WHEN pol.polroles = '{0}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,
  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),
  CASE pol.polcmd
    WHEN 'r' THEN 'SELECT'
    WHEN 'a' THEN 'INSERT'
    WHEN 'w' THEN 'UPDATE'
    WHEN 'd' THEN 'DELETE'
    END AS cmd
FROM pg_catalog.pg_policy pol
WHERE pol.polrelid = '16388' ORDER BY 1;";

    #[test]
    fn to_regtype_and_like_escapes_are_rewritten_for_datafusion() {
        let mut statements = parse(
            "SELECT (SELECT count(*) FROM pg_class) FROM pg_type \
             WHERE (SELECT pg_namespace.nspname FROM pg_namespace \
             WHERE pg_namespace.oid = pg_type.typnamespace) = 'pg_catalog' \
             AND oid = to_regtype('hstore') \
             AND typname NOT LIKE 'pg/_' || '%' ESCAPE '/'",
        )
        .expect("parses");
        rewrite(&mut statements[0]);
        let text = statements[0].to_string();
        assert!(
            text.contains(
                "(SELECT first_value(oid) FROM pg_catalog.pg_type WHERE typname = 'hstore')"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "WHERE (SELECT first_value(pg_namespace.nspname) FROM pg_catalog.pg_namespace"
            ),
            "{text}"
        );
        assert!(
            text.contains("(SELECT count(*) FROM pg_catalog.pg_class"),
            "{text}"
        );
        assert!(
            text.contains(
                r"NOT LIKE replace(replace(('pg/_' || '%'), '\', '\\'), '/', '\') ESCAPE '\'"
            ),
            "{text}"
        );
        let mut statements = parse(
            "SELECT CASE WHEN pg_attribute.atthasdef THEN (SELECT pg_attrdef.adbin \
             FROM pg_attrdef WHERE pg_attrdef.adrelid = pg_attribute.attrelid) ELSE NULL END, \
             CASE WHEN true THEN (SELECT count(*) FROM pg_class) END FROM pg_attribute",
        )
        .expect("parses");
        rewrite(&mut statements[0]);
        let text = statements[0].to_string();
        assert!(text.contains("THEN NULL ELSE NULL END"), "{text}");
        assert!(
            text.contains("THEN (SELECT count(*) FROM pg_catalog.pg_class"),
            "{text}"
        );
    }
}
