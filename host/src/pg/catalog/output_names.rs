//! Output columns Postgres lets share a name and DataFusion does not:
//! pgjdbc's `getProcedures` selects `NULL, NULL, NULL` (columns "reserved
//! for future use"), which Postgres names `?column?` each. A literal
//! repeating an earlier column's name is named apart (`NULL_2`): clients
//! read such columns by position.

use std::{collections::HashSet, ops::ControlFlow};

use datafusion::sql::sqlparser::ast::{self, Statement, VisitMut as _};

/// Names apart the repeated literal columns of every SELECT in `statement`.
pub fn distinct(statement: &mut Statement) {
    let _ = statement.visit(&mut DistinctNames);
}

struct DistinctNames;

impl ast::VisitorMut for DistinctNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<Self::Break> {
        distinct_in(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

fn distinct_in(body: &mut ast::SetExpr) {
    match body {
        ast::SetExpr::Select(select) => name_apart(&mut select.projection),
        ast::SetExpr::SetOperation { left, right, .. } => {
            distinct_in(left);
            distinct_in(right);
        }
        _ => {}
    }
}

/// Each literal of `projection` whose name an earlier column has, aliased
/// with a name none has.
fn name_apart(projection: &mut [ast::SelectItem]) {
    let names: Vec<String> = projection
        .iter()
        .filter_map(|item| match item {
            ast::SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            ast::SelectItem::UnnamedExpr(expr) => Some(expr.to_string()),
            _ => None,
        })
        .collect();
    let mut seen: HashSet<String> = HashSet::new();
    for item in projection.iter_mut() {
        let ast::SelectItem::UnnamedExpr(expr) = item else {
            if let ast::SelectItem::ExprWithAlias { alias, .. } = item {
                seen.insert(alias.value.clone());
            }
            continue;
        };
        let name = expr.to_string();
        if seen.contains(&name) && matches!(expr, ast::Expr::Value(_)) {
            let alias = (2..)
                .map(|n| format!("{name}_{n}"))
                .find(|alias| !names.contains(alias) && !seen.contains(alias))
                .expect("a free name");
            seen.insert(alias.clone());
            *item = ast::SelectItem::ExprWithAlias {
                expr: expr.clone(),
                alias: ast::Ident::new(alias),
            };
        } else {
            seen.insert(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::catalog::parse;

    #[test]
    fn repeated_literals_are_named_apart() {
        let mut statements =
            parse("SELECT NULL AS a, n.nspname, NULL, NULL, NULL, 0, 0 FROM pg_namespace n")
                .expect("parses");
        distinct(&mut statements[0]);
        assert_eq!(
            statements[0].to_string(),
            "SELECT NULL AS a, n.nspname, NULL, NULL AS NULL_2, NULL AS NULL_3, 0, 0 AS 0_2 \
             FROM pg_catalog.pg_namespace n"
        );
    }
}
