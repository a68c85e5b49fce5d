//! `ARRAY(subquery)`, which DataFusion does not plan, as the `array_agg`
//! subquery it is (`rewrite.rs` calls [`array_of_rows`] on each).

use datafusion::sql::sqlparser::ast;

use super::rewrite::{filled, taken};

/// `ARRAY(SELECT e FROM ... [ORDER BY o])` as `(SELECT array_agg(e ORDER BY
/// o) FROM ...)`, which DataFusion plans (correlated too, as psql's `\du`
/// asks for each role's groups). An empty subquery is NULL here where
/// Postgres has an empty array; tools show both as nothing.
///
/// `ARRAY(SELECT e FROM unnest(a) x)` (psql's `\d+` lists a table's
/// TOAST options so) is a NULL array: DataFusion cannot read an outer
/// row's array as a relation, and the catalog holds no storage options
/// (`pg_class.reloptions` is NULL, see `overlay.rs`), whose array Postgres
/// too leaves NULL once `||` meets the table's own NULL options.
pub(super) fn array_of_rows(query: &mut ast::Query) -> Option<ast::Expr> {
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    if let [from] = select.from.as_slice()
        && let ast::TableFactor::Table {
            name,
            args: Some(_),
            ..
        } = &from.relation
        && name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .is_some_and(|ident| ident.value.eq_ignore_ascii_case("unnest"))
    {
        return filled(
            "CAST(lakehost_slot AS TEXT[])",
            ast::Expr::Value(ast::Value::Null.with_empty_span()),
        );
    }
    let [item] = select.projection.as_mut_slice() else {
        return None;
    };
    let (ast::SelectItem::UnnamedExpr(value) | ast::SelectItem::ExprWithAlias { expr: value, .. }) =
        item
    else {
        return None;
    };
    let element = taken(value);
    let order_by = query.order_by.take();
    let mut aggregated = filled("array_agg(lakehost_slot)", element.clone())?;
    if let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(mut order),
        ..
    }) = order_by
        && let ast::Expr::Function(function) = &mut aggregated
        && let ast::FunctionArguments::List(list) = &mut function.args
    {
        // `ORDER BY 1` is the element itself.
        for key in &mut order {
            if matches!(&key.expr, ast::Expr::Value(v)
                if v.value == ast::Value::Number("1".to_string(), false))
            {
                key.expr = element.clone();
            }
        }
        list.clauses
            .push(ast::FunctionArgumentClause::OrderBy(order));
    }
    *value = aggregated;
    Some(ast::Expr::Subquery(Box::new(query.clone())))
}
