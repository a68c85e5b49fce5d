//! The staged files as the checks read them: every answer comes from the
//! rows the insert will write, never from a footer's claims. A parquet
//! footer says how many rows each row group holds and each column's minimum
//! and maximum; DataFusion answers `count(*)`, `min` and `max` from those
//! claims when it can, and reads no page for a `count(*)`. A file whose
//! footer claims 3 rows over pages holding 2 then passed `count(*) = 3`
//! while the insert appended 2. So the staged session collects no
//! statistics, a scan that asks for no column reads one anyway and drops it,
//! and the physical optimizer's projection pushdown, which would fold that
//! drop back into the scan, is left out (staged SQL is aggregates over one
//! table, where it gains nothing).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::SchemaRef,
    catalog::{Session, TableProvider},
    common::Result,
    datasource::TableType,
    execution::{
        SessionState, SessionStateBuilder, config::SessionConfig, runtime_env::RuntimeEnv,
    },
    logical_expr::{Expr, TableProviderFilterPushDown},
    physical_optimizer::optimizer::PhysicalOptimizer,
    physical_plan::{ExecutionPlan, PhysicalExpr, projection::ProjectionExec},
};

/// The physical optimizer rule that would fold `EveryRowRead`'s drop of its
/// one column back into the scan.
const PROJECTION_PUSHDOWN: &str = "ProjectionPushdown";

/// A session state for staged SQL: no statistics, and every rule of the
/// physical optimizer but the projection pushdown.
pub fn staged_session_state(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionState {
    let rules = PhysicalOptimizer::new()
        .rules
        .into_iter()
        .filter(|rule| rule.name() != PROJECTION_PUSHDOWN)
        .collect();
    SessionStateBuilder::new()
        .with_config(config.with_collect_statistics(false))
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rules(rules)
        .build()
}

/// `inner` (the staged files' listing table, built without statistics) with
/// every row counted from its pages.
#[derive(Debug)]
pub struct EveryRowRead {
    pub inner: Arc<dyn TableProvider>,
}

#[async_trait]
impl TableProvider for EveryRowRead {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match projection {
            Some(columns) if columns.is_empty() && !self.schema().fields().is_empty() => {
                let one_column = self
                    .inner
                    .scan(state, Some(&vec![0]), filters, limit)
                    .await?;
                let no_columns: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
                Ok(Arc::new(ProjectionExec::try_new(no_columns, one_column)?))
            }
            _ => self.inner.scan(state, projection, filters, limit).await,
        }
    }
}
