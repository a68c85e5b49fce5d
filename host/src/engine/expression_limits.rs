//! Caps on how deep and how large the expressions of one SQL statement may be,
//! checked on the parsed statement before anything plans it.
//!
//! The SQL parser's recursion limit covers parentheses and subqueries, but a
//! chain such as `1+1+...+1` or `a = 0 OR a = 1 OR ...` parses in a loop into a
//! left-deep tree, and planning, optimising and evaluating that tree recurse
//! once per term. A 2 KB chain overflowed a worker thread's stack and took the
//! whole process down. Every path that turns caller-supplied SQL into a plan
//! (queries, check_sum keys, daily SQL steps) calls [`check_text`] before
//! parsing and [`check`] on the parsed statement.
//!
//! Two steps, because the parsed tree is a hazard by itself: dropping (or
//! walking) a 100,000-term chain recurses 100,000 times. The text check counts
//! operators (symbols and keywords) with the tokenizer, which is iterative:
//! every level of a chain the parser builds in its loop costs at least one
//! operator, and everything else it builds recursively is bounded by its own
//! recursion limit, so a statement that passes cannot parse into a tree deeper
//! than [`MAX_OPERATORS`] plus that limit, which drops safely on a 2 MiB stack.
//! The tree check then applies the real caps, never descending deeper than
//! them.
//!
//! Relations nest as expressions do: each JOIN (or comma), each CTE reading
//! the one before and each UNION, INTERSECT or EXCEPT adds a level to the
//! plan, and a 2,000-table chain of any of them overflowed the stack the same
//! way. The tree check counts table references; set operations, which parse
//! into a left-deep tree of their own, are counted in the text.
//!
//! Types nest too, and the parser, the planner and Arrow build and walk them
//! recursively: `CAST(NULL AS ARRAY<ARRAY<...>>)` (or `INT[][]...`, or
//! `STRUCT<a STRUCT<...>>`) 3,000 levels deep, or `arrow_cast(x, 'List(List(
//! ...))')`, overflowed the stack while parsing. The text check measures the
//! type syntax before parsing; the tree check the type strings of
//! `arrow_cast` and `arrow_try_cast`.
//!
//! And one GROUP BY can ask for exponentially many groupings: `CUBE` of 30
//! columns is 2^30 grouping sets, which the planner expanded at submission,
//! holding the request and 15 GB of memory outside any query's pool. The
//! tree check counts the sets each GROUP BY expands to.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::{
    ast::{
        Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, GroupByWithModifier,
        Query, Select, SetExpr, Statement, TableFactor, Value, Visit, Visitor,
    },
    dialect::GenericDialect,
    keywords::Keyword,
    tokenizer::{Token, Tokenizer},
};

/// The deepest expression nesting accepted: a chain of this many operators,
/// or this many levels of nested calls and subqueries. Chosen so that
/// planning and running the deepest accepted expression fits comfortably in
/// a 2 MiB thread stack (tested in `tests/.../query_limits.rs`), the smallest
/// one lakehost's code runs on.
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// The most expression nodes one statement may hold (a 20,000-value IN list
/// counts about 20,000): bounds planning time and memory, not the stack.
pub const MAX_EXPRESSION_NODES: usize = 100_000;

/// The most relations one statement may combine: table references (tables,
/// subqueries, VALUES, table functions, CTEs read) and, counted apart, set
/// operations (UNION, INTERSECT, EXCEPT).
pub const MAX_RELATIONS: usize = 256;

/// The deepest type a statement may name: `ARRAY<ARRAY<INT>>` is 2 levels
/// (the same cap as an uploaded parquet file's schema).
pub const MAX_TYPE_DEPTH: usize = crate::load::parquet_schema_depth::MAX_SCHEMA_DEPTH;

/// The most grouping sets one GROUP BY may expand to: CUBE of n columns is
/// 2^n, ROLLUP n+1, GROUPING SETS what it lists, and several multiply.
pub const MAX_GROUPING_SETS: u64 = 4096;

