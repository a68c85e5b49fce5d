//! The one way caller SQL is parsed: the text's caps first, then the parser
//! with a budget of steps.
//!
//! The SQL parser backtracks: where one reading of a construct fails, it
//! rewinds and tries another, and a failure deep inside nested constructs is
//! tried again at every level on the way out. Some shapes (compound names,
//! `@` and parentheses inside square brackets) take exponential time that
//! way: 244 bytes held a thread for 6 seconds. No cap on the text can name
//! every such shape, so the parser is metered instead. Every expression it
//! parses, first try or retry, starts with a prefix and every operator it
//! reads asks for the next token's precedence; both go through the dialect,
//! so [`MeteredDialect`] counts them and, past the budget, answers with the
//! parser's own recursion-limit error, which every backtracking point passes
//! up unchanged. Parsing time is then bounded, whatever the text's shape.

use std::cell::Cell;
use std::collections::VecDeque;

use datafusion::sql::{
    parser::{DFParser, Statement as DfStatement},
    sqlparser::{
        ast::{Expr, Statement},
        dialect::{Dialect, GenericDialect},
        parser::{Parser, ParserError},
    },
};

use super::{ExpressionLimitError, PARSER_STEPS, check_text};

/// Why caller SQL did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseFailure {
    /// Past a cap: the text's, or the parser's budget of steps.
    TooComplex(ExpressionLimitError),
    /// Not SQL the parser reads: its own message.
    Syntax(String),
}

/// Parses caller SQL into sqlparser statements, within the caps.
pub fn parse_statements(sql: &str) -> Result<Vec<Statement>, ParseFailure> {
    metered(sql, |dialect| Parser::parse_sql(dialect, sql))
}

/// Parses caller SQL into DataFusion's statements (which add `COPY`,
/// `CREATE EXTERNAL TABLE` and `EXPLAIN`'s options), within the caps.
pub fn parse_datafusion_statements(sql: &str) -> Result<VecDeque<DfStatement>, ParseFailure> {
    metered(sql, |dialect| {
        DFParser::parse_sql_with_dialect(sql, dialect)
    })
}

/// Checks the text, then runs `parse` with a [`MeteredDialect`] of
/// [`PARSER_STEPS`]; a parser's error is the caller's message.
fn metered<T, E: std::fmt::Display>(
    sql: &str,
    parse: impl FnOnce(&dyn Dialect) -> Result<T, E>,
) -> Result<T, ParseFailure> {
    check_text(sql).map_err(ParseFailure::TooComplex)?;
    let dialect = MeteredDialect::with_budget(PARSER_STEPS);
    let parsed = parse(&dialect);
    if dialect.spent() {
        return Err(ParseFailure::TooComplex(ExpressionLimitError::ParseTooLong));
    }
    parsed.map_err(|e| ParseFailure::Syntax(e.to_string()))
}

/// The generic dialect, counting the parser's steps (see the module's
/// header). It tells the parser it is [`GenericDialect`] and answers every
/// question that dialect answers differently from the default; a test
/// parses a corpus with both and compares.
#[derive(Debug)]
pub struct MeteredDialect {
    steps_left: Cell<u64>,
    spent: Cell<bool>,
}

impl MeteredDialect {
    pub fn with_budget(steps: u64) -> Self {
        Self {
            steps_left: Cell::new(steps),
            spent: Cell::new(false),
        }
    }

    /// Whether the parser ran out of steps.
    pub fn spent(&self) -> bool {
        self.spent.get()
    }

    /// The steps still left (tests measure what a statement takes).
    #[cfg(test)]
    pub fn steps_left(&self) -> u64 {
        self.steps_left.get()
    }

    /// Takes one step, or the error that ends the parse.
    fn step(&self) -> Result<(), ParserError> {
        match self.steps_left.get().checked_sub(1) {
            Some(left) => {
                self.steps_left.set(left);
                Ok(())
            }
            None => {
                self.spent.set(true);
                Err(ParserError::RecursionLimitExceeded)
            }
        }
    }
}

/// Answers `$name(&self) -> bool` as [`GenericDialect`] does.
macro_rules! as_generic {
    ($($name:ident),* $(,)?) => {
        $(fn $name(&self) -> bool {
            GenericDialect.$name()
        })*
    };
}

impl Dialect for MeteredDialect {
    fn dialect(&self) -> std::any::TypeId {
        std::any::TypeId::of::<GenericDialect>()
    }

    fn parse_prefix(&self, _parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        self.step().err().map(Err)
    }

    fn get_next_precedence(&self, _parser: &Parser) -> Option<Result<u8, ParserError>> {
        self.step().err().map(Err)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        GenericDialect.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        GenericDialect.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        GenericDialect.is_identifier_part(ch)
    }

    as_generic!(
        supports_unicode_string_literal,
        supports_partition_by_after_order_by,
        supports_array_join_syntax,
        supports_group_by_expr,
        supports_group_by_with_modifier,
        supports_left_associative_joins_without_parens,
        supports_connect_by,
        supports_match_recognize,
        supports_pipe_operator,
        supports_start_transaction_modifier,
        supports_window_function_null_treatment_arg,
        supports_dictionary_syntax,
        supports_window_clause_named_window_reference,
        supports_parenthesized_set_variables,
        supports_select_wildcard_except,
        support_map_literal_syntax,
        allow_extract_custom,
        allow_extract_single_quotes,
        supports_extract_comma_syntax,
        supports_create_view_comment_syntax,
        supports_parens_around_table_factor,
        supports_values_as_table_factor,
        supports_create_index_with_clause,
        supports_explain_with_utility_options,
        supports_limit_comma,
        supports_update_order_by,
        supports_from_first_select,
        supports_projection_trailing_commas,
        supports_asc_desc_in_column_definition,
        supports_try_convert,
        supports_bitwise_shift_operators,
        supports_comment_on,
        supports_load_extension,
        supports_named_fn_args_with_assignment_operator,
        supports_struct_literal,
        supports_empty_projections,
        supports_nested_comments,
        supports_multiline_comment_hints,
        supports_user_host_grantee,
        supports_string_escape_constant,
        supports_array_typedef_with_brackets,
        supports_match_against,
        supports_set_names,
        supports_comma_separated_set_assignments,
        supports_filter_during_aggregation,
        supports_select_wildcard_exclude,
        supports_data_type_signed_suffix,
        supports_interval_options,
        supports_quote_delimited_string,
        supports_select_wildcard_replace,
        supports_select_wildcard_ilike,
        supports_select_wildcard_rename,
        supports_optimize_table,
        supports_install,
        supports_detach,
        supports_prewhere,
        supports_with_fill,
        supports_limit_by,
        supports_interpolate,
        supports_settings,
        supports_select_format,
        supports_comment_optimizer_hint,
        supports_constraint_keyword_without_name,
        supports_key_column_option,
        supports_comma_separated_trim,
        supports_cte_without_as,
        supports_select_item_multi_column_alias,
        supports_xml_expressions,
    );
}
