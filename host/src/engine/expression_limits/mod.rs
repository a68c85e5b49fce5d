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
//!
//! And the parser itself can take exponential time: where a compound name
//! and an operator such as `@` sit inside square brackets
//! (`a.b[c@d.e[...`), a statement that fails to parse deep inside is tried
//! again at every level on the way out, about 2.4 times as long for each
//! bracket. 22 nested brackets in 110 bytes held a thread for 11 seconds
//! (the shape of a libFuzzer `sql` find); the parser's recursion limit stops
//! it only a few levels later. The text check caps how deep square brackets
//! nest, before any parser sees them. But no cap on the text names every
//! shape that backtracks (the fuzzer's own find mixes parentheses into 10
//! brackets: 244 bytes, 6 s), so the parser also runs on a budget of steps
//! ([`PARSER_STEPS`], `parse.rs`). Caller SQL is first parsed through
//! [`parse_statements`] or [`parse_datafusion_statements`] (`classify`, the
//! staged-SQL check, the Postgres listener's split); the planner's own parse
//! of the same text afterwards (`query::prepare`) takes no more steps, since
//! the metered dialect parses as the generic one does (a unit test holds
//! it). The Postgres catalog statements are the exception: they are parsed
//! by datafusion-pg-catalog's parser behind caps of their own on the text
//! (`pg::catalog`: its length and its parentheses' depth).
//!
//! `text.rs` holds the checks on the token stream, `parse.rs` the metered
//! parse, `tree.rs` the checks on the parsed statement.

mod parse;
mod text;
mod tree;

pub use parse::{ParseFailure, parse_datafusion_statements, parse_statements};
pub use text::check_text;
pub use tree::check;

/// The deepest expression nesting accepted: a chain of this many operators,
/// or this many levels of nested calls and subqueries. Chosen so that
/// planning and running the deepest accepted expression fits comfortably in
/// a 2 MiB thread stack, the smallest one lakehost's code runs on (tested in
/// `tests/tests/integration/expression_limits.rs`).
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// The most expression nodes one statement may hold (a 20,000-value IN list
/// counts about 20,000): bounds planning time and memory, not the stack.
pub const MAX_EXPRESSION_NODES: usize = 100_000;

/// The most relations one statement may combine: table references (tables,
/// subqueries, VALUES, table functions, CTEs read) and, counted apart, set
/// operations (UNION, INTERSECT, EXCEPT).
pub const MAX_RELATIONS: usize = 256;

/// The deepest type a statement may name (`ARRAY<ARRAY<INT>>` is 2 levels),
/// and the most levels an uploaded parquet file's schema may nest below its
/// root (a flat file is 1, a struct column 2, a list column 3; `load/`'s
/// footer check). BigQuery allows 15 levels of STRUCT; 32 leaves room for
/// lists and maps around them.
pub const MAX_TYPE_DEPTH: usize = 32;

/// The deepest square brackets (subscripts, array literals) may nest: at 12
/// the measured shape (`a.b[c@d.e[...`) parses in tens of milliseconds, each
/// further level multiplies it by about 2.4. Other shapes grow faster.
pub const MAX_BRACKET_DEPTH: usize = 12;

/// The steps the SQL parser may take on one statement (see `parse.rs`): each
/// expression it starts, first try or retry, and each operator it looks for
/// is a step. Ten per expression node of [`MAX_EXPRESSION_NODES`]: the most
/// a statement that passes the caps needs is about two per node (a
/// 100,000-value IN list). Measured on a debug build, spending the whole
/// budget on a backtracking shape takes 0.2 to 0.5 s.
pub const PARSER_STEPS: u64 = 10 * MAX_EXPRESSION_NODES as u64;

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
        "the statement nests square brackets (subscripts, array literals) more than \
         {MAX_BRACKET_DEPTH} levels deep"
    )]
    BracketsTooDeep,
    #[error(
        "the statement takes the SQL parser more than {PARSER_STEPS} steps to read; nested \
         square brackets, CASE and parentheses cost the most, simplify them"
    )]
    ParseTooLong,
    #[error(
        "a GROUP BY expands to more than {MAX_GROUPING_SETS} grouping sets (CUBE of n columns \
         is 2^n); group by fewer columns"
    )]
    TooManyGroupingSets,
}

#[cfg(test)]
pub(crate) mod tests;
