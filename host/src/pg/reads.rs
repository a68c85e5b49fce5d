//! Reads whose rows a Postgres client takes its own way: `COPY ... TO
//! STDOUT` (`copy.rs` parses and encodes it), cursors (`cursors.rs` holds
//! them) and an extended-protocol Execute with a row limit. Each read is a
//! streamed job of the session's caller started here, under the same rules
//! as any read (its refusals included), and named for `SHOW
//! lakehost.last_query_id`.
//!
//! Where a client leaves a read before its last row, it says what it meant:
//! at a pause it asked for (an Execute's row limit reached, a cursor between
//! FETCHes) it is the client's stop on purpose and the job ends SUCCEEDED
//! with the rows it took; while rows are being sent (its connection broke)
//! the job ends FAILED, "the client went away" (`query::execute`).

use std::sync::Arc;

use futures::{Stream, StreamExt as _, stream};
use pgwire::{
    api::{
        ClientInfo,
        portal::Format,
        results::{FieldInfo, Response, Tag},
    },
    error::PgWireResult,
    messages::data::DataRow,
};

use super::{
    copy, cursors,
    cursors::{Cursor, CursorCommand, Cursors},
    statements::{LakeStatements, fields_of, rows_response},
};
use crate::pg::{
    cancel::Running,
    session::{LastQuery, in_block},
    sqlstate::{self, error, error_of},
};
use crate::{
    auth::LakeCaller,
    query::{execute::ClientReading, service::StreamedRows},
    store::queries::Delivery,
};

/// The session's running-statement slot, which its backend key cancels.
pub(super) fn running_of<C: ClientInfo>(client: &C) -> Option<Arc<Running>> {
    client
        .session_extensions()
        .get::<Arc<Running>>()
        .map(|running| Arc::clone(&*running))
}

/// Why a COPY or a cursor of a statement that is not a read is refused.
const NOT_A_READ: &str = "COPY TO and cursors read the rows of a query: name a SELECT (COPY \
     (SELECT ...) TO STDOUT, DECLARE c CURSOR FOR SELECT ...); run other statements on their own";

impl LakeStatements {
    /// Refuses a statement that would wait for a place under the caller's
    /// caps that the session's own open cursors hold: it would wait on
    /// itself.
    pub(super) fn room_beside_cursors<C: ClientInfo>(&self, client: &C) -> PgWireResult<()> {
        let open = client
            .session_extensions()
            .get::<Cursors>()
            .map_or(0, |cursors| cursors.count());
        let query = &self.state.config.query;
        let cap = query.max_running_per_caller.min(query.max_running_per_org);
        if open > 0 && open >= cap {
            return Err(error(
                "53400",
                format!(
                    "this session's {open} open cursors hold the {cap} statements a caller may run                      at once (query.max_running_per_caller): CLOSE a cursor, or COMMIT, first"
                ),
            ));
        }
        Ok(())
    }

    /// `sql` started as a streamed read of `caller`, named as the session's
    /// last query; `None` for a statement that is not a read.
    pub(super) async fn start_read<C: ClientInfo>(
        &self,
        client: &C,
        caller: &LakeCaller,
        sql: &str,
    ) -> PgWireResult<Option<StreamedRows>> {
        let streamed = self
            .state
            .queries
            .stream_if_read(caller, sql, Delivery::PgWire)
            .await
            .map_err(error_of)?;
        if let Some(streamed) = &streamed {
            client
                .session_extensions()
                .insert(LastQuery(streamed.id.clone()));
        }
        Ok(streamed)
    }

    /// `COPY ... TO STDOUT`: its read's rows as CopyData.
    pub(super) async fn copy<C: ClientInfo>(
        &self,
        client: &C,
        sql: &str,
    ) -> PgWireResult<Response> {
        let copy = copy::copy_out(sql)?;
        self.room_beside_cursors(client)?;
        let caller = self.caller(client, "query:write").await?;
        let Some(streamed) = self.start_read(client, &caller, &copy.sql).await? else {
            return Err(error("0A000", NOT_A_READ));
        };
        let running = running_of(client).map(|running| running.start(&caller, &streamed.id));
        let mut batches = streamed
            .batches
            .map(move |batch| {
                let _running = &running;
                batch.map_err(sqlstate::stopped)
            })
            .boxed();
        // The first batch before the CopyOutResponse: an error the read
        // meets at its start ends the statement as any error does, not a
        // copy under way.
        let first = batches.next().await;
        if let Some(Err(e)) = first {
            return Err(e);
        }
        let batches = stream::iter(first).chain(batches);
        copy::copy_response(&streamed.schema, batches, &copy.options)
    }

