//! The `pg_catalog` tables lakehost answers itself, laid over
//! datafusion-pg-catalog's schema (made by `setup_pg_catalog` before):
//!
//! - `pg_settings`: lakehost's settings (`pg_settings.rs`);
//! - `pg_database`: the database connected to, the one database a
//!   connection can reach (psql's `\l`): no `postgres` that refuses;
//! - `pg_tables`, `pg_views`, `pg_matviews`: the lake's tables and views
//!   the caller may read (dbt lists relations from these three); no
//!   materialized views;
//! - `pg_class` with `reloptions` and `relacl`, `pg_namespace` with
//!   `nspacl`, as NULL arrays (a lake has no storage options or ACLs;
//!   psql's `\d+`, `\dn+` and SQLAlchemy's index query name them);
//! - `pg_index` and `pg_constraint` empty, their vectors and key columns
//!   typed as the arrays they are (`indkey`, `conkey`, ...): a lake has no
//!   indexes or constraints, and SQLAlchemy's reflection `unnest`s those
//!   arrays and compares with `= ANY(...)`.
//!
//! Nothing here reads the lake: the listings come from what the catalog
//! session was built with.

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use datafusion::{
    arrow::{
        array::{ArrayRef, BooleanArray, RecordBatch, StringArray},
        datatypes::{DataType, Field, Schema, SchemaRef},
    },
    catalog::{CatalogProvider, MemTable, SchemaProvider, TableProvider},
    common::{ScalarValue, internal_err, plan_err},
    datasource::{TableType, ViewTable, provider_as_source},
    error::DataFusionError,
    logical_expr::{LogicalPlanBuilder, cast, col, lit},
};

use super::pg_settings;

/// The owner every relation shows (`pg_get_userbyid`'s answer).
const OWNER: &str = "postgres";

/// A lake relation the caller may read, as the listings show it.
pub struct ListedRelation {
    pub schema: String,
    pub name: String,
    pub kind: TableType,
    /// A view's SELECT.
    pub definition: Option<String>,
}

/// Lays lakehost's tables over `catalog`'s `pg_catalog` schema, for a
/// connection to `database` whose caller may read `relations`.
pub async fn overlay(
    catalog: &dyn CatalogProvider,
    database: &str,
    relations: &[ListedRelation],
) -> Result<(), DataFusionError> {
    let Some(inner) = catalog.schema("pg_catalog") else {
        return internal_err!("no pg_catalog schema to lay lakehost's tables over");
    };
    let original = async |name: &str| match inner.table(name).await? {
        Some(table) => Ok(table),
        None => internal_err!("datafusion-pg-catalog has no {name}"),
    };
    let mut tables: HashMap<&'static str, Arc<dyn TableProvider>> = HashMap::new();
    tables.insert("pg_settings", Arc::new(pg_settings::settings_table()?));
    tables.insert(
        "pg_database",
        Arc::new(only_database(original("pg_database").await?, database)?),
    );
    for (name, arrays) in [
        ("pg_class", &["reloptions", "relacl"][..]),
        ("pg_namespace", &["nspacl"]),
    ] {
        tables.insert(
            name,
            Arc::new(with_null_arrays(name, original(name).await?, arrays)?),
        );
    }
    tables.insert(
        "pg_index",
        Arc::new(empty_with_arrays(
            original("pg_index").await?.schema(),
            &[
                ("indkey", DataType::Int16),
                ("indoption", DataType::Int16),
                ("indcollation", DataType::Int32),
                ("indclass", DataType::Int32),
            ],
        )?),
    );
    tables.insert(
        "pg_constraint",
        Arc::new(empty_with_arrays(
            original("pg_constraint").await?.schema(),
            &[
                ("conkey", DataType::Int16),
                ("confkey", DataType::Int16),
                ("confdelsetcols", DataType::Int16),
                ("conpfeqop", DataType::Int32),
                ("conppeqop", DataType::Int32),
                ("conffeqop", DataType::Int32),
                ("conexclop", DataType::Int32),
            ],
        )?),
    );
    let [pg_tables, pg_views, pg_matviews] = listings(
        [
            original("pg_tables").await?.schema(),
            original("pg_views").await?.schema(),
            original("pg_matviews").await?.schema(),
        ],
        relations,
    )?;
    tables.insert("pg_tables", Arc::new(pg_tables));
    tables.insert("pg_views", Arc::new(pg_views));
    tables.insert("pg_matviews", Arc::new(pg_matviews));
    catalog.register_schema("pg_catalog", Arc::new(Overlaid { inner, tables }))?;
    Ok(())
}

/// `pg_database` with the row of `database` only.
fn only_database(
    pg_database: Arc<dyn TableProvider>,
    database: &str,
) -> Result<ViewTable, DataFusionError> {
    let plan = LogicalPlanBuilder::scan("pg_database", provider_as_source(pg_database), None)?
        .filter(col("datname").eq(lit(database)))?
        .build()?;
    Ok(ViewTable::new(plan, None))
}