/// The most operators (symbols such as `+` or `::`, and keywords such as
/// `OR` or `IS`) one statement's text may hold; literals, names, commas and
/// parentheses do not count. Checked before parsing.
pub const MAX_OPERATORS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpressionLimitError {
    #[error(
        "the statement has more than {MAX_OPERATORS} operators and keywords; split the statement"
    )]
    TooManyOperators,
    #[error(
        "the statement's expressions nest more than {MAX_EXPRESSION_DEPTH} levels deep \
         (long chains such as a OR b OR c ... count one level per operator); \
         use IN (...) lists or split the statement"
    )]
    TooDeep,
    #[error(
        "the statement has more than {MAX_EXPRESSION_NODES} expression nodes; split the statement"
    )]
    TooLarge,
    #[error(
        "the statement combines more than {MAX_RELATIONS} tables, subqueries or set operations \
         (JOIN, UNION, a chain of CTEs ...); split the statement"
    )]
    TooManyRelations,
    #[error("the statement names a type nesting more than {MAX_TYPE_DEPTH} levels deep")]
    TypeTooDeep,
    #[error(
        "a GROUP BY expands to more than {MAX_GROUPING_SETS} grouping sets (CUBE of n columns \
         is 2^n); group by fewer columns"
    )]
    TooManyGroupingSets,
}

/// Refuses SQL text with more than [`MAX_OPERATORS`] operators, before any
/// parser builds a tree of it. Text the tokenizer cannot read passes: the
/// parser reports it.
pub fn check_text(sql: &str) -> Result<(), ExpressionLimitError> {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    let operators = tokens.iter().filter(|token| is_operator(token)).count();
    if operators > MAX_OPERATORS {
        return Err(ExpressionLimitError::TooManyOperators);
    }
    let set_operations = tokens
        .iter()
        .filter(|token| is_set_operation(token))
        .count();
    if set_operations > MAX_RELATIONS {
        return Err(ExpressionLimitError::TooManyRelations);
    }
    if type_depth(&tokens) > MAX_TYPE_DEPTH {
        return Err(ExpressionLimitError::TypeTooDeep);
    }
    Ok(())
}

/// How deep the type syntax of a token stream nests: `<` after ARRAY, STRUCT
/// or MAP opens a level and `>` (or `>>`) closes it; each `[]` after a type
/// adds one more. Stops counting once past the cap.
fn type_depth(tokens: &[Token]) -> usize {
    let mut tokens = tokens
        .iter()
        .filter(|token| !matches!(token, Token::Whitespace(_)))
        .peekable();
    let mut open = 0usize;
    let mut deepest = 0usize;
    let mut brackets = 0usize;
    let mut after_constructor = false;
    while let Some(token) = tokens.next() {
        match token {
            Token::Lt if after_constructor => open += 1,
            Token::Gt => open = open.saturating_sub(1),
            Token::ShiftRight => open = open.saturating_sub(2),
            Token::LBracket if tokens.peek().is_some_and(|next| **next == Token::RBracket) => {
                tokens.next();
                brackets += 1;
                deepest = deepest.max(open + brackets);
                after_constructor = false;
                continue;
            }
            _ => {}
        }
        brackets = 0;
        deepest = deepest.max(open);
        after_constructor = is_type_constructor(token);
        if deepest > MAX_TYPE_DEPTH {
            break;
        }
    }
    deepest
}

/// ARRAY, STRUCT or MAP: a `<` after one opens a type.
fn is_type_constructor(token: &Token) -> bool {
    matches!(
        token,
        Token::Word(word) if matches!(word.keyword, Keyword::ARRAY | Keyword::STRUCT | Keyword::MAP)
    )
}

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

/// UNION, INTERSECT, EXCEPT or MINUS: each adds a level to the left-deep tree
/// the parser builds in a loop.
fn is_set_operation(token: &Token) -> bool {
    matches!(
        token,
        Token::Word(word) if word.quote_style.is_none()
            && matches!(
                word.keyword,
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT | Keyword::MINUS
            )
    )
}

/// Whether a token can join two operands into a deeper expression: any symbol
/// but separators, and any keyword (names and literals cannot).
fn is_operator(token: &Token) -> bool {
    match token {
        Token::Word(word) => word.keyword != Keyword::NoKeyword && word.quote_style.is_none(),
        Token::EOF
        | Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::TripleSingleQuotedString(_)
        | Token::TripleDoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::TripleSingleQuotedByteStringLiteral(_)
        | Token::TripleDoubleQuotedByteStringLiteral(_)
        | Token::SingleQuotedRawStringLiteral(_)
        | Token::DoubleQuotedRawStringLiteral(_)
        | Token::TripleSingleQuotedRawStringLiteral(_)
        | Token::TripleDoubleQuotedRawStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::UnicodeStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Comma
        | Token::Whitespace(_)
        | Token::LParen
        | Token::RParen
        | Token::SemiColon => false,
        _ => true,
    }
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

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::{dialect::GenericDialect, parser::Parser};

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
}
