//! The checks on a statement's text, before any parser builds a tree of it:
//! how many operators and set operations it holds and how deep its type
//! syntax nests (see the module's header).

use datafusion::sql::sqlparser::{
    dialect::GenericDialect,
    keywords::Keyword,
    tokenizer::{Token, Tokenizer},
};

use super::{
    ExpressionLimitError, MAX_BRACKET_DEPTH, MAX_OPERATORS, MAX_RELATIONS, MAX_TYPE_DEPTH,
};

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
    if bracket_depth(&tokens) > MAX_BRACKET_DEPTH {
        return Err(ExpressionLimitError::BracketsTooDeep);
    }
    Ok(())
}

/// How deep square brackets nest in a token stream, balanced or not: `[`
/// opens a level, `]` closes one.
fn bracket_depth(tokens: &[Token]) -> usize {
    let (mut open, mut deepest) = (0usize, 0usize);
    for token in tokens {
        match token {
            Token::LBracket => {
                open += 1;
                deepest = deepest.max(open);
            }
            Token::RBracket => open = open.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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
