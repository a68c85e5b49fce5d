//! Rewrites of a parsed catalog statement into what DataFusion plans:
//! `to_regtype`, `_pg_expandarray`, `LIKE ... ESCAPE`, scalar subqueries
//! (see [`rewrite`]).
//! They work on the parsed tree; the few expressions they add come from
//! lakehost's own templates.

use std::{collections::HashSet, ops::ControlFlow};

use datafusion::sql::sqlparser::{
    ast::{self, Statement, visit_expressions, visit_expressions_mut},
    dialect::PostgreSqlDialect,
    parser::Parser,
};

use super::{array_subqueries, arrays::EXPAND_ARRAY};
use crate::query::parameters::quoted;

/// The identifier a template's slot is.
const SLOT: &str = "lakehost_slot";

/// `template` (SQL of lakehost's, holding the identifier `lakehost_slot`)
/// parsed, its slot replaced by `value`. Nothing a client sent is printed
/// and parsed again: a parse of nested subqueries can take exponential
/// time, and what was parsed once within the expression caps stays as it
/// is.
pub(super) fn filled(template: &str, value: ast::Expr) -> Option<ast::Expr> {
    let mut expr = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(template)
        .and_then(|mut parser| parser.parse_expr())
        .ok()?;
    let mut value = Some(value);
    let _ = visit_expressions_mut(&mut expr, |slot| {
        if matches!(slot, ast::Expr::Identifier(ident) if ident.value == SLOT)
            && let Some(value) = value.take()
        {
            *slot = value;
        }
        ControlFlow::<()>::Continue(())
    });
    value.is_none().then_some(expr)
}

/// `expr` moved out of its place (NULL left there).
pub(super) fn taken(expr: &mut ast::Expr) -> ast::Expr {
    std::mem::replace(expr, ast::Expr::Value(ast::Value::Null.with_empty_span()))
}

