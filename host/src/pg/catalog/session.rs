//! The catalog session of a connection: what pg_catalog and
//! information_schema are made of for its caller. Its schemas are the lake
//! databases the caller may read, each table a placeholder with the table's
//! columns and no rows (a scan of one is refused); pg_catalog's tables,
//! settings, Postgres functions and the caller's privileges beside them. A
//! connection keeps its session while what its caller may read stays the
//! same, so pg_catalog's oids hold from one statement to the next.
//!
//! It never holds or reads lake data, and never lets a statement spill to
//! disk: a catalog statement's memory is its budget.

use std::{collections::BTreeMap, sync::Arc};

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::SchemaRef,
    catalog::{CatalogProvider, SchemaProvider, Session, TableProvider},
    common::plan_err,
    datasource::TableType,
    error::DataFusionError,
    execution::{
        SessionStateBuilder,
        disk_manager::{DiskManagerBuilder, DiskManagerMode},
        memory_pool::FairSpillPool,
        runtime_env::RuntimeEnvBuilder,
    },
    logical_expr::{Expr, planner::ExprPlanner},
    physical_plan::ExecutionPlan,
    prelude::{SessionConfig, SessionContext},
};
use datafusion_pg_catalog::{pg_catalog::context::EmptyContextProvider, setup_pg_catalog};

use super::{
    CATALOG_FUNCTIONS, READS_LAKE, arrays, booleans, descriptions,
    overlay::{self, ListedRelation},
    privileges::Privileges,
};
use crate::{
    auth::LakeCaller,
    engine::{bounded_functions::bound_functions_and, yield_points::YieldAfterRowMakers},
    pg::functions,
    query::{
        QueryError,
        service::{VisibleCatalog, columns_of},
    },
    store::catalog::{LakeTable, views::LakeView},
};

/// A lake table or view in the catalog session: its columns (and a view's
/// SELECT), never its rows.
#[derive(Debug)]
pub(super) struct LakePlaceholder {
    schema: SchemaRef,
    kind: TableType,
    definition: Option<String>,
}

#[async_trait]
impl TableProvider for LakePlaceholder {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.kind
    }

    /// A view's SELECT (`information_schema.views`).
    fn get_table_definition(&self) -> Option<&str> {
        self.definition.as_deref()
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
fn fingerprint(visible: &VisibleCatalog, database: &str, privileges: &Privileges) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    database.hash(&mut hasher);
    privileges.hash(&mut hasher);
    for lake_database in &visible.databases {
        (&lake_database.id, &lake_database.name).hash(&mut hasher);
    }
    for table in &visible.tables {
        (&table.database_id, &table.name, &table.schema_json).hash(&mut hasher);
        table.partition_columns.hash(&mut hasher);
        table.column_order.hash(&mut hasher);
    }
    hasher.finish()
}

impl KeptCatalog {
    /// The session for what `caller` sees (`visible`): the kept one, or a
    /// new one kept instead.
    pub(super) async fn session(
        &self,
        caller: &LakeCaller,
        visible: &VisibleCatalog,
        database: &str,
        memory_limit: usize,
    ) -> Result<SessionContext, QueryError> {
        let privileges = Arc::new(Privileges::of(caller, visible, database));
        let print = fingerprint(visible, database, &privileges);
        {
            let kept = self.0.lock().expect("kept catalog lock");
            if let Some((kept_print, context)) = kept.as_ref()
                && *kept_print == print
            {
                return Ok(context.clone());
            }
        }
        let context = session(visible, database, privileges, memory_limit).await?;
        *self.0.lock().expect("kept catalog lock") = Some((print, context.clone()));
        Ok(context)
    }
}

/// The placeholder of a catalog entry: a view's (`LakeView`) or a
/// table's, with the columns queries see (`columns_of` reads both).
fn placeholder(entry: &LakeTable) -> Result<LakePlaceholder, QueryError> {
    let view = LakeView::from_catalog_entry(entry)
        .map_err(|e| QueryError::internal(format!("view {}", entry.name), e))?;
    Ok(LakePlaceholder {
        schema: Arc::new(columns_of(entry)?),
        kind: match view {
            Some(_) => TableType::View,
            None => TableType::Base,
        },
        definition: view.map(|view| view.sql),
    })
}

