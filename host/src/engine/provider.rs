//! `LakeTableProvider`: a catalogued lake table as DataFusion sees it.
//!
//! `scan()` starts from the files the catalog lists (never a directory
//! listing). The access decision comes first and reads only the filters on
//! `service_client_id` alone: the whole query is refused when a file those
//! filters keep belongs to a service client the caller may not read, or when
//! they admit such a client among the values the query names (a literal and
//! its neighbours), whether or not it has rows. Only then are the files pruned
//! by every partition filter, so whether a query is refused never depends on
//! other clients' partition values (a filter such as `... OR (service_client_id
//! = 5 AND region LIKE 'z%')` cannot probe them). Rows are never silently
//! dropped: the caller narrows the query with their own filter, or gets the 403.
//!
//! Queries see the columns in the table's order (`layout::table_schema`); the
//! files are scanned as file columns then partition columns, and a projection
//! on top puts a scan's columns back in the order the query asked for.

use std::{fmt, sync::Arc};

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::{Field, FieldRef, Schema, SchemaRef},
    catalog::{Session, TableProvider},
    common::{DFSchema, DataFusionError, ScalarValue, Statistics, stats::Precision},
    datasource::{
        listing::PartitionedFile,
        physical_plan::{
            FileGroup, FileScanConfigBuilder, ParquetSource,
            parquet::CachedParquetFileReaderFactory,
        },
        source::DataSourceExec,
    },
    execution::object_store::ObjectStoreUrl,
    logical_expr::{Expr, TableProviderFilterPushDown, TableType},
    physical_expr::{PhysicalExpr, expressions::Column},
    physical_plan::{ExecutionPlan, empty::EmptyExec, projection::ProjectionExec},
};

use super::late_filters::filter_while_decoding;
use super::layout::{
    SERVICE_CLIENT_COLUMN, StringColumns, column_positions, in_table_order, partition_field,
    scan_schema,
};
use super::partition_filters::{decided_by_folders, filters_on, named_service_clients};
use crate::{
    auth::ServiceClientScope,
    store::catalog::{DataFile, LakeTable},
};

/// Why a scan was refused; carried through DataFusion as an external error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessDenied {
    /// The caller's roles cannot read this database at all.
    #[error("database {database} is not readable with the caller's roles")]
    Database { database: String },
    /// The query would read rows of a service client the caller may not read.
    #[error("table {table} holds rows of service client {service_client} the caller may not read")]
    ServiceClient { table: String, service_client: i64 },
}

impl AccessDenied {
    /// The spec's refusal: a database the roles cannot use, or rows of
    /// another service client.
    pub fn denial(&self) -> super::Denial {
        match self {
            AccessDenied::Database { .. } => super::Denial::Execute,
            AccessDenied::ServiceClient { .. } => super::Denial::Data,
        }
    }

    /// Finds an access refusal anywhere in a DataFusion error chain.
    pub fn find(error: &DataFusionError) -> Option<&AccessDenied> {
        match error {
            DataFusionError::External(inner) => inner.downcast_ref::<AccessDenied>(),
            DataFusionError::Context(_, inner) => Self::find(inner),
            DataFusionError::Shared(inner) => Self::find(inner),
            DataFusionError::Collection(errors) => errors.iter().find_map(Self::find),
            _ => None,
        }
    }
}

pub struct LakeTableProvider {
    database: String,
    table: LakeTable,
    /// Columns stored inside the data files.
    file_schema: SchemaRef,
    /// Partition columns, taken from the catalog's partition values.
    partition_fields: Vec<FieldRef>,
    /// File columns then partition columns: the order files are scanned in.
    scan_schema: SchemaRef,
    /// Where each column queries see is in `scan_schema`, in the table's order.
    positions: Vec<usize>,
    /// `scan_schema` in the table's order: what queries see.
    table_schema: SchemaRef,
    files: Arc<[DataFile]>,
    read_scope: ServiceClientScope,
    object_store_url: ObjectStoreUrl,
}

