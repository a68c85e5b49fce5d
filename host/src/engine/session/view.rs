//! A view of the session's catalog: its SELECT planned, when a statement
//! reads it, in the reading session (with the view's own default database),
//! so every base table it scans is the reader's `LakeTableProvider` with the
//! reader's access decision. A view never reads more than its reader may;
//! a view over rows not the reader's is refused as the rows would be.
//!
//! A filter on the view is applied to its SELECT (and again above it), so
//! it reaches the base tables' scans: an own-client analyst filtering a
//! view to their service clients reads as they would read the table.
//!
//! Its columns are those stored when it was made; a SELECT that no longer
//! plans (a base table dropped) or whose columns changed fails the read
//! with a message that names the view.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::{Field, Schema, SchemaRef},
    catalog::{Session, TableProvider},
    common::{
        Column as LogicalColumn, DataFusionError,
        tree_node::{Transformed, TreeNode as _},
    },
    execution::SessionState,
    logical_expr::{
        LogicalPlanBuilder, TableProviderFilterPushDown, TableType, utils::conjunction,
    },
    physical_expr::{PhysicalExpr, expressions::Column},
    physical_plan::{ExecutionPlan, expressions::cast, projection::ProjectionExec},
    prelude::Expr,
};

use crate::{engine::AccessDenied, store::catalog::views::LakeView};

/// How deep views over views may go: past it a view (or a cycle of views
/// replaced into one another) fails to plan instead of recursing.
const MAX_VIEW_DEPTH: usize = 16;

/// How many views deep the session planning a view already is.
#[derive(Debug, Default)]
struct ViewDepth(usize);

#[derive(Debug)]
pub(super) struct LakeViewProvider {
    database: String,
    view: LakeView,
    schema: SchemaRef,
}

impl LakeViewProvider {
    /// `schema` is the view's stored columns as the session reads them.
    pub(super) fn new(database: &str, view: LakeView, schema: &Schema) -> Self {
        // A base table's nullability may change under a view: the view
        // promises none.
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Self {
            database: database.to_string(),
            view,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    fn failed(&self, why: impl std::fmt::Display) -> DataFusionError {
        DataFusionError::Plan(format!(
            "view {}.{} {why}: create it again (CREATE OR REPLACE VIEW)",
            self.database, self.view.name
        ))
    }

    /// The view's SELECT planned in `state`, one view deeper, with
    /// `filters` (on the view's columns) applied to its rows.
    async fn plan(
        &self,
        state: &SessionState,
        filters: &[Expr],
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let depth = state
            .config()
            .get_extension::<ViewDepth>()
            .map_or(0, |depth| depth.0);
        if depth >= MAX_VIEW_DEPTH {
            return Err(self.failed(format!(
                "reads views more than {MAX_VIEW_DEPTH} deep (does it read itself?)"
            )));
        }
        let mut nested = state.clone();
        let config = nested.config_mut();
        config.set_extension(Arc::new(ViewDepth(depth + 1)));
        config.options_mut().catalog.default_schema = self.view.default_database.clone();
        let named = |e: DataFusionError| match AccessDenied::find(&e) {
            // An access refusal found in the SELECT stays what it is.
            Some(_) => e,
            None => self.failed(format!("no longer plans ({})", e.strip_backtrace())),
        };
        let mut logical = nested
            .create_logical_plan(&self.view.sql)
            .await
            .map_err(named)?;
        let unqualified = filters
            .iter()
            .map(|filter| {
                filter
                    .clone()
                    .transform(|expr| {
                        Ok(match expr {
                            Expr::Column(column) => Transformed::yes(Expr::Column(
                                LogicalColumn::new_unqualified(column.name),
                            )),
                            other => Transformed::no(other),
                        })
                    })
                    .map(|transformed| transformed.data)
            })
            .collect::<datafusion::common::Result<Vec<Expr>>>()?;
        if let Some(predicate) = conjunction(unqualified) {
            logical = LogicalPlanBuilder::from(logical)
                .filter(predicate)
                .and_then(LogicalPlanBuilder::build)
                .map_err(named)?;
        }
        nested.create_physical_plan(&logical).await.map_err(named)
    }
}

#[async_trait]
impl TableProvider for LakeViewProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn get_table_definition(&self) -> Option<&str> {
        Some(&self.view.sql)
    }

    /// Filters reach the SELECT and stay above the view as well.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    /// A limit stays above the view.
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let Some(state) = state.as_any().downcast_ref::<SessionState>() else {
            return Err(DataFusionError::Internal(
                "a lake view is planned in a lake session".into(),
            ));
        };
        let plan = self.plan(state, filters).await?;
        let planned = plan.schema();
        let same_columns = planned.fields().len() == self.schema.fields().len()
            && planned
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(now, then)| now.name() == then.name());
        if !same_columns {
            return Err(self.failed("no longer has the columns it was made with"));
        }
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let columns = projection.unwrap_or(&all);
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::with_capacity(columns.len());
        for &index in columns {
            let field = self.schema.field(index);
            let column = Arc::new(Column::new(field.name(), index));
            let expr = cast(column, &planned, field.data_type().clone())
                .map_err(|e| self.failed(format!("column {}: {e}", field.name())))?;
            exprs.push((expr, field.name().clone()));
        }
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }
}
