//! Parameters bound to a prepared statement (`DoPut` of
//! `CommandPreparedStatementQuery`, as ADBC's and JDBC's `execute(sql,
//! params)` send them). The answer is a new handle holding the original
//! statement and the rows bound to it (as Arrow IPC), so executing it again
//! with new values binds them to the original statement, each binding
//! replacing the last; nothing is kept between calls, and any replica reads
//! the handle. When the statement runs, its values are inlined as their
//! exact literals by `query::parameters` (never re-read from text): one row
//! into any statement, several into an `INSERT ... VALUES (?, ...)`, which
//! becomes one INSERT of all the rows (written all or none).

use std::ops::Deref;

use arrow_flight::{
    decode::FlightRecordBatchStream, error::FlightError, sql::server::PeekableFlightDataStream,
};
use datafusion::{
    arrow::{
        array::RecordBatch,
        compute::concat_batches,
        ipc::{reader::StreamReader, writer::StreamWriter},
    },
    common::ScalarValue,
};
use futures::{StreamExt as _, TryStreamExt as _};
use tonic::{Code, Status};

use super::status::bounded;
use crate::query::parameters::{self, ParameterError, Placeholders};

/// The most bytes of parameter data read for one binding.
const MAX_PARAMETER_BYTES: usize = 1 << 20;

/// What starts a handle with bound values (a statement never starts with
/// a NUL); the original statement's length and text, then the rows.
const BOUND_HANDLE: &[u8] = b"\0lakehost-bound-v1\0";

impl From<ParameterError> for Status {
    fn from(e: ParameterError) -> Self {
        bounded(Code::InvalidArgument, e.to_string())
    }
}

/// How many values `sql` takes (`?` or `$n`).
pub fn count(sql: &str) -> Result<usize, Status> {
    Ok(parameters::count(
        sql,
        Placeholders::NumberedOrQuestionMarks,
    )?)
}

fn not_ours() -> Status {
    Status::invalid_argument("the prepared statement handle is not lakehost's")
}

/// A prepared statement as its handle names it: the original statement
/// and the rows last bound to it. It reads as the SQL it runs (its values
/// inlined), the SQL a statement's run is given.
#[derive(Debug)]
pub struct PreparedStatement {
    original: String,
    bound: Option<RecordBatch>,
    runs: String,
}

impl PreparedStatement {
    /// The statement a handle names: plain SQL (as created), or the SQL with
    /// the rows a `DoPut` bound.
    pub fn of_handle(handle: &[u8]) -> Result<Self, Status> {
        let Some(rest) = handle.strip_prefix(BOUND_HANDLE) else {
            let sql = String::from_utf8(handle.to_vec()).map_err(|_| not_ours())?;
            return Ok(Self {
                runs: sql.clone(),
                original: sql,
                bound: None,
            });
        };
        let (length, rest) = rest.split_first_chunk::<4>().ok_or_else(not_ours)?;
        let length = usize::try_from(u32::from_be_bytes(*length)).map_err(|_| not_ours())?;
        let (sql, ipc) = rest.split_at_checked(length).ok_or_else(not_ours)?;
        let sql = String::from_utf8(sql.to_vec()).map_err(|_| not_ours())?;
        let mut reader = StreamReader::try_new(ipc, None).map_err(|_| not_ours())?;
        let rows = reader
            .next()
            .ok_or_else(not_ours)?
            .map_err(|_| not_ours())?;
        Self::bound(sql, rows)
    }

    /// `sql` with `rows` bound: refused here when they do not fit it.
    fn bound(sql: String, rows: RecordBatch) -> Result<Self, Status> {
        let runs = inline(&sql, &rows)?;
        Ok(Self {
            original: sql,
            bound: Some(rows),
            runs,
        })
    }

    /// The handle naming this statement.
    fn handle(&self) -> Result<Vec<u8>, Status> {
        let Some(rows) = &self.bound else {
            return Ok(self.original.clone().into_bytes());
        };
        let length = u32::try_from(self.original.len())
            .map_err(|_| Status::invalid_argument("the statement is too long"))?;
        let mut handle = BOUND_HANDLE.to_vec();
        handle.extend_from_slice(&length.to_be_bytes());
        handle.extend_from_slice(self.original.as_bytes());
        let encode = |handle: &mut Vec<u8>| {
            let mut writer = StreamWriter::try_new(handle, &rows.schema())?;
            writer.write(rows)?;
            writer.finish()
        };
        encode(&mut handle).map_err(|e| {
            bounded(
                Code::InvalidArgument,
                format!("the parameters cannot be kept: {e}"),
            )
        })?;
        Ok(handle)
    }
}

impl Deref for PreparedStatement {
    type Target = str;

    /// The SQL it runs: the statement with its bound values inlined.
    fn deref(&self) -> &str {
        &self.runs
    }
}

/// The rows of parameter values a `DoPut` sends, as one batch.
pub async fn row_of(stream: PeekableFlightDataStream) -> Result<RecordBatch, Status> {
    rows_if_any(stream)
        .await?
        .ok_or_else(|| Status::invalid_argument("no parameter values were sent"))
}

