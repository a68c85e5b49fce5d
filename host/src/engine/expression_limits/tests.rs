//! The caps of `expression_limits`, on statements parsed here.

use datafusion::sql::sqlparser::{ast::Statement, dialect::GenericDialect, parser::Parser};

use super::*;

fn parsed(sql: &str) -> Statement {
    Parser::parse_sql(&GenericDialect {}, sql)
        .expect("parses")
        .pop()
        .expect("one statement")
}

fn chain(terms: usize, op: &str) -> String {
    vec!["1"; terms].join(op)
}

#[test]
fn a_chain_at_the_cap_passes_and_one_more_term_is_refused() {
    // The query is one level; a chain of n terms nests n more (n-1
    // operators above the deepest literal).
    let at_cap = parsed(&format!("SELECT {}", chain(MAX_EXPRESSION_DEPTH - 1, "+")));
    assert_eq!(check(&at_cap), Ok(()));
    let over = parsed(&format!("SELECT {}", chain(MAX_EXPRESSION_DEPTH, "+")));
    assert_eq!(check(&over), Err(ExpressionLimitError::TooDeep));
}

#[test]
fn relations_past_the_cap_are_refused_in_the_text_or_the_tree() {
    let unions = |selects: usize| vec!["SELECT 1"; selects].join(" UNION ALL ");
    assert_eq!(check_text(&unions(MAX_RELATIONS + 1)), Ok(()));
    assert_eq!(
        check_text(&unions(MAX_RELATIONS + 2)),
        Err(ExpressionLimitError::TooManyRelations)
    );
    let commas = |tables: usize| {
        let from = (0..tables).map(|i| format!("t{i}")).collect::<Vec<_>>();
        format!("SELECT 1 FROM {}", from.join(", "))
    };
    assert_eq!(check(&parsed(&commas(MAX_RELATIONS))), Ok(()));
    assert_eq!(
        check(&parsed(&commas(MAX_RELATIONS + 1))),
        Err(ExpressionLimitError::TooManyRelations)
    );
    // A quoted "union" is a name, not a set operation.
    let names = vec!["\"union\""; MAX_RELATIONS + 1].join(", ");
    assert_eq!(check_text(&format!("SELECT {names} FROM t")), Ok(()));
}

#[test]
fn types_past_the_cap_are_refused_before_parsing_or_planning() {
    let nested = |open: &str, close: &str, levels: usize| {
        format!(
            "SELECT CAST(NULL AS {}INT{})",
            open.repeat(levels),
            close.repeat(levels)
        )
    };
    for (open, close) in [("ARRAY<", ">"), ("STRUCT<a ", ">"), ("MAP<INT, ", ">")] {
        assert_eq!(
            check_text(&nested(open, close, MAX_TYPE_DEPTH)),
            Ok(()),
            "{open}"
        );
        for levels in [MAX_TYPE_DEPTH + 1, 1_000] {
            assert_eq!(
                check_text(&nested(open, close, levels)),
                Err(ExpressionLimitError::TypeTooDeep),
                "{open}{levels}"
            );
        }
    }
    let brackets = |levels: usize| format!("SELECT CAST(NULL AS INT{})", "[]".repeat(levels));
    assert_eq!(check_text(&brackets(MAX_TYPE_DEPTH)), Ok(()));
    assert_eq!(
        check_text(&brackets(MAX_TYPE_DEPTH + 1)),
        Err(ExpressionLimitError::TypeTooDeep)
    );
    // Comparisons and array literals are not types.
    let comparisons = (0..100).map(|i| format!("a < {i}")).collect::<Vec<_>>();
    assert_eq!(
        check_text(&format!(
            "SELECT * FROM t WHERE {}",
            comparisons.join(" AND ")
        )),
        Ok(())
    );
    let arrays = vec!["[1, 2]"; 100].join(", ");
    assert_eq!(check_text(&format!("SELECT {arrays}")), Ok(()));
    // arrow_cast's type string.
    let cast = |levels: usize| {
        format!(
            "SELECT arrow_cast(NULL, '{}Int64{}')",
            "List(".repeat(levels),
            ")".repeat(levels)
        )
    };
    assert_eq!(check(&parsed(&cast(MAX_TYPE_DEPTH))), Ok(()));
    assert_eq!(
        check(&parsed(&cast(MAX_TYPE_DEPTH + 1))),
        Err(ExpressionLimitError::TypeTooDeep)
    );
}

