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

use super::{CATALOG_FUNCTIONS, READS_LAKE, arrays, pg_settings, privileges::Privileges};
use crate::{
    auth::LakeCaller,
    engine::{bounded_functions::bound_functions_and, yield_points::YieldAfterRowMakers},
    pg::functions,
    query::{
        QueryError,
        service::{VisibleCatalog, columns_of},
    },
};

/// A lake table in the catalog session: its columns, never its rows.
#[derive(Debug)]
pub(super) struct LakePlaceholder {
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
    }
    hasher.finish()
}

impl KeptCatalog {
    /// The session for what `caller` sees (`visible`): the kept one, or a
    /// new one kept instead.
    pub(super) fn session(
        &self,
        caller: &LakeCaller,
        visible: &VisibleCatalog,
        database: &str,
        memory_limit: usize,
    ) -> Result<SessionContext, QueryError> {
        let privileges = Arc::new(Privileges::of(caller, visible, database));
        let print = fingerprint(visible, database, &privileges);
        let mut kept = self.0.lock().expect("kept catalog lock");
        if let Some((kept_print, context)) = kept.as_ref()
            && *kept_print == print
        {
            return Ok(context.clone());
        }
        let context = session(visible, database, privileges, memory_limit)?;
        *kept = Some((print, context.clone()));
        Ok(context)
    }
}

/// The catalog session of a caller on `database` (the name it connected
/// with): `visible`'s databases as schemas of placeholders, and pg_catalog;
/// the privilege functions answer with `privileges`.
fn session(
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
    let catalog = Arc::new(catalog);
    context.register_catalog(database, catalog.clone());
    setup_pg_catalog(&context, database, EmptyContextProvider).map_err(|e| internal(*e))?;
    pg_settings::overlay(catalog.as_ref()).map_err(internal)?;
    functions::register(&context, database);
    let [element, expand] = arrays::functions();
    let element = Arc::new(element);
    context.register_udf(element.as_ref().clone());
    context.register_udf(expand);
    for function in privileges.functions() {
        context.register_udf(function);
    }
    {
        // `text[i]` planned before DataFusion's planners see it.
        let state = context.state_ref();
        let mut state = state.write();
        let planners: Vec<Arc<dyn ExprPlanner>> =
            std::iter::once(Arc::new(arrays::TextArraySubscripts { element }) as _)
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