/// The catalog session of a caller on `database` (the name it connected
/// with): `visible`'s databases as schemas of placeholders, and pg_catalog;
/// the privilege functions answer with `privileges`.
async fn session(
    visible: &VisibleCatalog,
    database: &str,
    privileges: Arc<Privileges>,
    memory_limit: usize,
) -> Result<SessionContext, QueryError> {
    let internal = |e: DataFusionError| QueryError::internal("catalog session", e);
    let config = SessionConfig::new()
        .with_default_catalog_and_schema(database, "public")
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true)
        .with_target_partitions(1);
    // Nothing to spill: a statement past its memory is refused (53200).
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(memory_limit)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()
        .map_err(internal)?;
    // Joins of the catalog's tables give their thread back every so often,
    // as the lake sessions' do: a statement past its time limit is aborted,
    // and an abort takes effect only where it yields.
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(YieldAfterRowMakers))
        .build();
    let context = SessionContext::new_with_state(state);
    let catalog = SortedCatalog::default();
    catalog
        .register_schema("public", Arc::new(SortedSchema::default()))
        .map_err(internal)?;
    let mut listed = Vec::new();
    for lake_database in &visible.databases {
        let mut schema = SortedSchema::default();
        for table in visible
            .tables
            .iter()
            .filter(|t| t.database_id == lake_database.id)
        {
            let placeholder = placeholder(table)?;
            listed.push(ListedRelation {
                schema: lake_database.name.clone(),
                name: table.name.clone(),
                kind: placeholder.kind,
                definition: placeholder.definition.clone(),
            });
            schema
                .tables
                .insert(table.name.clone(), Arc::new(placeholder));
        }
        catalog
            .register_schema(&lake_database.name, Arc::new(schema))
            .map_err(internal)?;
    }
    let catalog = Arc::new(catalog);
    context.register_catalog(database, catalog.clone());
    setup_pg_catalog(&context, database, EmptyContextProvider).map_err(|e| internal(*e))?;
    overlay::overlay(catalog.as_ref(), database, &listed)
        .await
        .map_err(internal)?;
    functions::register(&context, database);
    descriptions::register(&context);
    let [element, expand] = arrays::functions();
    let element = Arc::new(element);
    context.register_udf(element.as_ref().clone());
    context.register_udf(expand);
    for function in privileges.functions() {
        context.register_udf(function);
    }
    {
        // `text[i]` and `boolean = 'f'` planned before DataFusion's
        // planners see them.
        let state = context.state_ref();
        let mut state = state.write();
        let planners: Vec<Arc<dyn ExprPlanner>> = [
            Arc::new(arrays::TextArraySubscripts { element }) as _,
            Arc::new(booleans::BooleanLiterals) as _,
        ]
        .into_iter()
        .chain(state.expr_planners().iter().cloned())
        .collect();
        *state = SessionStateBuilder::new_from_existing(state.clone())
            .with_expr_planners(planners)
            .build();
    }
    // The catalog's own functions too (`quote_ident`, `json_build_object`,
    // ...): each bounded by what it returns, as the engine's growing ones,
    // but for those whose value has a fixed size.
    let mut others: Vec<&str> = CATALOG_FUNCTIONS
        .iter()
        .map(String::as_str)
        .filter(|name| !functions::FIXED_SIZE.contains(name))
        .collect();
    others.extend(functions::NAMES);
    others.push(arrays::EXPAND_ARRAY);
    bound_functions_and(&context, &others);
    Ok(context)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::{
        datatypes::{DataType, Field, Schema},
        util::pretty::pretty_format_batches,
    };

    use super::*;
    use crate::lake;
    use crate::store::{catalog::LakeDatabase, database_kind::DatabaseKind};

    /// A session whose caller reads `demo_sandbox`, holding table `scratch`
    /// and view `cheap`.
    async fn sandbox() -> SessionContext {
        let columns = Schema::new(vec![Field::new("fare", DataType::Float64, true)]);
        let table = LakeTable {
            id: "t1".to_string(),
            database_id: "d1".to_string(),
            name: "scratch".to_string(),
            schema_json: lake::schema_to_json(&columns),
            partition_columns: Vec::new(),
            column_order: None,
            created_at: 0,
        };
        let view = LakeView::new(
            "d1",
            "cheap",
            ("SELECT fare FROM scratch WHERE fare < 10", "demo_sandbox"),
            &lake::schema_to_json(&columns),
            0,
        );
        let visible = VisibleCatalog {
            databases: vec![LakeDatabase {
                id: "d1".to_string(),
                org: "demo".to_string(),
                zone: None,
                name: "demo_sandbox".to_string(),
                kind: DatabaseKind::Sandbox,
            }],
            tables: vec![table, view.as_catalog_entry()],
        };
        session(
            &visible,
            "demo",
            Arc::new(Privileges::none("demo")),
            64 << 20,
        )
        .await
        .expect("a session")
    }

    async fn rows(context: &SessionContext, sql: &str) -> String {
        let batches = context.sql(sql).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    #[tokio::test]
    async fn views_are_listed_as_views_and_tables_as_tables() {
        let context = sandbox().await;
        let kinds = rows(
            &context,
            "SELECT c.relname, c.relkind FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'demo_sandbox' ORDER BY 1",
        )
        .await;
        assert!(kinds.contains("| cheap   | v       |"), "{kinds}");
        assert!(kinds.contains("| scratch | r       |"), "{kinds}");
        let listed = rows(
            &context,
            "SELECT tablename AS name, 'table' AS type FROM pg_catalog.pg_tables \
             WHERE schemaname = 'demo_sandbox' UNION ALL \
             SELECT viewname, definition FROM pg_catalog.pg_views UNION ALL \
             SELECT matviewname, 'matview' FROM pg_catalog.pg_matviews ORDER BY 1",
        )
        .await;
        assert!(
            listed.contains("| cheap   | SELECT fare FROM scratch WHERE fare < 10 |"),
            "{listed}"
        );
        assert!(listed.contains("| scratch | table "), "{listed}");
        assert!(!listed.contains("matview"), "{listed}");
        let standard = rows(
            &context,
            "SELECT t.table_name, t.table_type, v.definition \
             FROM information_schema.tables t LEFT JOIN information_schema.views v \
             ON v.table_name = t.table_name WHERE t.table_schema = 'demo_sandbox' ORDER BY 1",
        )
        .await;
        assert!(
            standard.contains("| cheap      | VIEW       | SELECT fare FROM scratch"),
            "{standard}"
        );
        assert!(
            standard.contains("| scratch    | BASE TABLE |"),
            "{standard}"
        );
        // psql's `\\d+` of a view shows its SELECT.
        let mut statements = crate::pg::catalog::parse(
            "SELECT pg_catalog.pg_get_viewdef(c.oid, true) AS d FROM pg_catalog.pg_class c \
             WHERE c.relname IN ('cheap', 'scratch') ORDER BY c.relname",
        )
        .expect("parses");
        super::super::rewrite::rewrite(&mut statements[0]);
        let plan = context
            .state()
            .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                statements.remove(0),
            )))
            .await
            .unwrap();
        let batches = context
            .execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let definitions = pretty_format_batches(&batches).unwrap().to_string();
        assert!(
            definitions.contains("| SELECT fare FROM scratch WHERE fare < 10 |"),
            "{definitions}"
        );
        // One database: the one connected to.
        let databases = rows(&context, "SELECT datname FROM pg_catalog.pg_database").await;
        assert_eq!(
            databases.lines().filter(|l| l.starts_with("| ")).count(),
            2,
            "{databases}"
        );
        assert!(databases.contains("| demo    |"), "{databases}");
    }
}
