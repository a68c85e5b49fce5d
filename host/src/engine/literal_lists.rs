//! Lists as tools write them: `x = ANY(ARRAY[1, 2])` (SQLAlchemy, psycopg's
//! `= ANY(%s)` with a list, Superset's filters). DataFusion plans it as
//! `array_has(make_array(1, 2), x)`, and `make_array` is a bounded function
//! the optimizer treats as volatile (`bounded_functions`), so the predicate
//! never reaches the scan: the access decision in `provider.rs` then saw no
//! filter on `service_client_id` and refused a list of the caller's own
//! clients. This analyzer rule rewrites such a call into `x IN (1, 2)`,
//! which the scan prunes by and the access decision reads, as it does for a
//! list written with IN.
//!
//! Only where just truth matters: a WHERE or HAVING predicate, through AND
//! and OR from its root (there NULL and false both drop the row, so
//! `array_has`'s and IN's answers for a NULL agree), with every element a
//! non-NULL literal that converts to the needle's type and back unchanged.
//! Anywhere else (a projection, under NOT, a CASE) the call stays as it is.

use datafusion::{
    common::{
        DFSchema, Result, ScalarValue,
        config::ConfigOptions,
        tree_node::{Transformed, TransformedResult as _},
    },
    logical_expr::{
        BinaryExpr, Expr, ExprSchemable as _, LogicalPlan, Operator, expr::ScalarFunction, lit,
        logical_plan::Filter,
    },
    optimizer::AnalyzerRule,
};

/// Rewrites `array_has(<literal list>, x)` in filters into `x IN (...)`.
#[derive(Debug, Default)]
pub struct LiteralLists;

impl AnalyzerRule for LiteralLists {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| match plan {
            LogicalPlan::Filter(filter) => {
                let schema = filter.input.schema().clone();
                let predicate = in_truth_position(filter.predicate, &schema)?;
                if !predicate.transformed {
                    return Ok(Transformed::no(LogicalPlan::Filter(Filter::try_new(
                        predicate.data,
                        filter.input,
                    )?)));
                }
                Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(
                    predicate.data,
                    filter.input,
                )?)))
            }
            other => Ok(Transformed::no(other)),
        })
        .data()
    }

    fn name(&self) -> &str {
        "literal_lists"
    }
}

/// `expr`, a predicate whose NULL counts as false, with its literal-list
/// calls rewritten through AND and OR.
fn in_truth_position(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: op @ (Operator::And | Operator::Or),
            right,
        }) => {
            let left = in_truth_position(*left, schema)?;
            let right = in_truth_position(*right, schema)?;
            let transformed = left.transformed || right.transformed;
            let expr = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(left.data),
                op,
                Box::new(right.data),
            ));
            Ok(Transformed::new_transformed(expr, transformed))
        }
        Expr::ScalarFunction(call) if is_array_has(&call) => {
            match in_list(&call.args[0], &call.args[1], schema)? {
                Some(rewritten) => Ok(Transformed::yes(rewritten)),
                None => Ok(Transformed::no(Expr::ScalarFunction(call))),
            }
        }
        other => Ok(Transformed::no(other)),
    }
}

fn is_array_has(call: &ScalarFunction) -> bool {
    call.args.len() == 2 && ["array_has", "list_has", "array_contains"].contains(&call.func.name())
}

/// `needle IN (...)` of the elements of `haystack`, when it is a list of
/// non-NULL literals each of which converts exactly to the needle's type.
fn in_list(haystack: &Expr, needle: &Expr, schema: &DFSchema) -> Result<Option<Expr>> {
    let Some(values) = literal_elements(haystack) else {
        return Ok(None);
    };
    if values.is_empty() || values.iter().any(ScalarValue::is_null) {
        return Ok(None);
    }
    let needle_type = needle.get_type(schema)?;
    let exact = |value: ScalarValue| {
        let converted = value.cast_to(&needle_type).ok()?;
        let back = converted.cast_to(&value.data_type()).ok()?;
        (back == value).then(|| lit(converted))
    };
    let list: Option<Vec<Expr>> = values.into_iter().map(exact).collect();
    Ok(list.map(|list| needle.clone().in_list(list, false)))
}

/// The elements of `ARRAY[...]` / `make_array(...)` of literals, or of a
/// list literal (a bound array parameter).
fn literal_elements(haystack: &Expr) -> Option<Vec<ScalarValue>> {
    use datafusion::arrow::array::Array as _;
    match haystack {
        Expr::ScalarFunction(call) if call.func.name() == "make_array" => call
            .args
            .iter()
            .map(|arg| match arg {
                Expr::Literal(value, _) => Some(value.clone()),
                _ => None,
            })
            .collect(),
        Expr::Literal(ScalarValue::List(list), _) if list.len() == 1 && list.is_valid(0) => {
            let elements = list.value(0);
            (0..elements.len())
                .map(|i| ScalarValue::try_from_array(&elements, i).ok())
                .collect()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::{
        arrow::datatypes::{DataType, Field, Schema},
        logical_expr::{col, not},
    };

    use super::*;

    fn schema() -> DFSchema {
        DFSchema::try_from(Schema::new(vec![Field::new(
            "service_client_id",
            DataType::Int64,
            true,
        )]))
        .unwrap()
    }

    fn array_has(haystack: Expr, needle: Expr) -> Expr {
        datafusion::functions_nested::expr_fn::array_has(haystack, needle)
    }

    fn make_array(values: Vec<Expr>) -> Expr {
        datafusion::functions_nested::expr_fn::make_array(values)
    }

    fn rewritten(expr: Expr) -> Expr {
        in_truth_position(expr, &schema()).unwrap().data
    }

    #[test]
    fn a_literal_list_in_a_predicate_becomes_in() {
        let client = col("service_client_id");
        let any = array_has(make_array(vec![lit(1i64), lit(901i64)]), client.clone());
        assert_eq!(
            rewritten(any.clone()),
            client.clone().in_list(vec![lit(1i64), lit(901i64)], false)
        );
        // Through AND and OR; an Int32 literal converts exactly.
        let either = any
            .clone()
            .or(array_has(make_array(vec![lit(2i32)]), client.clone()));
        assert_eq!(
            rewritten(either),
            client
                .clone()
                .in_list(vec![lit(1i64), lit(901i64)], false)
                .or(client.clone().in_list(vec![lit(2i64)], false))
        );
        // A bound list parameter (a list literal).
        let list = ScalarValue::List(Arc::new(
            datafusion::arrow::array::ListArray::from_iter_primitive::<
                datafusion::arrow::datatypes::Int64Type,
                _,
                _,
            >(vec![Some(vec![Some(1), Some(2)])]),
        ));
        assert_eq!(
            rewritten(array_has(lit(list), client.clone())),
            client.clone().in_list(vec![lit(1i64), lit(2i64)], false)
        );
    }

    #[test]
    fn anything_else_stays_as_it_is() {
        let client = col("service_client_id");
        for kept in [
            // Under NOT, NULL and false differ.
            not(array_has(make_array(vec![lit(1i64)]), client.clone())),
            // A NULL element, a column element, a value that is not exact.
            array_has(
                make_array(vec![lit(1i64), lit(ScalarValue::Int64(None))]),
                client.clone(),
            ),
            array_has(make_array(vec![lit(1i64), client.clone()]), client.clone()),
            array_has(make_array(vec![lit(1.5f64)]), client.clone()),
        ] {
            assert_eq!(rewritten(kept.clone()), kept);
        }
    }
}