    /// A cursor command: DECLARE starts its read, FETCH and MOVE take rows
    /// of it, CLOSE ends it.
    pub(super) async fn cursor<C: ClientInfo>(
        &self,
        client: &C,
        command: CursorCommand,
        format: &Format,
    ) -> PgWireResult<Response> {
        let cursors = client
            .session_extensions()
            .get_or_insert_with(Cursors::default);
        match command {
            CursorCommand::Declare {
                name,
                binary,
                query,
            } => {
                if !in_block(client) {
                    return Err(error(
                        "25P01",
                        "DECLARE CURSOR can only be used in transaction blocks",
                    ));
                }
                cursors.check_new(&name)?;
                self.room_beside_cursors(client)?;
                let caller = self.caller(client, "query:write").await?;
                let Some(streamed) = self.start_read(client, &caller, &query).await? else {
                    return Err(error("42601", NOT_A_READ));
                };
                let cursor = Cursor::new(streamed.batches, streamed.reading);
                cursors.open(name, streamed.id, streamed.schema, binary, cursor);
                Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
            }
            CursorCommand::Fetch {
                name,
                count,
                discard: true,
            } => {
                let mut cursor = cursors.get(&name)?.lock().await;
                let mut moved = 0u64;
                while let Some(batch) = cursor.next_rows(count.map(|n| n - moved)).await {
                    moved += batch.map_err(sqlstate::stopped)?.num_rows() as u64;
                }
                Ok(Response::Execution(
                    Tag::new("MOVE").with_rows(moved as usize),
                ))
            }
            CursorCommand::Fetch {
                name,
                count,
                discard: false,
            } => {
                let open = cursors.get(&name)?;
                // Cancellable by the session's backend key while it fetches.
                let caller = self.caller(client, "query:write").await?;
                let running = running_of(client).map(|running| running.start(&caller, &open.id));
                let cursor = open.lock().await;
                // Pulled as the client is sent them: no FETCH holds more
                // than the read's batches in flight.
                let state = (cursor, count, running);
                let batches = stream::unfold(state, |(mut cursor, left, running)| async move {
                    let batch = cursor.next_rows(left).await?;
                    let left = match (&batch, left) {
                        (Ok(batch), Some(left)) => Some(left - batch.num_rows() as u64),
                        _ => left,
                    };
                    Some((batch.map_err(sqlstate::stopped), (cursor, left, running)))
                });
                let mut response = rows_response(&open.schema, batches, &open.format(format))?;
                if let Response::Query(rows) = &mut response {
                    rows.command_tag = "FETCH".to_string();
                }
                Ok(response)
            }
            CursorCommand::Close(Some(name)) => {
                cursors.close(&name)?;
                Ok(Response::Execution(Tag::new("CLOSE CURSOR")))
            }
            CursorCommand::Close(None) => {
                cursors.close_all();
                Ok(Response::Execution(Tag::new("CLOSE CURSOR ALL")))
            }
        }
    }
}

/// The columns a cursor command or a COPY answers with (extended protocol's
/// Describe): a FETCH its cursor's, the others none (COPY's rows are
/// CopyData).
pub(super) fn describe<C: ClientInfo>(
    client: &C,
    sql: &str,
    format: &Format,
) -> PgWireResult<Vec<FieldInfo>> {
    match cursors::command_of(sql) {
        Some(Ok(CursorCommand::Fetch {
            name,
            discard: false,
            ..
        })) => {
            let cursors = client
                .session_extensions()
                .get_or_insert_with(Cursors::default);
            let open = cursors.get(&name)?;
            fields_of(&open.schema, &open.format(format))
        }
        Some(Err(e)) => Err(e),
        _ => Ok(Vec::new()),
    }
}

/// The columns of the open cursor `name` (its rows' format: text unless
/// BINARY), `None` when no cursor has that name.
pub(super) fn cursor_fields<C: ClientInfo>(
    client: &C,
    name: &str,
) -> Option<PgWireResult<Vec<FieldInfo>>> {
    let open = client
        .session_extensions()
        .get::<Cursors>()?
        .get(name)
        .ok()?;
    Some(fields_of(&open.schema, &open.format(&Format::UnifiedText)))
}

/// `response`'s rows as an Execute of `max_rows` at a time takes them: a
/// client that leaves them at such a pause (the portal closed, the
/// transaction synced, the connection ended) stops on purpose, with the
/// rows it took (`reading`). Any other response, or no row limit, as is.
pub(super) fn paused_rows(response: Response, max_rows: usize, reading: ClientReading) -> Response {
    let Response::Query(mut rows) = response else {
        return response;
    };
    if max_rows == 0 {
        return Response::Query(rows);
    }
    let pause = PauseWatch {
        reading,
        max_rows: max_rows as u64,
        taken: 0,
        ended: false,
    };
    let data = std::mem::replace(&mut rows.data_rows, Box::pin(stream::empty()));
    rows.data_rows = Box::pin(watched(data, pause));
    Response::Query(rows)
}

/// Counts the rows a row-limited Execute takes; dropped at a pause before
/// the end, the client's stop on purpose.
struct PauseWatch {
    reading: ClientReading,
    max_rows: u64,
    taken: u64,
    ended: bool,
}

impl PauseWatch {
    /// The client took every row.
    fn ended(&mut self) {
        self.ended = true;
    }
}

impl Drop for PauseWatch {
    fn drop(&mut self) {
        if !self.ended && self.taken > 0 && self.taken.is_multiple_of(self.max_rows) {
            self.reading.stop_on_purpose();
        }
    }
}

fn watched(
    rows: impl Stream<Item = PgWireResult<DataRow>> + Send + Unpin + 'static,
    pause: PauseWatch,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send + 'static {
    stream::unfold((rows, pause), |(mut rows, mut pause)| async move {
        match rows.next().await {
            Some(row) => {
                pause.taken += 1;
                pause.reading.took(1);
                Some((row, (rows, pause)))
            }
            None => {
                pause.ended();
                None
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(max_rows: u64, taken: u64, ended: bool) -> ClientReading {
        let reading = ClientReading::default();
        drop(PauseWatch {
            reading: reading.clone(),
            max_rows,
            taken,
            ended,
        });
        reading
    }

    #[test]
    fn only_a_read_left_at_a_pause_it_asked_for_is_stopped_on_purpose() {
        assert!(watch(2, 2, false).stopped().is_some());
        assert!(watch(2, 4, false).stopped().is_some());
        // Mid-page (the connection broke while rows were sent), before any
        // row, or read to its end: not the client's stop.
        assert!(watch(2, 3, false).stopped().is_none());
        assert!(watch(2, 0, false).stopped().is_none());
        assert!(watch(2, 2, true).stopped().is_none());
    }
}