/// What DataFusion cannot plan, rewritten into what it can:
/// - `to_regtype('name')`: the subquery of `pg_type` Postgres' function
///   answers (the type's oid, or NULL);
/// - `_pg_expandarray(a)`, a set-returning function, as `unnest` of its
///   elements and positions (`arrays.rs`); `(expression).field` as
///   `(expression)['field']`;
/// - `generate_subscripts(a, 1)` (SQLAlchemy's key positions) as the
///   positions `_pg_expandarray` gives; `ARRAY(subquery)` as an
///   `array_agg` subquery (`array_subqueries.rs`);
/// - `pg_get_viewdef(oid)` as the view's SELECT from `pg_views`;
/// - `'name'::regproc` as the function's name (see [`regproc_lookup`]);
/// - `LIKE p ESCAPE 'c'` (SQLAlchemy escapes with `/`): DataFusion only
///   knows `\`, so `c` in the pattern becomes `\` (and a `\` there a
///   literal one);
/// - a scalar subquery's value as `first_value(...)`: DataFusion plans a
///   correlated scalar subquery only when it aggregates (SQLAlchemy's
///   inspector sends them; Postgres would fail on a second row, and the
///   catalog's have at most one);
/// - a literal column repeating an earlier one's name, named apart
///   (`output_names.rs`);
/// - a correlated scalar subquery inside CASE as NULL: DataFusion cannot
///   decorrelate it there. SQLAlchemy's inspector asks that way for a
///   column's default, identity and collation, which a lake's columns do
///   not have, so NULL is the answer Postgres would give.
pub fn rewrite(statement: &mut Statement) {
    super::output_names::distinct(statement);
    let _ = visit_expressions_mut(statement, |expr| {
        match expr {
            ast::Expr::Subquery(query) => {
                if let Some(name) = regproc_lookup(query) {
                    if let Some(unqualified) =
                        filled("(parse_ident(lakehost_slot))[-1]", taken(name))
                    {
                        *expr = unqualified;
                    }
                } else {
                    first_row(query);
                }
            }
            ast::Expr::CompoundFieldAccess { root, access_chain } => {
                field_names_as_strings(root, access_chain);
            }
            ast::Expr::Case { .. } => {
                let _ = visit_expressions_mut(expr, |inner| {
                    if let ast::Expr::Subquery(query) = inner
                        && is_correlated(query)
                    {
                        *inner = ast::Expr::Value(ast::Value::Null.with_empty_span());
                    }
                    ControlFlow::<()>::Continue(())
                });
            }
            ast::Expr::Function(function) if is_named(function, "array") => {
                if let ast::FunctionArguments::Subquery(query) = &mut function.args
                    && let Some(aggregated) = array_subqueries::array_of_rows(query)
                {
                    *expr = aggregated;
                }
            }
            ast::Expr::Function(function) if is_named(function, "generate_subscripts") => {
                // The catalog's arrays have one dimension (SQLAlchemy binds
                // its 1 as a parameter).
                if let ast::FunctionArguments::List(list) = &mut function.args
                    && let [
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(array)),
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(_)),
                    ] = list.args.as_mut_slice()
                    && let Some(subscripts) = filled(
                        &format!("(unnest({EXPAND_ARRAY}(lakehost_slot)))['n']"),
                        taken(array),
                    )
                {
                    *expr = subscripts;
                }
            }
            ast::Expr::Function(function) if is_named(function, "pg_get_viewdef") => {
                // By oid, with or without `pretty`: the SELECT `pg_views` holds.
                if let ast::FunctionArguments::List(list) = &mut function.args
                    && let [
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(oid)),
                        ..,
                    ] = list.args.as_mut_slice()
                    && let Some(definition) = filled(
                        "(SELECT first_value(v.definition) FROM pg_catalog.pg_views v \
                         JOIN pg_catalog.pg_namespace n ON n.nspname = v.schemaname \
                         JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid \
                         AND c.relname = v.viewname WHERE c.oid = lakehost_slot)",
                        taken(oid),
                    )
                {
                    *expr = definition;
                }
            }
            ast::Expr::Function(function) if is_named(function, "_pg_expandarray") => {
                if let ast::FunctionArguments::List(list) = &mut function.args
                    && let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(array))] =
                        list.args.as_mut_slice()
                    && let Some(expanded) = filled(
                        &format!("unnest({EXPAND_ARRAY}(lakehost_slot))"),
                        taken(array),
                    )
                {
                    *expr = expanded;
                }
            }
            ast::Expr::Function(function)
                if function.name.to_string().eq_ignore_ascii_case("to_regtype") =>
            {
                if let ast::FunctionArguments::List(list) = &mut function.args
                    && let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(name))] =
                        list.args.as_mut_slice()
                    && let Some(lookup) = filled(
                        "(SELECT first_value(oid) FROM pg_catalog.pg_type \
                         WHERE typname = lakehost_slot)",
                        taken(name),
                    )
                {
                    *expr = lookup;
                }
            }
            ast::Expr::Like {
                pattern,
                escape_char: escape @ Some(_),
                ..
            }
            | ast::Expr::ILike {
                pattern,
                escape_char: escape @ Some(_),
                ..
            } => {
                if let Some(ast::Value::SingleQuotedString(c)) = escape.as_ref().map(|e| &e.value)
                    && c.chars().count() == 1
                    && c != "\\"
                    && let Some(escaped) = filled(
                        &format!(
                            "replace(replace((lakehost_slot), '\\', '\\\\'), {}, '\\')",
                            quoted(c)
                        ),
                        taken(pattern),
                    )
                {
                    **pattern = escaped;
                    *escape =
                        Some(ast::Value::SingleQuotedString("\\".to_string()).with_empty_span());
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The name in datafusion-pg-catalog's rewrite of `'name'::regproc`,
/// `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'name')`. Its
/// static tables hold a regproc column (`pg_type.typinput`, ...) as the
/// function's name, so a regproc is compared as one: the name without its
/// schema (`'pg_catalog.array_in'::regproc` is `array_in`, as Postgres
/// resolves it), not an oid of another type no column here holds.
fn regproc_lookup(query: &mut ast::Query) -> Option<&mut ast::Expr> {
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let [ast::SelectItem::UnnamedExpr(ast::Expr::Identifier(column))] =
        select.projection.as_slice()
    else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    let ast::TableFactor::Table { name: table, .. } = &from.relation else {
        return None;
    };
    let reads_pg_proc = column.value == "oid"
        && from.joins.is_empty()
        && table.to_string().eq_ignore_ascii_case("pg_catalog.pg_proc");
    match select.selection.as_mut()? {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } if reads_pg_proc
            && matches!(left.as_ref(), ast::Expr::Identifier(name) if name.value == "proname") =>
        {
            Some(right.as_mut())
        }
        _ => None,
    }
}

/// `(expression).field` (a composite's field, Postgres' syntax) as
/// `(expression)['field']`, which DataFusion plans: it reads `.field` only
/// after a column's name. An unquoted field name is lowercase, as in
/// Postgres.
fn field_names_as_strings(root: &ast::Expr, access_chain: &mut [ast::AccessExpr]) {
    let mut after_name = matches!(root, ast::Expr::Identifier(_));
    for access in access_chain {
        match access {
            ast::AccessExpr::Dot(ast::Expr::Identifier(_)) if after_name => {}
            ast::AccessExpr::Dot(ast::Expr::Identifier(ident)) => {
                let name = match ident.quote_style {
                    Some(_) => ident.value.clone(),
                    None => ident.value.to_lowercase(),
                };
                *access = ast::AccessExpr::Subscript(ast::Subscript::Index {
                    index: ast::Expr::Value(ast::Value::SingleQuotedString(name).with_empty_span()),
                });
            }
            _ => after_name = false,
        }
    }
}

/// Whether `function` is `name` (in any schema: `information_schema.` for
/// `_pg_expandarray`).
fn is_named(function: &ast::Function, name: &str) -> bool {
    function
        .name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .is_some_and(|ident| ident.value.eq_ignore_ascii_case(name))
}

/// The names a query's own relations go by: each relation's name, its last
/// part and its alias, lowercase.
#[derive(Default)]
struct OwnRelations(HashSet<String>);

impl ast::Visitor for OwnRelations {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &ast::TableFactor) -> ControlFlow<Self::Break> {
        if let ast::TableFactor::Table { name, alias, .. } = factor {
            self.0.insert(name.to_string().to_ascii_lowercase());
            if let Some(last) = name.0.last() {
                self.0.insert(last.to_string().to_ascii_lowercase());
            }
            if let Some(alias) = alias {
                self.0.insert(alias.name.value.to_ascii_lowercase());
            }
        }
        ControlFlow::Continue(())
    }
}

