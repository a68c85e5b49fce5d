//! The shape of SQL the staged-sql capability runs: one plain SELECT whose
//! only table is `staged`. No WITH, joins, subqueries, WHERE, set operations
//! or table functions; and a SELECT without GROUP BY must be aggregates only
//! (a check_sum key is "an aggregate over all uploaded rows", never a filter
//! or a row dump). The expression limits apply as to queries. Everything else
//! is refused before it plans.

use datafusion::{
    common::tree_node::{TreeNode, TreeNodeRecursion},
    logical_expr::LogicalPlan,
    sql::sqlparser::ast::{self, GroupByExpr, SetExpr, Statement, TableFactor, Visit, Visitor},
};

use crate::engine::expression_limits::{ExpressionLimitError, ParseFailure, parse_statements};

/// The table name of the staged rows in staged-sql.
pub const STAGED_TABLE: &str = "staged";

/// Why staged-sql refuses a statement; the step is told this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagedSqlError {
    /// Past a cap of the expression limits.
    #[error("refused: {0}")]
    TooComplex(#[from] ExpressionLimitError),
    /// Not SQL the parser reads: its own message.
    #[error("{0}")]
    Syntax(String),
    /// SQL of a shape staged-sql does not run.
    #[error("refused: {0}")]
    Shape(&'static str),
}

/// Whether a plan aggregates anywhere.
pub(super) fn has_aggregate(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::Aggregate(_)) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Whether the statement has a GROUP BY.
pub(super) fn has_group_by(sql: &str) -> bool {
    match parse_statements(sql).ok().as_deref() {
        Some([Statement::Query(query)]) => match query.body.as_ref() {
            SetExpr::Select(select) => match &select.group_by {
                GroupByExpr::Expressions(exprs, _) => !exprs.is_empty(),
                GroupByExpr::All(_) => true,
            },
            _ => false,
        },
        _ => false,
    }
}

/// Finds subqueries anywhere in a statement.
struct SubqueryFinder;

impl Visitor for SubqueryFinder {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &ast::Query) -> std::ops::ControlFlow<()> {
        std::ops::ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &ast::Expr) -> std::ops::ControlFlow<()> {
        match expr {
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
                std::ops::ControlFlow::Break(())
            }
            _ => std::ops::ControlFlow::Continue(()),
        }
    }
}

/// The shape staged-sql accepts: one SELECT over `staged` alone.
pub fn check_staged_sql(sql: &str) -> Result<(), StagedSqlError> {
    let refuse = |why: &'static str| Err(StagedSqlError::Shape(why));
    let statements = parse_statements(sql).map_err(|failure| match failure {
        ParseFailure::TooComplex(limit) => StagedSqlError::TooComplex(limit),
        ParseFailure::Syntax(message) => StagedSqlError::Syntax(message),
    })?;
    let [statement @ Statement::Query(query)] = statements.as_slice() else {
        return refuse("exactly one SELECT statement is accepted");
    };
    crate::engine::expression_limits::check(statement)?;
    if query.with.is_some() {
        return refuse("WITH is not accepted");
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return refuse("only a plain SELECT is accepted");
    };
    if select.selection.is_some() || select.having.is_some() {
        return refuse("WHERE and HAVING are not accepted: aggregates cover all uploaded rows");
    }
    if select.into.is_some() {
        return refuse("SELECT INTO is not accepted");
    }
    let [from] = select.from.as_slice() else {
        return refuse("the only table is staged");
    };
    if !from.joins.is_empty() {
        return refuse("joins are not accepted");
    }
    match &from.relation {
        TableFactor::Table {
            name, args: None, ..
        } if name.to_string().eq_ignore_ascii_case(STAGED_TABLE) => {}
        _ => return refuse("the only table is staged"),
    }
    if statements[0].visit(&mut SubqueryFinder).is_break() {
        return refuse("subqueries are not accepted");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_sql_accepts_plain_selects_over_staged_only() {
        for ok in [
            "SELECT count(*) FROM staged",
            "SELECT sum(fare), count(DISTINCT city) FROM staged",
            "SELECT service_client_id FROM staged GROUP BY service_client_id",
            "select COUNT(*) from STAGED",
        ] {
            assert_eq!(check_staged_sql(ok), Ok(()), "{ok}");
        }
        for refused in [
            "SELECT count(*) FROM staged; DROP TABLE x",
            "WITH s AS (SELECT 1) SELECT count(*) FROM staged",
            "SELECT count(*) FROM staged WHERE fare > 1",
            "SELECT count(*) FROM staged, other",
            "SELECT count(*) FROM staged JOIN other ON true",
            "SELECT count(*) FROM other",
            "SELECT count(*) FROM read_parquet('/etc/passwd')",
            "SELECT (SELECT max(x) FROM other) FROM staged",
            "SELECT count(*) FROM staged UNION SELECT 1",
            "SELECT count(*) FROM staged GROUP BY city HAVING count(*) > 1",
            "COPY staged TO '/tmp/x'",
            "SELECT 1",
        ] {
            assert!(check_staged_sql(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn staged_sql_the_parser_would_backtrack_on_is_refused_within_its_budget() {
        let find = crate::engine::expression_limits::tests::fuzzer_find();
        let refused = check_staged_sql(&find).expect_err("refused").to_string();
        assert!(
            refused.starts_with("refused: the statement takes the SQL parser more than"),
            "{refused}"
        );
        assert!(!has_group_by(&find));
    }
}
