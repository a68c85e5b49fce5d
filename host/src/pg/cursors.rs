//! Cursors over the Postgres protocol: `DECLARE name [BINARY] [NO SCROLL]
//! CURSOR [WITHOUT HOLD] FOR query`, `FETCH`/`MOVE [FORWARD] [n | ALL]
//! [FROM] name` and `CLOSE name | ALL`, as psql's `FETCH_COUNT` and
//! psycopg's named cursors send them.
//!
//! - DECLARE runs its query as a streamed read job (`statements.rs`), under
//!   the same rules as any read; the cursor keeps the job's stream, so a
//!   FETCH pulls only the rows it returns and memory stays bounded by the
//!   stream's few batches in flight, whatever the result's size.
//! - A cursor lives in its transaction block: DECLARE outside one is
//!   25P01 (as Postgres answers for a cursor without hold); COMMIT,
//!   ROLLBACK, CLOSE and the end of the connection end it. WITH HOLD (which
//!   would keep a job's slot past the transaction) and SCROLL or any
//!   backward fetch are refused with what to do instead.
//! - At most [`CURSORS_PER_SESSION`] are open at once: each holds a query
//!   slot and a place under the caller's fair-sharing caps while open, so a
//!   statement that would wait for a place its own session's cursors hold
//!   (`query.max_running_per_caller`, `_per_org`) is refused at once, never
//!   left waiting on itself (`reads::room_beside_cursors`).
//! - A cursor ended before its last row is the client's stop on purpose:
//!   its job ends SUCCEEDED with the rows fetched (`ClientReading`).
//!
//! It never checks access itself: the job does, as for every read.

use std::{collections::HashMap, sync::Arc};

use datafusion::arrow::{datatypes::SchemaRef, record_batch::RecordBatch};
use futures::{StreamExt as _, stream::BoxStream};
use pgwire::{api::portal::Format, error::PgWireResult};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::pg::sqlstate::error;
use crate::query::{execute::ClientReading, service::StreamStop};

/// Cursors a session may hold open at once.
pub const CURSORS_PER_SESSION: usize = 4;

/// Why a backward (or absolute) fetch is refused.
pub const FORWARD_ONLY: &str = "cursor can only scan forward: lakehost cursors are NO SCROLL; \
     use FETCH FORWARD (NEXT, a count or ALL), or run the query again";
/// Why a SCROLL cursor is refused.
pub const SCROLL_REFUSED: &str = "SCROLL cursors are not supported: lakehost cursors read \
     forward only; declare it NO SCROLL (psycopg: scrollable=False or unset)";
/// Why a cursor WITH HOLD is refused.
pub const HOLD_REFUSED: &str = "cursors WITH HOLD are not supported: a lakehost cursor ends \
     with its transaction; fetch its rows before COMMIT (psycopg: withhold=False)";

/// A cursor command, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorCommand {
    Declare {
        name: String,
        binary: bool,
        query: String,
    },
    /// FETCH (`discard`: MOVE) of up to `count` rows (`None`: all).
    Fetch {
        name: String,
        count: Option<u64>,
        discard: bool,
    },
    /// CLOSE a cursor, or all (`None`).
    Close(Option<String>),
}

/// The words of `sql` up to `stop` (a bare word, any case) and the text
/// after it: bare words lowercased, quoted identifiers as written.
fn words(sql: &str, stop: Option<&str>) -> PgWireResult<(Vec<String>, Option<String>)> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let mut words = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok((words, None));
        }
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut name = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) if quoted[i + 1..].starts_with('"') => {
                        name.push('"');
                        chars.next();
                    }
                    Some((i, '"')) => break i + 1,
                    Some((_, c)) => name.push(c),
                    None => return Err(error("42601", "unterminated quoted identifier")),
                }
            };
            words.push(format!("\"{name}"));
            rest = &quoted[end..];
            continue;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = rest[..end].to_ascii_lowercase();
        rest = &rest[end..];
        if stop == Some(word.as_str()) {
            return Ok((words, Some(rest.trim_start().to_string())));
        }
        words.push(word);
    }
}

/// A word as a cursor name: quoted as written, bare lowercased.
fn name_of(word: &str) -> String {
    word.strip_prefix('"').unwrap_or(word).to_string()
}

/// The cursor command `sql` is, `None` for any other statement.
pub fn command_of(sql: &str) -> Option<PgWireResult<CursorCommand>> {
    let first = sql.split_whitespace().next()?.to_ascii_lowercase();
    match first.as_str() {
        "declare" => Some(declare(sql)),
        "fetch" => Some(fetch(sql, false)),
        "move" => Some(fetch(sql, true)),
        "close" => Some(close(sql)),
        _ => None,
    }
}