impl fmt::Debug for LakeTableProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LakeTableProvider")
            .field("database", &self.database)
            .field("table", &self.table.name)
            .field("files", &self.files.len())
            .finish()
    }
}

impl LakeTableProvider {
    /// `file_schema` holds the columns inside the files (partition columns
    /// excluded); `files` are the table's committed files. Strings and
    /// binaries are read as `strings` says.
    pub fn new(
        database: &str,
        table: LakeTable,
        file_schema: SchemaRef,
        strings: StringColumns,
        files: impl Into<Arc<[DataFile]>>,
        read_scope: ServiceClientScope,
        object_store_url: ObjectStoreUrl,
    ) -> Self {
        let partition_fields: Vec<FieldRef> = table
            .partition_columns
            .iter()
            .map(|name| partition_field(name))
            .collect();
        let file_schema = strings.read_schema(&file_schema);
        let scan_schema = scan_schema(&file_schema, &table.partition_columns);
        let positions = column_positions(&scan_schema, table.column_order.as_deref());
        let table_schema = Arc::new(in_table_order(&scan_schema, &positions));
        Self {
            database: database.to_string(),
            table,
            file_schema,
            partition_fields,
            scan_schema: Arc::new(scan_schema),
            positions,
            table_schema,
            files: files.into(),
            read_scope,
            object_store_url,
        }
    }