/// The rows of parameter values a `DoPut` sends, as one batch; `None` when
/// it sends none (an update without parameters).
pub async fn rows_if_any(stream: PeekableFlightDataStream) -> Result<Option<RecordBatch>, Status> {
    let mut batches = FlightRecordBatchStream::new_from_flight_data(
        stream.map_err(|status| FlightError::Tonic(Box::new(status))),
    );
    let mut rows = Vec::new();
    let mut bytes = 0;
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(|e| {
            bounded(
                Code::InvalidArgument,
                format!("the parameters are not Arrow record batches: {e}"),
            )
        })?;
        bytes += batch.get_array_memory_size();
        if bytes > MAX_PARAMETER_BYTES {
            return Err(Status::invalid_argument(format!(
                "the parameters are larger than {MAX_PARAMETER_BYTES} bytes"
            )));
        }
        if batch.num_rows() > 0 {
            rows.push(batch);
        }
    }
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    concat_batches(&first.schema(), &rows)
        .map(Some)
        .map_err(|e| {
            bounded(
                Code::InvalidArgument,
                format!("the parameter batches differ: {e}"),
            )
        })
}

/// The handle of `prepared`'s original statement with `rows` bound (any
/// values bound before are replaced).
pub fn bind(prepared: &PreparedStatement, rows: &RecordBatch) -> Result<Vec<u8>, Status> {
    PreparedStatement::bound(prepared.original.clone(), rows.clone())?.handle()
}

/// `sql` with the values of `rows` inlined, one per column in order.
fn inline(sql: &str, rows: &RecordBatch) -> Result<String, Status> {
    parameters::inline_rows(
        sql,
        Placeholders::NumberedOrQuestionMarks,
        (rows.num_rows(), rows.num_columns()),
        |row, index| {
            let value = ScalarValue::try_from_array(rows.column(index), row).map_err(|e| {
                bounded(
                    Code::InvalidArgument,
                    format!("parameter {}: {e}", index + 1),
                )
            })?;
            Ok(parameters::literal(&value)?)
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        ArrayRef, BooleanArray, Date32Array, Float64Array, Int64Array, NullArray, StringArray,
    };

    use super::*;

    fn rows(columns: Vec<ArrayRef>) -> RecordBatch {
        RecordBatch::try_from_iter(
            columns
                .into_iter()
                .enumerate()
                .map(|(i, column)| (format!("p{i}"), column)),
        )
        .unwrap()
    }

    fn prepared(sql: &str) -> PreparedStatement {
        PreparedStatement::of_handle(sql.as_bytes()).unwrap()
    }

    #[test]
    fn a_row_becomes_exact_literals_at_the_placeholders() {
        let values = rows(vec![
            Arc::new(Int64Array::from(vec![-7])),
            Arc::new(StringArray::from(vec!["a''b"])),
            Arc::new(BooleanArray::from(vec![Some(true)])),
            Arc::new(Date32Array::from(vec![19_000])),
            Arc::new(NullArray::new(1)),
            Arc::new(Float64Array::from(vec![f64::NEG_INFINITY])),
        ]);
        let handle = bind(&prepared("SELECT 0-?, ?, ?, ?, ?, ?"), &values).unwrap();
        let bound = PreparedStatement::of_handle(&handle).unwrap();
        assert_eq!(
            &*bound,
            "SELECT 0- (-7) ,  'a''''b' ,  TRUE ,  arrow_cast('2022-01-08', 'Date32') ,  NULL ,  \
             arrow_cast('-inf', 'Float64') "
        );
        assert_eq!(bound.original, "SELECT 0-?, ?, ?, ?, ?, ?");
        let too_few = bind(
            &prepared("SELECT ?, ?"),
            &rows(vec![Arc::new(Int64Array::from(vec![1]))]),
        );
        assert_eq!(too_few.unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(count("SELECT ?, '?', ?").unwrap(), 2);
    }

    #[test]
    fn binding_again_replaces_the_values() {
        let one = |v: i64| rows(vec![Arc::new(Int64Array::from(vec![v]))]);
        let first = bind(&prepared("SELECT ?"), &one(1)).unwrap();
        let first = PreparedStatement::of_handle(&first).unwrap();
        let second = bind(&first, &one(2)).unwrap();
        assert_eq!(
            &*PreparedStatement::of_handle(&second).unwrap(),
            "SELECT  (2) "
        );
        // A handle that is not one lakehost made is refused.
        let mut forged = BOUND_HANDLE.to_vec();
        forged.extend_from_slice(&[0, 0, 0, 99]);
        assert!(PreparedStatement::of_handle(&forged).is_err());
    }

    #[test]
    fn several_rows_fill_one_insert_and_nothing_else() {
        let two = rows(vec![
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec![Some("it's"), None])),
        ]);
        let handle = bind(&prepared("INSERT INTO t VALUES (?, ?)"), &two).unwrap();
        assert_eq!(
            &*PreparedStatement::of_handle(&handle).unwrap(),
            "INSERT INTO t VALUES ( (1) ,  'it''s' ), ( (2) ,  NULL )"
        );
        let refused = bind(&prepared("SELECT ?, ?"), &two).unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().contains("INSERT ... VALUES"),
            "{refused:?}"
        );
    }
}
