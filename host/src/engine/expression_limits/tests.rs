//! The caps of `expression_limits`, on statements parsed here.

use datafusion::sql::sqlparser::{ast::Statement, dialect::GenericDialect, parser::Parser};

use super::parse::{MeteredDialect, ParseFailure, parse_datafusion_statements, parse_statements};

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

/// The libFuzzer `sql` find: parentheses among 10 nested square brackets,
/// 244 bytes that took the parser 20 million steps (6 s).
pub(crate) fn fuzzer_find() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/corpus/fuzz/sql/timeout-nested-brackets"
    );
    String::from_utf8_lossy(&std::fs::read(path).expect("the seed is checked in")).into_owned()
}

#[test]
fn a_statement_the_parser_backtracks_on_past_its_budget_is_refused() {
    let find = fuzzer_find();
    assert_eq!(check_text(&find), Ok(()), "the text caps alone pass it");
    assert_eq!(
        parse_statements(&find),
        Err(ParseFailure::TooComplex(ExpressionLimitError::ParseTooLong))
    );
    assert_eq!(
        parse_datafusion_statements(&find),
        Err(ParseFailure::TooComplex(ExpressionLimitError::ParseTooLong))
    );
    // CASE around subscripts backtracks too: 12 levels (the bracket cap)
    // take 32,764 steps, 16 levels half a million; 24 would take 2^24.
    let cases = |levels: usize| format!("SELECT {}a.b[ @", "CASE WHEN a.b[".repeat(levels));
    assert!(matches!(
        parse_statements(&cases(MAX_BRACKET_DEPTH - 1)),
        Err(ParseFailure::Syntax(_))
    ));
}

#[test]
fn the_largest_statement_the_caps_pass_parses_within_the_budget() {
    // An IN list of as many values as a statement may hold nodes: about two
    // steps a value.
    let values = (0..MAX_EXPRESSION_NODES - 10)
        .map(|value| value.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!("SELECT * FROM t WHERE a IN ({values})");
    let dialect = MeteredDialect::with_budget(PARSER_STEPS);
    Parser::parse_sql(&dialect, &sql).expect("parses");
    let spent = PARSER_STEPS - dialect.steps_left();
    assert!(spent < PARSER_STEPS / 4, "{spent} steps");
    let parsed = parse_statements(&sql).expect("parses within the caps");
    assert_eq!(check(&parsed[0]), Ok(()));
    // The longest chain the operator cap passes.
    let chain = format!("SELECT {}", chain(MAX_OPERATORS, "+"));
    assert!(parse_statements(&chain).is_ok());
}

#[test]
fn the_metered_dialect_parses_as_the_generic_dialect_does() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut texts = vec![
        "SELECT a.b[1:2], x::int[], ARRAY[1, 2][1], {'a': 1}, MAP {'k': 1} FROM t".to_string(),
        "SELECT date '2024-01-01', interval '1' day, `quoted`, \"q\" FROM t AS x".to_string(),
        "SELECT * EXCEPT (a) FROM t WHERE a @> b AND c LIKE 'x%' GROUP BY ALL".to_string(),
        "SELECT x FROM t1 JOIN (t2 CROSS JOIN t3) ON true LIMIT 1, 2".to_string(),
        "SELECT sum(a) FILTER (WHERE a > 0) OVER w FROM t WINDOW w AS (ORDER BY b)".to_string(),
        "SELECT 1 << 2, 'a' || 'b', trim(BOTH 'x' FROM y), extract(year FROM d)".to_string(),
        "EXPLAIN SELECT 1".to_string(),
        "CREATE TABLE db.t AS SELECT 1 AS a".to_string(),
        "INSERT INTO db.t VALUES (1), (2)".to_string(),
    ];
    let read_dir = |dir: &str| {
        std::fs::read_dir(format!("{root}/{dir}"))
            .expect("corpus folder")
            .map(|entry| std::fs::read(entry.expect("entry").path()).expect("readable"))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect::<Vec<_>>()
    };
    texts.extend(read_dir("tests/corpus/fuzz/sql"));
    for case in read_dir("tests/corpus/sql") {
        let case: toml::Value = toml::from_str(&case).expect("a corpus case");
        texts.extend(
            case.get("sql")
                .and_then(|sql| sql.as_str())
                .map(String::from),
        );
    }
    let mut compared = 0;
    for sql in texts.iter().filter(|sql| check_text(sql).is_ok()) {
        let metered = MeteredDialect::with_budget(PARSER_STEPS);
        let parsed = format!("{:?}", Parser::parse_sql(&metered, sql));
        if metered.spent() {
            continue; // the fuzzer's find: the generic dialect takes seconds
        }
        let generic = format!("{:?}", Parser::parse_sql(&GenericDialect {}, sql));
        assert_eq!(parsed, generic, "{sql}");
        compared += 1;
    }
    assert!(compared > 40, "{compared} statements compared");
}