    /// What this provider will read, as bytes that differ whenever the
    /// table, its name, its schema or its committed files differ (the
    /// files are fixed when the session is made). See `snapshot.rs`.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut parts = vec![
            self.database.as_str(),
            self.table.id.as_str(),
            self.table.name.as_str(),
            self.table.schema_json.as_str(),
        ];
        parts.extend(self.files.iter().map(|file| file.id.as_str()));
        let mut bytes = Vec::new();
        for part in parts {
            bytes.extend((part.len() as u64).to_be_bytes());
            bytes.extend(part.as_bytes());
        }
        bytes
    }

    /// The scan's projection for a query's `projection` of the table's
    /// columns, and, when the scan's columns come out in another order than
    /// asked, where each asked column is among them.
    fn scan_projection(
        &self,
        projection: Option<&Vec<usize>>,
    ) -> datafusion::common::Result<ScanProjection> {
        let in_scan_order = self.positions.iter().enumerate().all(|(i, p)| i == *p);
        if in_scan_order {
            return Ok((projection.cloned(), None));
        }
        let asked = match projection {
            None => self.positions.clone(),
            Some(indices) => indices
                .iter()
                .map(|i| {
                    self.positions.get(*i).copied().ok_or_else(|| {
                        DataFusionError::Internal(format!("no column {i} in the table"))
                    })
                })
                .collect::<datafusion::common::Result<Vec<usize>>>()?,
        };
        let mut scanned = asked.clone();
        scanned.sort_unstable();
        scanned.dedup();
        if scanned == asked {
            return Ok((Some(scanned), None));
        }
        let among = asked
            .iter()
            .map(|p| scanned.binary_search(p).unwrap_or_default())
            .collect();
        Ok((Some(scanned), Some(among)))
    }

    fn partitioned_file(&self, file: &DataFile) -> datafusion::common::Result<PartitionedFile> {
        let values = self
            .partition_fields
            .iter()
            .map(|field| {
                let raw = file
                    .file
                    .partition_values
                    .get(field.name())
                    .ok_or_else(|| {
                        DataFusionError::Internal(format!(
                            "file {} has no value for partition {}",
                            file.file.path,
                            field.name()
                        ))
                    })?;
                ScalarValue::try_from_string(raw.clone(), field.data_type())
            })
            .collect::<datafusion::common::Result<Vec<_>>>()?;
        Ok(
            PartitionedFile::new(file.file.path.clone(), file.file.size_bytes as u64)
                .with_partition_values(values),
        )
    }

    /// The catalog's files, each with its partition values.
    fn partitioned_files(&self) -> datafusion::common::Result<Vec<(PartitionedFile, &DataFile)>> {
        self.files
            .iter()
            .map(|file| Ok((self.partitioned_file(file)?, file)))
            .collect()
    }

    /// The files whose partition values pass every filter of `filters`.
    fn files_passing<'a>(
        &self,
        files: Vec<(PartitionedFile, &'a DataFile)>,
        filters: &[Expr],
    ) -> datafusion::common::Result<Vec<(PartitionedFile, &'a DataFile)>> {
        if filters.is_empty() {
            return Ok(files);
        }
        let partition_schema = DFSchema::try_from(Schema::new(self.partition_fields.clone()))?;
        let mut kept = Vec::new();
        for (partitioned, file) in files {
            if let Some(partitioned) =
                datafusion::datasource::listing::helpers::filter_partitioned_file(
                    partitioned,
                    filters,
                    &partition_schema,
                )?
            {
                kept.push((partitioned, file));
            }
        }
        Ok(kept)
    }

    /// Which of `candidates` the service-client filters admit, evaluated in
    /// one batch (the other partition columns null: the filters do not read
    /// them).
    fn admitted(
        &self,
        filters: &[Expr],
        candidates: Vec<i64>,
    ) -> datafusion::common::Result<Vec<i64>> {
        use datafusion::{
            arrow::array::{Array as _, BooleanArray, Int64Array, new_null_array},
            logical_expr::{
                execution_props::ExecutionProps,
                physical_planning_context::PhysicalPlanningContext, utils::conjunction,
            },
            physical_expr::create_physical_expr,
        };
        let Some(predicate) = conjunction(filters.iter().cloned()) else {
            return Ok(candidates);
        };
        let fields: Vec<Field> = self
            .partition_fields
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let columns = schema
            .fields()
            .iter()
            .map(|field| match field.name() == SERVICE_CLIENT_COLUMN {
                true => Arc::new(Int64Array::from(candidates.clone())) as _,
                false => new_null_array(field.data_type(), candidates.len()),
            })
            .collect();
        let batch = datafusion::arrow::array::RecordBatch::try_new(schema.clone(), columns)?;
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let physical = create_physical_expr(
            &predicate,
            &df_schema,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )?;
        let verdicts = physical.evaluate(&batch)?.into_array(candidates.len())?;
        let verdicts = verdicts
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Internal("a filter that is not a predicate".into()))?;
        Ok(candidates
            .into_iter()
            .enumerate()
            .filter(|(i, _)| verdicts.is_valid(*i) && verdicts.value(*i))
            .map(|(_, candidate)| candidate)
            .collect())
    }

    fn refusal(&self, service_client: i64) -> DataFusionError {
        DataFusionError::External(Box::new(AccessDenied::ServiceClient {
            table: format!("{}.{}", self.database, self.table.name),
            service_client,
        }))
    }

    fn readable(&self, service_client: i64) -> bool {
        u32::try_from(service_client).is_ok_and(|id| self.read_scope.allows(id))
    }

    /// The names of the columns the table's folders hold.
    fn partition_names(&self) -> Vec<&str> {
        self.partition_fields
            .iter()
            .map(|f| f.name().as_str())
            .collect()
    }

    /// The files a query reads, after the access decision (module header):
    /// refused when the service-client filters keep a file, or admit a named
    /// client, outside the caller's read scope; then pruned by every
    /// partition filter.
    fn files_to_read(
        &self,
        filters: &[Expr],
    ) -> datafusion::common::Result<Vec<(PartitionedFile, &DataFile)>> {
        let client_filters = filters_on(filters, &[SERVICE_CLIENT_COLUMN]);
        let reachable = self.files_passing(self.partitioned_files()?, &client_filters)?;
        for (_, file) in &reachable {
            let service_client = file.file.service_client_id.unwrap_or(-1);
            if !self.readable(service_client) {
                return Err(self.refusal(service_client));
            }
        }
        if !client_filters.is_empty() {
            let unreadable: Vec<i64> = named_service_clients(&client_filters)
                .into_iter()
                .filter(|named| !self.readable(*named))
                .collect();
            if let Some(named) = self.admitted(&client_filters, unreadable)?.first() {
                return Err(self.refusal(*named));
            }
        }
        let partition_filters = filters_on(filters, &self.partition_names());
        self.files_passing(reachable, &partition_filters)
    }
}

