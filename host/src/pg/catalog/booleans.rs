//! A boolean compared with a quoted literal (`ix.indisprimary = 'f'`, as
//! SQLAlchemy 1.4's inspector asks for a table's indexes): Postgres reads
//! the literal as a boolean (`'t'`, `'true'`, `'f'`, `'no'`, ...);
//! DataFusion has no comparison of a boolean with text. Planned before
//! DataFusion's planners see it ([`BooleanLiterals`]), where the other
//! side's type is known: a text column compared with `'f'` (`relkind =
//! 'f'`, a foreign table) stays text.

use datafusion::{
    arrow::datatypes::DataType,
    common::{DFSchema, Result, ScalarValue, plan_err},
    logical_expr::{
        Expr, ExprSchemable as _,
        planner::{ExprPlanner, PlannerResult, RawBinaryExpr},
    },
    sql::sqlparser::ast::BinaryOperator,
};

/// Postgres' boolean input: `t`, `true`, `yes`, `on`, `1` and their
/// negations, in any case and with spaces around.
fn boolean_of(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The planner of `boolean = 'text'` (and `<>`, either way round).
#[derive(Debug)]
pub struct BooleanLiterals;

/// `literal` as the boolean it spells, when it is a string literal and
/// `other` (of `schema`) is a boolean; `None` when not such a comparison.
fn as_boolean(literal: &Expr, other: &Expr, schema: &DFSchema) -> Option<Result<Expr>> {
    let Expr::Literal(ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)), _) =
        literal
    else {
        return None;
    };
    // A column of an outer query has no type here: left as it is.
    if !other
        .get_type(schema)
        .is_ok_and(|data_type| data_type == DataType::Boolean)
    {
        return None;
    }
    Some(match boolean_of(text) {
        Some(value) => Ok(Expr::Literal(ScalarValue::Boolean(Some(value)), None)),
        None => plan_err!("invalid input syntax for type boolean: \"{text}\""),
    })
}

impl ExprPlanner for BooleanLiterals {
    fn plan_binary_op(
        &self,
        mut expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if !matches!(expr.op, BinaryOperator::Eq | BinaryOperator::NotEq) {
            return Ok(PlannerResult::Original(expr));
        }
        if let Some(right) = as_boolean(&expr.right, &expr.left, schema) {
            expr.right = right?;
        } else if let Some(left) = as_boolean(&expr.left, &expr.right, schema) {
            expr.left = left?;
        }
        Ok(PlannerResult::Original(expr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_boolean_input_is_read() {
        assert_eq!(boolean_of("f"), Some(false));
        assert_eq!(boolean_of(" TRUE "), Some(true));
        assert_eq!(boolean_of("off"), Some(false));
        assert_eq!(boolean_of("maybe"), None);
    }
}
