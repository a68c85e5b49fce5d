//! Session commands over the Postgres protocol: BEGIN, COMMIT, ROLLBACK,
//! SET, SHOW and `SELECT version()` are answered here and never become jobs
//! (lakehost has no transactions: each statement is its own query, so a
//! transaction block is accepted and does nothing but hold the session's
//! cursors, which its end closes). `SHOW lakehost.last_query_id` names the
//! session's last query job for REST.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::stream;
use pgwire::{
    api::{
        ClientInfo, Type,
        results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag},
    },
    error::PgWireResult,
};

use super::{code_tokens, cursors::Cursors, settings, sqlstate::error, startup::SERVER_VERSION};

/// The id of the session's last query job (`SHOW lakehost.last_query_id`).
pub(super) struct LastQuery(pub(super) String);

/// Whether the session is in a transaction block (BEGIN ran, COMMIT or
/// ROLLBACK did not yet): cursors are declared only there.
#[derive(Default)]
struct TransactionBlock(AtomicBool);

/// Whether the session is in a transaction block.
pub(super) fn in_block<C: ClientInfo>(client: &C) -> bool {
    client
        .session_extensions()
        .get::<TransactionBlock>()
        .is_some_and(|block| block.0.load(Ordering::Relaxed))
}

/// What a session command that ran (`answer`) does to the session: BEGIN
/// opens a transaction block; COMMIT and ROLLBACK end it and close its
/// cursors (none is held past its transaction).
pub(super) fn ran<C: ClientInfo>(client: &C, answer: &PgWireResult<Response>) {
    let extensions = client.session_extensions();
    let block = extensions.get_or_insert_with(TransactionBlock::default);
    match answer {
        Ok(Response::TransactionStart(_)) => block.0.store(true, Ordering::Relaxed),
        Ok(Response::TransactionEnd(_)) => {
            block.0.store(false, Ordering::Relaxed);
            if let Some(cursors) = extensions.get::<Cursors>() {
                cursors.close_all();
            }
        }
        _ => {}
    }
}

/// A result of text columns (psql reads every value as text; booleans are
/// `t` and `f`).
fn text_response(columns: &[&str], rows: Vec<Vec<Option<String>>>) -> PgWireResult<Response> {
    let fields = Arc::new(
        columns
            .iter()
            .map(|name| FieldInfo::new(name.to_string(), None, None, Type::TEXT, FieldFormat::Text))
            .collect::<Vec<_>>(),
    );
    let mut encoded = Vec::with_capacity(rows.len());
    for row in rows {
        let mut encoder = DataRowEncoder::new(fields.clone());
        for value in &row {
            encoder.encode_field(value)?;
        }
        encoded.push(Ok(encoder.take_row()));
    }
    Ok(Response::Query(QueryResponse::new(
        fields,
        stream::iter(encoded),
    )))
}

/// Whether `sql` holds one statement: no `;` in code but trailing ones.
fn one_statement(sql: &str) -> bool {
    use datafusion::sql::sqlparser::tokenizer::Token;
    let Ok(code) = code_tokens(sql) else {
        return false;
    };
    let last_code = code
        .iter()
        .rposition(|token| !matches!(token, Token::SemiColon))
        .unwrap_or(0);
    !code[..last_code]
        .iter()
        .any(|token| matches!(token, Token::SemiColon))
}

/// The answer to a session command, `None` for a statement to run (also
/// text that holds more than one statement: the query service refuses it).
pub(super) fn session_command<C: ClientInfo>(
    client: &C,
    sql: &str,
) -> Option<PgWireResult<Response>> {
    if !one_statement(sql) {
        return None;
    }
    let text = sql.trim().trim_end_matches(';').trim();
    let lower = text.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let answer = match words.as_slice() {
        ["begin", ..] | ["start", "transaction", ..] => {
            Response::TransactionStart(Tag::new("BEGIN"))
        }
        ["commit", ..] | ["end", ..] => Response::TransactionEnd(Tag::new("COMMIT")),
        ["rollback", "to", ..] => Response::Execution(Tag::new("ROLLBACK")),
        ["rollback", ..] | ["abort", ..] => Response::TransactionEnd(Tag::new("ROLLBACK")),
        ["savepoint", ..] => Response::Execution(Tag::new("SAVEPOINT")),
        ["release", ..] => Response::Execution(Tag::new("RELEASE")),
        ["set", ..] | ["reset", ..] => Response::Execution(Tag::new("SET")),
        ["show", name @ ..] => return Some(show(client, &name.join(" "))),
        ["select", "version()"] | ["select", "pg_catalog.version()"] => {
            let version = format!(
                "PostgreSQL {SERVER_VERSION} (lakehost {}, Apache DataFusion)",
                env!("CARGO_PKG_VERSION")
            );
            return Some(text_response(&["version"], vec![vec![Some(version)]]));
        }
        _ => return None,
    };
    Some(Ok(answer))
}

/// `SHOW name`: a server setting (`settings.rs`), or the session's last
/// query id.
fn show<C: ClientInfo>(client: &C, name: &str) -> PgWireResult<Response> {
    let value = match name {
        "lakehost.last_query_id" => client
            .session_extensions()
            .get::<LastQuery>()
            .map(|last| last.0.clone())
            .unwrap_or_default(),
        // The SQL standard's spelling of `SHOW transaction_isolation`.
        "transaction isolation level" => settings::TRANSACTION_ISOLATION.to_string(),
        _ => match settings::setting(name) {
            Some(setting) => setting.value.to_string(),
            None => {
                return Err(error(
                    "42704",
                    format!("unrecognized configuration parameter \"{name}\""),
                ));
            }
        },
    };
    let column = name.rsplit(' ').next().unwrap_or(name);
    text_response(&[column], vec![vec![Some(value)]])
}
