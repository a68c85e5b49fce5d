//! Parameters bound to a prepared statement (`DoPut` of
//! `CommandPreparedStatementQuery`, as ADBC's and JDBC's `execute(sql,
//! params)` send them): one Arrow row, its values inlined as SQL literals at
//! the statement's `?` (or `$n`) placeholders by `query::parameters`. The
//! answer is a new handle, the statement with its values, so nothing is kept
//! between calls and the job's SQL shows what ran.

use arrow_flight::{
    decode::FlightRecordBatchStream, error::FlightError, sql::server::PeekableFlightDataStream,
};
use datafusion::{
    arrow::array::RecordBatch, common::ScalarValue, logical_expr::lit, sql::unparser::Unparser,
};
use futures::{StreamExt as _, TryStreamExt as _};
use tonic::{Code, Status};

use super::status::bounded;
use crate::query::parameters::{self, ParameterError, Placeholders};

/// The most bytes of parameter data read for one binding.
const MAX_PARAMETER_BYTES: usize = 1 << 20;

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

/// The one row of parameter values a `DoPut` sends.
pub async fn row_of(stream: PeekableFlightDataStream) -> Result<RecordBatch, Status> {
    let mut batches = FlightRecordBatchStream::new_from_flight_data(
        stream.map_err(|status| FlightError::Tonic(Box::new(status))),
    );
    let mut row: Option<RecordBatch> = None;
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
        if batch.num_rows() == 0 {
            continue;
        }
        if row.is_some() || batch.num_rows() > 1 {
            return Err(Status::invalid_argument(
                "lakehost binds one row of parameters to a statement: execute it once per row",
            ));
        }
        row = Some(batch);
    }
    row.ok_or_else(|| Status::invalid_argument("no parameter values were sent"))
}

/// A value of `row` (column `index`) as a SQL literal.
fn literal(row: &RecordBatch, index: usize) -> Result<String, Status> {
    let value = ScalarValue::try_from_array(row.column(index), 0).map_err(|e| {
        bounded(
            Code::InvalidArgument,
            format!("parameter {}: {e}", index + 1),
        )
    })?;
    let expression = Unparser::default().expr_to_sql(&lit(value)).map_err(|e| {
        bounded(
            Code::InvalidArgument,
            format!("parameter {} has no SQL literal: {e}", index + 1),
        )
    })?;
    Ok(expression.to_string())
}

/// `sql` with the values of `row` inlined, one per column in order.
pub fn bind(sql: &str, row: &RecordBatch) -> Result<String, Status> {
    parameters::inline(
        sql,
        Placeholders::NumberedOrQuestionMarks,
        row.num_columns(),
        |index| literal(row, index),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, BooleanArray, Date32Array, Int64Array, StringArray};

    use super::*;

    fn row(columns: Vec<ArrayRef>) -> RecordBatch {
        RecordBatch::try_from_iter(
            columns
                .into_iter()
                .enumerate()
                .map(|(i, column)| (format!("p{i}"), column)),
        )
        .unwrap()
    }

    #[test]
    fn a_row_becomes_literals_at_the_placeholders() {
        let values = row(vec![
            Arc::new(Int64Array::from(vec![-7])),
            Arc::new(StringArray::from(vec!["it's"])),
            Arc::new(BooleanArray::from(vec![Some(true)])),
            Arc::new(Date32Array::from(vec![19_000])),
            Arc::new(Int64Array::from(vec![None])),
        ]);
        let sql = bind("SELECT 0-?, ?, ?, ?, ?", &values).unwrap();
        assert_eq!(
            sql,
            "SELECT 0- -7 ,  'it''s' ,  true ,  CAST('2022-01-08' AS DATE) ,  NULL "
        );
        let too_few = bind(
            "SELECT ?, ?",
            &row(vec![Arc::new(Int64Array::from(vec![1]))]),
        );
        assert_eq!(too_few.unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(count("SELECT ?, '?', ?").unwrap(), 2);
    }
}
