//! `LakeTableProvider`: a catalogued lake table as DataFusion sees it.
//!
//! `scan()` starts from the files the catalog lists (never a directory
//! listing), keeps those whose partition values pass the query's partition-only
//! filters, and then refuses the whole query when any remaining file belongs to
//! a service client the caller may not read. Rows are never silently dropped:
//! the caller narrows the query with their own filter, or gets the 403.

use std::{fmt, sync::Arc};

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef},
    catalog::{Session, TableProvider},
    common::{DFSchema, DataFusionError, ScalarValue, Statistics, stats::Precision},
    datasource::{
        listing::{PartitionedFile, helpers::expr_applicable_for_cols},
        physical_plan::{
            FileGroup, FileScanConfigBuilder, ParquetSource,
            parquet::CachedParquetFileReaderFactory,
        },
        source::DataSourceExec,
    },
    execution::object_store::ObjectStoreUrl,
    logical_expr::{Expr, TableProviderFilterPushDown, TableType},
    physical_plan::{ExecutionPlan, empty::EmptyExec},
};

use crate::{
    auth::ServiceClientScope,
    store::catalog::{DataFile, LakeTable},
};

/// The service-client partition column every lake row carries.
pub const SERVICE_CLIENT_COLUMN: &str = "service_client_id";

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
    /// File columns then partition columns: what queries see.
    table_schema: SchemaRef,
    files: Vec<DataFile>,
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

/// The type of a partition column: `service_client_id` is a bigint, the others
/// (`svc$load_id`, requested partitions) are strings.
pub fn partition_field(name: &str) -> FieldRef {
    let data_type = if name == SERVICE_CLIENT_COLUMN {
        DataType::Int64
    } else {
        DataType::Utf8
    };
    Arc::new(Field::new(name, data_type, false))
}

/// `schema` with its top-level string and binary columns as view types.
pub fn with_view_types(schema: &Schema) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8View))
            }
            DataType::Binary | DataType::LargeBinary => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::BinaryView))
            }
            _ => field.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `schema` with view types as the plain types the catalog stores.
pub fn without_view_types(schema: &Schema) -> Schema {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Utf8View => Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8)),
            DataType::BinaryView => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::Binary))
            }
            _ => field.clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

impl LakeTableProvider {
    /// `file_schema` holds the columns inside the files (partition columns
    /// excluded); `files` are the table's committed files. Strings and
    /// binaries are read as view types (as DataFusion's own parquet tables
    /// do): no copy of the values out of the decoded pages.
    pub fn new(
        database: &str,
        table: LakeTable,
        file_schema: SchemaRef,
        files: Vec<DataFile>,
        read_scope: ServiceClientScope,
        object_store_url: ObjectStoreUrl,
    ) -> Self {
        let partition_fields: Vec<FieldRef> = table
            .partition_columns
            .iter()
            .map(|name| partition_field(name))
            .collect();
        let file_schema = with_view_types(&file_schema);
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        Self {
            database: database.to_string(),
            table,
            file_schema,
            partition_fields,
            table_schema: Arc::new(Schema::new(fields)),
            files,
            read_scope,
            object_store_url,
        }
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

    /// The catalog's files whose partition values pass the partition-only filters.
    fn pruned_files(
        &self,
        filters: &[Expr],
    ) -> datafusion::common::Result<Vec<(PartitionedFile, &DataFile)>> {
        let partition_names: Vec<&str> = self
            .partition_fields
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let partition_filters: Vec<Expr> = filters
            .iter()
            .filter(|f| expr_applicable_for_cols(&partition_names, f))
            .cloned()
            .collect();
        let partition_schema = DFSchema::try_from(Schema::new(self.partition_fields.clone()))?;
        let mut kept = Vec::new();
        for file in &self.files {
            let partitioned = self.partitioned_file(file)?;
            if let Some(partitioned) =
                datafusion::datasource::listing::helpers::filter_partitioned_file(
                    partitioned,
                    &partition_filters,
                    &partition_schema,
                )?
            {
                kept.push((partitioned, file));
            }
        }
        Ok(kept)
    }
}

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
        // Filters are used for pruning and stay above the scan as well.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
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
        let files = self.pruned_files(filters)?;
        for (_, file) in &files {
            let service_client = file.file.service_client_id.unwrap_or(-1);
            let allowed = u32::try_from(service_client).is_ok_and(|id| self.read_scope.allows(id));
            if !allowed {
                return Err(DataFusionError::External(Box::new(
                    AccessDenied::ServiceClient {
                        table: format!("{}.{}", self.database, self.table.name),
                        service_client,
                    },
                )));
            }
        }
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
        let source = Arc::new(
            ParquetSource::new(table_schema)
                .with_table_parquet_options(state.table_options().parquet.clone())
                .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
                    store,
                    metadata_cache,
                ))),
        );
        // The catalog knows each file's row count: exact statistics let the
        // planner order joins; files spread over the session's partitions.
        let rows: i64 = files.iter().map(|(_, f)| f.file.row_count).sum();
        let statistics = Statistics::new_unknown(&self.table_schema)
            .with_num_rows(Precision::Exact(usize::try_from(rows).unwrap_or(0)));
        let files: Vec<PartitionedFile> = files
            .into_iter()
            .map(|(partitioned, file)| {
                let file_rows = usize::try_from(file.file.row_count).unwrap_or(0);
                partitioned.with_statistics(Arc::new(
                    Statistics::new_unknown(&self.table_schema)
                        .with_num_rows(Precision::Exact(file_rows)),
                ))
            })
            .collect();
        let partitions = state.config_options().execution.target_partitions.max(1);
        let groups = FileGroup::new(files).split_files(partitions);
        let config = FileScanConfigBuilder::new(self.object_store_url.clone(), source)
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_limit(limit)
            .with_projection_indices(projection.cloned())?
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}