/// Whether `query` names a column of a relation it does not read itself
/// (`outer.column`).
fn is_correlated(query: &ast::Query) -> bool {
    let mut own = OwnRelations::default();
    let _ = ast::Visit::visit(query, &mut own);
    let mut correlated = false;
    let _ = visit_expressions(query, |expr| {
        if let ast::Expr::CompoundIdentifier(parts) = expr
            && let [qualifier @ .., _] = parts.as_slice()
            && !qualifier.is_empty()
        {
            let qualifier = qualifier
                .iter()
                .map(|part| part.value.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(".");
            if !own.0.contains(&qualifier) {
                correlated = true;
            }
        }
        ControlFlow::<()>::Continue(())
    });
    correlated
}

/// Aggregate functions: a subquery that projects one is left as it is.
const AGGREGATES: [&str; 9] = [
    "count",
    "min",
    "max",
    "sum",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "first_value",
];

/// `(SELECT e FROM ... WHERE ...)` as `(SELECT first_value(e) FROM ...)`,
/// when it has one column, no grouping, ordering or DISTINCT, and `e` does
/// not aggregate already.
fn first_row(query: &mut ast::Query) {
    if query.order_by.is_some() {
        return;
    }
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let ungrouped = matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if !ungrouped || select.distinct.is_some() || select.having.is_some() {
        return;
    }
    let [item] = select.projection.as_mut_slice() else {
        return;
    };
    let value = match item {
        ast::SelectItem::UnnamedExpr(value)
        | ast::SelectItem::ExprWithAlias { expr: value, .. } => value,
        _ => return,
    };
    if let ast::Expr::Function(function) = value
        && AGGREGATES.contains(&function.name.to_string().to_ascii_lowercase().as_str())
    {
        return;
    }
    let first = filled("first_value(lakehost_slot)", taken(value));
    if let Some(first) = first {
        *value = first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::catalog::parse;

    #[test]
    fn to_regtype_and_like_escapes_are_rewritten_for_datafusion() {
        let mut statements = parse(
            "SELECT (SELECT count(*) FROM pg_class) FROM pg_type \
             WHERE (SELECT pg_namespace.nspname FROM pg_namespace \
             WHERE pg_namespace.oid = pg_type.typnamespace) = 'pg_catalog' \
             AND oid = to_regtype('hstore') \
             AND typname NOT LIKE 'pg/_' || '%' ESCAPE '/'",
        )
        .expect("parses");
        rewrite(&mut statements[0]);
        let text = statements[0].to_string();
        assert!(
            text.contains(
                "(SELECT first_value(oid) FROM pg_catalog.pg_type WHERE typname = 'hstore')"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "WHERE (SELECT first_value(pg_namespace.nspname) FROM pg_catalog.pg_namespace"
            ),
            "{text}"
        );
        assert!(
            text.contains("(SELECT count(*) FROM pg_catalog.pg_class"),
            "{text}"
        );
        assert!(
            text.contains(
                r"NOT LIKE replace(replace(('pg/_' || '%'), '\', '\\'), '/', '\') ESCAPE '\'"
            ),
            "{text}"
        );
        let mut statements = parse(
            "SELECT CASE WHEN pg_attribute.atthasdef THEN (SELECT pg_attrdef.adbin \
             FROM pg_attrdef WHERE pg_attrdef.adrelid = pg_attribute.attrelid) ELSE NULL END, \
             CASE WHEN true THEN (SELECT count(*) FROM pg_class) END FROM pg_attribute",
        )
        .expect("parses");
        rewrite(&mut statements[0]);
        let text = statements[0].to_string();
        assert!(text.contains("THEN NULL ELSE NULL END"), "{text}");
        assert!(
            text.contains("THEN (SELECT count(*) FROM pg_catalog.pg_class"),
            "{text}"
        );
    }

    #[test]
    fn set_returning_calls_field_access_and_regproc_casts_are_rewritten() {
        let mut statements = parse(
            "SELECT (information_schema._pg_expandarray(i.indkey)).n AS key_seq, \
             (result.KEYS).x, i.indoption[0], \
             typinput = 'pg_catalog.array_in'::regproc AS is_array, \
             (SELECT count(*) FROM pg_catalog.pg_proc WHERE proname = 'x') AS other \
             FROM pg_catalog.pg_index i, pg_catalog.pg_type",
        )
        .expect("parses");
        rewrite(&mut statements[0]);
        let text = statements[0].to_string();
        assert!(
            text.contains("(unnest(lakehost_expandarray(i.indkey)))['n'] AS key_seq"),
            "{text}"
        );
        assert!(text.contains("(result.KEYS)['x']"), "{text}");
        assert!(text.contains("i.indoption[0]"), "{text}");
        assert!(
            text.contains("typinput = (parse_ident('pg_catalog.array_in'))[-1] AS is_array"),
            "{text}"
        );
        // A lookup of pg_proc that is not the regproc cast's stays a query.
        assert!(
            text.contains("(SELECT count(*) FROM pg_catalog.pg_proc WHERE proname = 'x'"),
            "{text}"
        );
    }
}
