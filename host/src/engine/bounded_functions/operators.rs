//! The ways SQL reaches a growing computation without naming a bounded
//! function, sent through the bounded ones by an analyzer rule that runs
//! after type coercion, before any optimizer folds a constant:
//!
//! - the string concatenation operator `a || b` (a `BinaryExpr` DataFusion
//!   evaluates itself) becomes the bounded [`StringConcatOperator`], with
//!   `||`'s own semantics (NULL if either side is) and column name;
//! - calls the SQL planner builds from its own copies of functions (array
//!   `||` planned as `array_concat`/`array_append`/`array_prepend`, array
//!   literals as `make_array`) are pointed at the session's bounded ones.
//!
//! It must never change what a query returns or what its columns are called:
//! only which (bounded) implementation computes them.

use std::{collections::HashMap, sync::Arc};

use datafusion::{
    arrow::{
        array::ArrayRef,
        compute::kernels::concat_elements::concat_elements_dyn,
        datatypes::{DataType, Field, FieldRef},
    },
    common::{
        Result, ScalarValue,
        config::ConfigOptions,
        plan_err,
        tree_node::{Transformed, TransformedResult as _, TreeNode as _},
    },
    logical_expr::{
        BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator, ReturnFieldArgs,
        ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, expr::ScalarFunction,
        expr_rewriter::NamePreserver,
    },
    optimizer::AnalyzerRule,
};

use super::Bounded;

/// Sends `||` and the planner's own function copies through the session's
/// bounded functions.
#[derive(Debug)]
pub(super) struct BoundedOperators {
    /// The session's bounded functions, by name.
    functions: HashMap<String, Arc<ScalarUDF>>,
    /// `||` of strings and binaries, bounded.
    string_concat: Arc<ScalarUDF>,
}

impl BoundedOperators {
    pub(super) fn new(functions: Vec<Arc<ScalarUDF>>, string_concat: Arc<ScalarUDF>) -> Self {
        Self {
            functions: functions
                .into_iter()
                .map(|f| (f.name().to_string(), f))
                .collect(),
            string_concat,
        }
    }

    fn rewrite_plan(&self, plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        let names = NamePreserver::new(&plan);
        let rewritten = plan.map_expressions(|expr| {
            let name = names.save(&expr);
            Ok(expr
                .transform_up(|e| self.rewrite_expr(e))?
                .update_data(|e| name.restore(e)))
        })?;
        if rewritten.transformed {
            rewritten.map_data(|plan| plan.recompute_schema())
        } else {
            Ok(rewritten)
        }
    }

    fn rewrite_expr(&self, expr: Expr) -> Result<Transformed<Expr>> {
        let call = |func: &Arc<ScalarUDF>, args| {
            Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                func.clone(),
                args,
            )))
        };
        Ok(match expr {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::StringConcat,
                right,
            }) => call(&self.string_concat, vec![*left, *right]),
            Expr::ScalarFunction(function) => match self.functions.get(function.func.name()) {
                Some(bounded) if !function.func.inner().is::<Bounded>() => {
                    call(bounded, function.args)
                }
                _ => Transformed::no(Expr::ScalarFunction(function)),
            },
            other => Transformed::no(other),
        })
    }
}

impl AnalyzerRule for BoundedOperators {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| self.rewrite_plan(node))
            .data()
    }

    fn name(&self) -> &str {
        "bounded_operators"
    }
}

/// `a || b` of two strings or binaries of one type (type coercion made them
/// so), as DataFusion's operator computes it: NULL if either side is.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct StringConcatOperator {
    signature: Signature,
}

impl StringConcatOperator {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for StringConcatOperator {
    fn name(&self) -> &str {
        "||"
    }

    /// The operator's own column name (`a || b`), not a function call's.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [left, right] => Ok(format!("{} || {}", left.schema_name(), right.schema_name())),
            _ => plan_err!("|| takes two operands"),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::FixedSizeBinary(l), DataType::FixedSizeBinary(r)] => {
                Ok(DataType::FixedSizeBinary(l + r))
            }
            [left, right] if left == right => Ok(left.clone()),
            _ => plan_err!(
                "Cannot infer common string type for string concat operation {arg_types:?}"
            ),
        }
    }

    /// NULL only where an operand can be, as the operator's.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(
            self.name(),
            self.return_type(&types)?,
            nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [left, right] = args.args.as_slice() else {
            return plan_err!("|| takes two operands");
        };
        let scalars = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        // Two constants are joined once; the caller makes the rows of it.
        let rows = if scalars { 1 } else { args.number_rows };
        let joined: ArrayRef = concat_elements_dyn(&left.to_array(rows)?, &right.to_array(rows)?)?;
        Ok(match scalars {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&joined, 0)?),
            false => ColumnarValue::Array(joined),
        })
    }
}