fn declare(sql: &str) -> PgWireResult<CursorCommand> {
    let (words, query) = words(sql, Some("for"))?;
    let syntax = || {
        error(
            "42601",
            "syntax error in DECLARE: DECLARE name [BINARY] [NO SCROLL] CURSOR [WITHOUT HOLD] FOR query",
        )
    };
    let (Some(query), [_, name, options @ ..]) = (query, words.as_slice()) else {
        return Err(syntax());
    };
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let Some(cursor_at) = options.iter().position(|w| *w == "cursor") else {
        return Err(syntax());
    };
    let (before, after) = (&options[..cursor_at], &options[cursor_at + 1..]);
    let mut binary = false;
    let mut before = before.iter().peekable();
    while let Some(word) = before.next() {
        match *word {
            "binary" => binary = true,
            "asensitive" | "insensitive" => {}
            "no" if before.next_if(|w| **w == "scroll").is_some() => {}
            "scroll" => return Err(error("0A000", SCROLL_REFUSED)),
            _ => return Err(syntax()),
        }
    }
    match after {
        [] | ["without", "hold"] => {}
        ["with", "hold"] => return Err(error("0A000", HOLD_REFUSED)),
        _ => return Err(syntax()),
    }
    if query.is_empty() {
        return Err(syntax());
    }
    Ok(CursorCommand::Declare {
        name: name_of(name),
        binary,
        query,
    })
}

fn fetch(sql: &str, discard: bool) -> PgWireResult<CursorCommand> {
    let (words, _) = words(sql, None)?;
    let verb = if discard { "MOVE" } else { "FETCH" };
    let syntax = || {
        error(
            "42601",
            format!("syntax error in {verb}: {verb} [FORWARD] [count | ALL] [FROM] cursor"),
        )
    };
    let (name, direction) = match words.as_slice() {
        [_, rest @ .., name] => (name_of(name), rest),
        _ => return Err(syntax()),
    };
    let direction: Vec<&str> = direction
        .iter()
        .map(String::as_str)
        .filter(|w| !matches!(*w, "from" | "in"))
        .collect();
    let count = |word: &str| -> PgWireResult<Option<u64>> {
        match word {
            "all" => Ok(None),
            number => match number.parse::<i64>() {
                Ok(n) if n > 0 => Ok(Some(n as u64)),
                Ok(_) => Err(error("55000", FORWARD_ONLY)),
                Err(_) => Err(syntax()),
            },
        }
    };
    let count = match direction.as_slice() {
        [] | ["next"] | ["forward"] => Some(1),
        ["forward", n] => count(n)?,
        [n] if *n == "all" || n.parse::<i64>().is_ok() => count(n)?,
        [
            "prior" | "first" | "last" | "backward" | "absolute" | "relative",
            ..,
        ] => {
            return Err(error("55000", FORWARD_ONLY));
        }
        _ => return Err(syntax()),
    };
    Ok(CursorCommand::Fetch {
        name,
        count,
        discard,
    })
}

fn close(sql: &str) -> PgWireResult<CursorCommand> {
    let (words, _) = words(sql, None)?;
    match words.as_slice() {
        [_, all] if all == "all" => Ok(CursorCommand::Close(None)),
        [_, name] => Ok(CursorCommand::Close(Some(name_of(name)))),
        _ => Err(error("42601", "syntax error in CLOSE: CLOSE cursor | ALL")),
    }
}

/// A cursor's open read: the job's stream and the rest of a batch a FETCH
/// took part of.
pub struct Cursor {
    batches: BoxStream<'static, Result<RecordBatch, StreamStop>>,
    held: Option<RecordBatch>,
    reading: ClientReading,
    ended: bool,
}

impl Drop for Cursor {
    fn drop(&mut self) {
        // Before the stream (its receiver) goes: the client's stop.
        if !self.ended {
            self.reading.stop_on_purpose();
        }
    }
}

impl Cursor {
    pub fn new(
        batches: BoxStream<'static, Result<RecordBatch, StreamStop>>,
        reading: ClientReading,
    ) -> Self {
        Self {
            batches,
            held: None,
            reading,
            ended: false,
        }
    }

    /// The next rows, at most `wanted` (`None`: any number); `None` at the
    /// end; the job's error when it ended short of SUCCEEDED.
    pub async fn next_rows(
        &mut self,
        wanted: Option<u64>,
    ) -> Option<Result<RecordBatch, StreamStop>> {
        if wanted == Some(0) || self.ended {
            return None;
        }
        let batch = loop {
            let batch = match self.held.take() {
                Some(batch) => batch,
                None => match self.batches.next().await {
                    Some(Ok(batch)) => batch,
                    Some(Err(stop)) => {
                        self.ended = true;
                        return Some(Err(stop));
                    }
                    None => {
                        self.ended = true;
                        return None;
                    }
                },
            };
            if batch.num_rows() > 0 {
                break batch;
            }
        };
        let rows = batch.num_rows();
        let taken = match wanted {
            Some(wanted) if (wanted as usize) < rows => {
                let wanted = wanted as usize;
                self.held = Some(batch.slice(wanted, rows - wanted));
                batch.slice(0, wanted)
            }
            _ => batch,
        };
        self.reading.took(taken.num_rows() as u64);
        Some(Ok(taken))
    }
}

/// An open cursor: its columns, its format and its read.
#[derive(Clone)]
pub struct OpenCursor {
    /// The job it reads.
    pub id: String,
    pub schema: SchemaRef,
    pub binary: bool,
    cursor: Arc<Mutex<Cursor>>,
}