/// A scan's projection (in scan order), and where each column a query
/// asked for is among the scanned ones when the orders differ.
type ScanProjection = (Option<Vec<usize>>, Option<Vec<usize>>);

#[async_trait]
impl TableProvider for LakeTableProvider {
    fn schema(&self) -> SchemaRef {
        self.table_schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        // A filter on partition columns alone is decided file by file on the
        // files' partition values, which are the rows' own (the scan fills
        // those columns from them): exact, so it leaves the plan and its
        // columns are not read unless selected, as in DataFusion's listing
        // tables. Every other filter prunes and stays above the scan. Both
        // still reach `scan()`, where access is decided.
        let partitions = self.partition_names();
        Ok(filters
            .iter()
            .map(|filter| match decided_by_folders(filter, &partitions) {
                true => TableProviderFilterPushDown::Exact,
                false => TableProviderFilterPushDown::Inexact,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        if self.read_scope == ServiceClientScope::Nothing {
            return Err(DataFusionError::External(Box::new(
                AccessDenied::Database {
                    database: self.database.clone(),
                },
            )));
        }
        let files = self.files_to_read(filters)?;
        let projected = match projection {
            Some(indices) => Arc::new(self.table_schema.project(indices)?),
            None => self.table_schema.clone(),
        };
        if files.is_empty() {
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let table_schema =
            datafusion::datasource::table_schema::TableSchema::builder(self.file_schema.clone())
                .with_table_partition_cols(self.partition_fields.clone())
                .build();
        // As DataFusion's own parquet tables: the session's parquet options,
        // and footers and page indexes from the runtime's metadata cache
        // (a file never changes in place; a new load is a new path).
        let store = state.runtime_env().object_store(&self.object_store_url)?;
        let metadata_cache = state.runtime_env().cache_manager.get_file_metadata_cache();
        let mut source = ParquetSource::new(table_schema)
            .with_table_parquet_options(state.table_options().parquet.clone())
            .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
                store,
                metadata_cache,
            )));
        if filter_while_decoding(filters, &projected, &self.partition_names()) {
            source = source.with_pushdown_filters(true);
        }
        let source = Arc::new(source);
        // The catalog knows each file's row count: exact statistics let the
        // planner order joins; files spread over the session's partitions.
        let rows: i64 = files.iter().map(|(_, f)| f.file.row_count).sum();
        let statistics = Statistics::new_unknown(&self.scan_schema)
            .with_num_rows(Precision::Exact(usize::try_from(rows).unwrap_or(0)));
        let files: Vec<PartitionedFile> = files
            .into_iter()
            .map(|(partitioned, file)| {
                let file_rows = usize::try_from(file.file.row_count).unwrap_or(0);
                partitioned.with_statistics(Arc::new(
                    Statistics::new_unknown(&self.scan_schema)
                        .with_num_rows(Precision::Exact(file_rows)),
                ))
            })
            .collect();
        let partitions = state.config_options().execution.target_partitions.max(1);
        let groups = FileGroup::new(files).split_files(partitions);
        let (scanned, reorder) = self.scan_projection(projection)?;
        let config = FileScanConfigBuilder::new(self.object_store_url.clone(), source)
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_limit(limit)
            .with_projection_indices(scanned)?
            .build();
        let scan = DataSourceExec::from_data_source(config);
        let Some(reorder) = reorder else {
            return Ok(scan);
        };
        // The scan's columns in the order the query asked for them.
        let scan_fields = scan.schema();
        let columns = reorder.into_iter().map(|i| {
            let name = scan_fields.field(i).name().clone();
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&name, i));
            (column, name)
        });
        Ok(Arc::new(ProjectionExec::try_new(columns, scan)?))
    }
}

#[cfg(test)]
#[path = "column_order_tests.rs"]
mod column_order_tests;