/// `table` (`name`) with NULL text-array columns `arrays`: in place of
/// its own of those names (held as text), or after its own.
fn with_null_arrays(
    name: &str,
    table: Arc<dyn TableProvider>,
    arrays: &[&str],
) -> Result<ViewTable, DataFusionError> {
    let text_array = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
    let null_array = |name: &str| cast(lit(ScalarValue::Null), text_array.clone()).alias(name);
    let schema = table.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|field| match arrays.contains(&field.name().as_str()) {
            true => null_array(field.name()),
            false => col(field.name()),
        })
        .chain(
            arrays
                .iter()
                .filter(|array| schema.field_with_name(array).is_err())
                .map(|array| null_array(array)),
        )
        .collect::<Vec<_>>();
    let plan = LogicalPlanBuilder::scan(name, provider_as_source(table), None)?
        .project(columns)?
        .build()?;
    Ok(ViewTable::new(plan, None))
}

/// An empty table of `schema`, with each of `arrays` a list of its element
/// type instead of text.
fn empty_with_arrays(
    schema: SchemaRef,
    arrays: &[(&str, DataType)],
) -> Result<MemTable, DataFusionError> {
    let fields = schema
        .fields()
        .iter()
        .map(
            |field| match arrays.iter().find(|(name, _)| name == field.name()) {
                Some((_, element)) => Arc::new(Field::new(
                    field.name(),
                    DataType::List(Arc::new(Field::new_list_field(element.clone(), true))),
                    true,
                )),
                None => field.clone(),
            },
        )
        .collect::<Vec<_>>();
    for (name, _) in arrays {
        if schema.field_with_name(name).is_err() {
            return plan_err!("datafusion-pg-catalog's table has no column {name}");
        }
    }
    MemTable::try_new(Arc::new(Schema::new(fields)), vec![vec![]])
}

/// `pg_tables`, `pg_views` and `pg_matviews` (of those schemas) listing
/// `relations`: the lake's tables, its views, and no materialized views.
fn listings(
    [tables, views, matviews]: [SchemaRef; 3],
    relations: &[ListedRelation],
) -> Result<[MemTable; 3], DataFusionError> {
    let of_kind = |kind: TableType| {
        relations
            .iter()
            .filter(move |relation| relation.kind == kind)
            .collect::<Vec<_>>()
    };
    let text = |values: Vec<Option<&str>>| -> ArrayRef { Arc::new(StringArray::from(values)) };
    let flags = |rows: usize| -> ArrayRef { Arc::new(BooleanArray::from(vec![false; rows])) };
    let base = of_kind(TableType::Base);
    let rows = base.len();
    let table_columns = vec![
        text(base.iter().map(|r| Some(r.schema.as_str())).collect()),
        text(base.iter().map(|r| Some(r.name.as_str())).collect()),
        text(vec![Some(OWNER); rows]),
        text(vec![None; rows]),
        flags(rows),
        flags(rows),
        flags(rows),
        flags(rows),
    ];
    let view = of_kind(TableType::View);
    let rows = view.len();
    let view_columns = vec![
        text(view.iter().map(|r| Some(r.schema.as_str())).collect()),
        text(view.iter().map(|r| Some(r.name.as_str())).collect()),
        text(vec![Some(OWNER); rows]),
        text(view.iter().map(|r| r.definition.as_deref()).collect()),
    ];
    let table = |schema: SchemaRef, columns: Vec<ArrayRef>| -> Result<MemTable, DataFusionError> {
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        MemTable::try_new(schema, vec![vec![batch]])
    };
    Ok([
        table(tables, table_columns)?,
        table(views, view_columns)?,
        MemTable::try_new(matviews, vec![vec![]])?,
    ])
}

/// datafusion-pg-catalog's `pg_catalog` schema with lakehost's tables in
/// place of its own.
#[derive(Debug)]
struct Overlaid {
    inner: Arc<dyn SchemaProvider>,
    tables: HashMap<&'static str, Arc<dyn TableProvider>>,
}

#[async_trait]
impl SchemaProvider for Overlaid {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if let Some(table) = self.tables.get(name.to_ascii_lowercase().as_str()) {
            return Ok(Some(table.clone()));
        }
        self.inner.table(name).await
    }

    /// As datafusion-pg-catalog lists them (lakehost's are laid over
    /// tables, not views of tables).
    async fn table_type(&self, name: &str) -> Result<Option<TableType>, DataFusionError> {
        if self.tables.contains_key(name.to_ascii_lowercase().as_str()) {
            return Ok(Some(TableType::Base));
        }
        self.inner.table_type(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}
