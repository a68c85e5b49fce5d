//! The checks on a parsed statement: expression depth and size, relations,
//! grouping sets and the type strings of `arrow_cast` (see the module's
//! header). The walk stops at the first cap crossed.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, GroupByWithModifier, Query,
    Select, SetExpr, Statement, TableFactor, Value, Visit, Visitor,
};

use super::{
    ExpressionLimitError, MAX_EXPRESSION_DEPTH, MAX_EXPRESSION_NODES, MAX_GROUPING_SETS,
    MAX_RELATIONS, MAX_TYPE_DEPTH,
};

/// How many grouping sets a GROUP BY expands to (saturating).
fn grouping_sets(group_by: &GroupByExpr) -> u64 {
    let GroupByExpr::Expressions(exprs, modifiers) = group_by else {
        return 1;
    };
    let power_of_two = |n: usize| {
        u32::try_from(n)
            .ok()
            .and_then(|n| 1u64.checked_shl(n))
            .unwrap_or(u64::MAX)
    };
    let sets = exprs.iter().fold(1u64, |sets, expr| {
        sets.saturating_mul(match expr {
            Expr::Cube(columns) => power_of_two(columns.len()),
            Expr::Rollup(columns) => columns.len() as u64 + 1,
            Expr::GroupingSets(listed) => listed.len() as u64,
            _ => 1,
        })
    });
    modifiers.iter().fold(sets, |sets, modifier| {
        sets.saturating_mul(match modifier {
            GroupByWithModifier::Cube => power_of_two(exprs.len()),
            GroupByWithModifier::Rollup => exprs.len() as u64 + 1,
            _ => 1,
        })
    })
}

/// The selects of a query's body (not of its subqueries, which are queries
/// of their own), walked without recursion.
fn selects_of(query: &Query) -> Vec<&Select> {
    let mut selects = Vec::new();
    let mut bodies: Vec<&SetExpr> = vec![&query.body];
    while let Some(body) = bodies.pop() {
        match body {
            SetExpr::Select(select) => selects.push(select.as_ref()),
            SetExpr::SetOperation { left, right, .. } => {
                bodies.extend([left.as_ref(), right.as_ref()])
            }
            _ => {}
        }
    }
    selects
}

/// The functions that read a type from a string argument.
const TYPE_STRING_FUNCTIONS: [&str; 2] = ["arrow_cast", "arrow_try_cast"];

/// How deep the parentheses of an Arrow type string nest (`List(Int64)` is 1).
fn type_string_depth(text: &str) -> usize {
    let mut open = 0usize;
    let mut deepest = 0;
    for character in text.chars() {
        match character {
            '(' => {
                open += 1;
                deepest = deepest.max(open);
            }
            ')' => open = open.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether an expression is `arrow_cast(..., '<type>')` (or try) with a type
/// string past the cap.
fn names_too_deep_a_type(expr: &Expr) -> bool {
    let Expr::Function(function) = expr else {
        return false;
    };
    let name = function.name.to_string().to_ascii_lowercase();
    if !TYPE_STRING_FUNCTIONS
        .iter()
        .any(|f| name == *f || name.ends_with(&format!(".{f}")))
    {
        return false;
    }
    let FunctionArguments::List(list) = &function.args else {
        return false;
    };
    list.args.iter().any(|arg| match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value))) => match &value.value {
            Value::SingleQuotedString(text) | Value::DoubleQuotedString(text) => {
                type_string_depth(text) > MAX_TYPE_DEPTH
            }
            _ => false,
        },
        _ => false,
    })
}

/// Refuses a statement whose expressions nest deeper than
/// [`MAX_EXPRESSION_DEPTH`] or number more than [`MAX_EXPRESSION_NODES`].
pub fn check(statement: &Statement) -> Result<(), ExpressionLimitError> {
    let mut meter = ExpressionMeter::default();
    match statement.visit(&mut meter) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Counts nesting on the way down and back up; stops at the first cap crossed,
/// so the walk's own recursion is bounded by the cap.
#[derive(Default)]
struct ExpressionMeter {
    depth: usize,
    nodes: usize,
    relations: usize,
}

impl ExpressionMeter {
    fn enter(&mut self) -> ControlFlow<ExpressionLimitError> {
        self.depth += 1;
        self.nodes += 1;
        if self.depth > MAX_EXPRESSION_DEPTH {
            return ControlFlow::Break(ExpressionLimitError::TooDeep);
        }
        if self.nodes > MAX_EXPRESSION_NODES {
            return ControlFlow::Break(ExpressionLimitError::TooLarge);
        }
        ControlFlow::Continue(())
    }
}

impl Visitor for ExpressionMeter {
    type Break = ExpressionLimitError;

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Self::Break> {
        if names_too_deep_a_type(expr) {
            return ControlFlow::Break(ExpressionLimitError::TypeTooDeep);
        }
        self.enter()
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<Self::Break> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, _: &TableFactor) -> ControlFlow<Self::Break> {
        self.relations += 1;
        if self.relations > MAX_RELATIONS {
            return ControlFlow::Break(ExpressionLimitError::TooManyRelations);
        }
        ControlFlow::Continue(())
    }

    // A subquery is planned recursively too: it counts as a level.
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Self::Break> {
        if selects_of(query)
            .iter()
            .any(|select| grouping_sets(&select.group_by) > MAX_GROUPING_SETS)
        {
            return ControlFlow::Break(ExpressionLimitError::TooManyGroupingSets);
        }
        self.enter()
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<Self::Break> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}