#[test]
fn grouping_sets_past_the_cap_are_refused() {
    let cube = |columns: usize| {
        let names = (0..columns).map(|i| format!("c{i}")).collect::<Vec<_>>();
        format!("SELECT count(*) FROM t GROUP BY CUBE({})", names.join(", "))
    };
    assert_eq!(check(&parsed(&cube(12))), Ok(()));
    for columns in [13, 30, 64, 100] {
        assert_eq!(
            check(&parsed(&cube(columns))),
            Err(ExpressionLimitError::TooManyGroupingSets),
            "{columns}"
        );
    }
    // Two cubes multiply; a rollup of many columns is few sets.
    assert_eq!(
        check(&parsed(
            "SELECT 1 FROM t GROUP BY CUBE(a, b, c, d, e, f, g), CUBE(h, i, j, k, l, m)"
        )),
        Err(ExpressionLimitError::TooManyGroupingSets)
    );
    let names = (0..200).map(|i| format!("c{i}")).collect::<Vec<_>>();
    let rollup = format!("SELECT 1 FROM t GROUP BY ROLLUP({})", names.join(", "));
    assert_eq!(check(&parsed(&rollup)), Ok(()));
    // In a subquery and a union too.
    let nested = format!("SELECT * FROM ({}) s", cube(20));
    assert_eq!(
        check(&parsed(&nested)),
        Err(ExpressionLimitError::TooManyGroupingSets)
    );
    let union = format!("SELECT 1 UNION ALL {}", cube(20));
    assert_eq!(
        check(&parsed(&union)),
        Err(ExpressionLimitError::TooManyGroupingSets)
    );
}

#[test]
fn the_reported_crashes_are_refused() {
    let sum = parsed(&format!("SELECT {}", chain(1000, "+")));
    assert_eq!(check(&sum), Err(ExpressionLimitError::TooDeep));
    let ors = (0..1500)
        .map(|i| format!("id = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let filter = parsed(&format!(
        "SELECT * FROM t WHERE service_client_id IN (1,2) AND ({ors})"
    ));
    assert_eq!(check(&filter), Err(ExpressionLimitError::TooDeep));
}

#[test]
fn wide_lists_are_not_deep() {
    let ids = (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>();
    let wide = parsed(&format!("SELECT * FROM t WHERE id IN ({})", ids.join(",")));
    assert_eq!(check(&wide), Ok(()));
}

#[test]
fn operators_are_counted_before_parsing_and_literals_are_not() {
    let at_cap = format!("SELECT {}", vec!["1"; MAX_OPERATORS].join("+"));
    // MAX_OPERATORS - 1 pluses and SELECT.
    assert_eq!(check_text(&at_cap), Ok(()));
    let over = format!("{at_cap} + 1");
    assert_eq!(
        check_text(&over),
        Err(ExpressionLimitError::TooManyOperators)
    );
    let ors = vec!["a = 1"; MAX_OPERATORS].join(" OR ");
    assert_eq!(
        check_text(&format!("SELECT * FROM t WHERE {ors}")),
        Err(ExpressionLimitError::TooManyOperators)
    );
    let values = vec!["(1, 'x', 2.5)"; 50_000].join(", ");
    assert_eq!(
        check_text(&format!("INSERT INTO t VALUES {values}")),
        Ok(())
    );
}

#[test]
fn too_many_nodes_are_refused() {
    let ids = (0..MAX_EXPRESSION_NODES)
        .map(|i| i.to_string())
        .collect::<Vec<_>>();
    let huge = parsed(&format!("SELECT * FROM t WHERE id IN ({})", ids.join(",")));
    assert_eq!(check(&huge), Err(ExpressionLimitError::TooLarge));
}

#[test]
fn nested_subqueries_count_as_levels() {
    let mut sql = "SELECT 1".to_string();
    for _ in 0..20 {
        sql = format!("SELECT * FROM ({sql}) AS s");
    }
    assert_eq!(check(&parsed(&sql)), Ok(()));
}

#[test]
fn square_brackets_past_the_cap_are_refused_before_parsing() {
    // The shape whose failed parse the parser retries at every level (the
    // libFuzzer `sql` target's find): exponential in the depth.
    let failing = |levels: usize| format!("SELECT {}x,,", "a.b[c@d.e[".repeat(levels / 2));
    assert_eq!(
        check_text(&failing(MAX_BRACKET_DEPTH + 2)),
        Err(ExpressionLimitError::BracketsTooDeep)
    );
    let literal = |levels: usize| format!("SELECT {}1{}", "[".repeat(levels), "]".repeat(levels));
    assert_eq!(check_text(&literal(MAX_BRACKET_DEPTH)), Ok(()));
    assert_eq!(
        check_text(&literal(MAX_BRACKET_DEPTH + 1)),
        Err(ExpressionLimitError::BracketsTooDeep)
    );
    // Brackets one after another do not nest: types and subscripts.
    let types = format!("SELECT CAST(NULL AS INT{})", "[]".repeat(MAX_TYPE_DEPTH));
    assert_eq!(check_text(&types), Ok(()));
    let subscripts = format!("SELECT a{} FROM t", "[1]".repeat(100));
    assert_eq!(check_text(&subscripts), Ok(()));
    // At the cap, the failing shape fails fast (no wall-clock assertion:
    // it parses, and is refused by the parser, not by the cap).
    assert_eq!(check_text(&failing(MAX_BRACKET_DEPTH)), Ok(()));
}