impl OpenCursor {
    /// The cursor's read, once no other FETCH of it is under way.
    pub async fn lock(&self) -> OwnedMutexGuard<Cursor> {
        self.cursor.clone().lock_owned().await
    }

    /// The format its rows are sent in: a BINARY cursor's always binary.
    pub fn format(&self, asked: &Format) -> Format {
        match self.binary {
            true => Format::UnifiedBinary,
            false => asked.clone(),
        }
    }
}

/// A session's open cursors, by name.
#[derive(Default)]
pub struct Cursors(std::sync::Mutex<HashMap<String, OpenCursor>>);

impl Cursors {
    /// Whether `name` may be declared: not open, and room for one more.
    pub fn check_new(&self, name: &str) -> PgWireResult<()> {
        let open = self.0.lock().expect("cursors lock");
        if open.contains_key(name) {
            return Err(error("42P03", format!("cursor \"{name}\" already exists")));
        }
        if open.len() >= CURSORS_PER_SESSION {
            return Err(error(
                "53400",
                format!(
                    "a session may hold at most {CURSORS_PER_SESSION} open cursors; CLOSE one first"
                ),
            ));
        }
        Ok(())
    }

    /// Opens cursor `name` on the job `id`'s read.
    pub fn open(&self, name: String, id: String, schema: SchemaRef, binary: bool, cursor: Cursor) {
        let open = OpenCursor {
            id,
            schema,
            binary,
            cursor: Arc::new(Mutex::new(cursor)),
        };
        self.0.lock().expect("cursors lock").insert(name, open);
    }

    /// The open cursor `name`, or 34000 as Postgres answers.
    pub fn get(&self, name: &str) -> PgWireResult<OpenCursor> {
        self.0
            .lock()
            .expect("cursors lock")
            .get(name)
            .cloned()
            .ok_or_else(|| error("34000", format!("cursor \"{name}\" does not exist")))
    }

    /// How many are open.
    pub fn count(&self) -> usize {
        self.0.lock().expect("cursors lock").len()
    }

    /// Closes cursor `name` (34000 when none is open by that name).
    pub fn close(&self, name: &str) -> PgWireResult<()> {
        match self.0.lock().expect("cursors lock").remove(name) {
            Some(_) => Ok(()),
            None => Err(error("34000", format!("cursor \"{name}\" does not exist"))),
        }
    }

    /// Closes them all (CLOSE ALL, the end of the transaction).
    pub fn close_all(&self) {
        let closed = std::mem::take(&mut *self.0.lock().expect("cursors lock"));
        drop(closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(sql: &str) -> String {
        match command_of(sql).expect("a cursor command") {
            Err(pgwire::error::PgWireError::UserError(info)) => info.code,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn psql_and_psycopg_cursor_commands_parse() {
        assert_eq!(
            command_of("DECLARE _psql_cursor NO SCROLL CURSOR FOR\nSELECT 1")
                .unwrap()
                .unwrap(),
            CursorCommand::Declare {
                name: "_psql_cursor".into(),
                binary: false,
                query: "SELECT 1".into()
            }
        );
        assert_eq!(
            command_of(r#"DECLARE "My ""c""" CURSOR WITHOUT HOLD FOR SELECT a FROM t"#)
                .unwrap()
                .unwrap(),
            CursorCommand::Declare {
                name: "My \"c\"".into(),
                binary: false,
                query: "SELECT a FROM t".into()
            }
        );
        assert_eq!(
            command_of("FETCH FORWARD 100 FROM _psql_cursor")
                .unwrap()
                .unwrap(),
            CursorCommand::Fetch {
                name: "_psql_cursor".into(),
                count: Some(100),
                discard: false
            }
        );
        assert_eq!(
            command_of(r#"MOVE ALL IN "c""#).unwrap().unwrap(),
            CursorCommand::Fetch {
                name: "c".into(),
                count: None,
                discard: true
            }
        );
        assert_eq!(
            command_of("fetch c").unwrap().unwrap(),
            CursorCommand::Fetch {
                name: "c".into(),
                count: Some(1),
                discard: false
            }
        );
        assert_eq!(
            command_of("CLOSE ALL").unwrap().unwrap(),
            CursorCommand::Close(None)
        );
        assert!(command_of("SELECT 1").is_none());
    }

    #[test]
    fn scroll_hold_and_backward_fetches_are_refused_clearly() {
        assert_eq!(code("DECLARE c SCROLL CURSOR FOR SELECT 1"), "0A000");
        assert_eq!(code("DECLARE c CURSOR WITH HOLD FOR SELECT 1"), "0A000");
        assert_eq!(code("FETCH BACKWARD 2 FROM c"), "55000");
        assert_eq!(code("FETCH PRIOR FROM c"), "55000");
        assert_eq!(code("FETCH -1 FROM c"), "55000");
        assert_eq!(code("DECLARE c CURSOR"), "42601");
        assert_eq!(code("FETCH"), "42601");
    }
}
