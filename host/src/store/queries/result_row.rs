//! A query's end as its job row stores it: the columns an end writes
//! (`EndColumns`), and a small result's CSV and Arrow copy kept in the row
//! instead of the lake (`query.result_in_store_bytes`,
//! docs/design/small-results.md), read back one form at a time.

use bytes::Bytes;

use super::QueryOutcome;
use crate::store::{Result, Store};

/// A small result's forms kept in its job's row instead of the lake
/// (`query.result_in_store_bytes`, docs/design/small-results.md): its CSV
/// and its typed Arrow copy, each when it was at most that size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultInRow {
    pub csv: Option<Bytes>,
    pub arrow: Option<Bytes>,
}

impl ResultInRow {
    pub fn sizes(&self) -> KeptInRow {
        let size = |bytes: &Option<Bytes>| bytes.as_ref().map(|b| b.len() as i64);
        KeptInRow {
            csv_bytes: size(&self.csv),
            arrow_bytes: size(&self.arrow),
        }
    }
}

/// Which forms of a result its row keeps (`ResultInRow`), by their sizes,
/// as a job is read without the bytes themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptInRow {
    pub csv_bytes: Option<i64>,
    pub arrow_bytes: Option<i64>,
}

/// One form of a result kept in a job's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowForm {
    Csv,
    Arrow,
}

/// The columns an end writes.
#[derive(Clone, Copy)]
pub(super) struct EndColumns<'a> {
    pub(super) state: &'static str,
    pub(super) reason: Option<&'a str>,
    pub(super) path: Option<&'a str>,
    pub(super) rows: Option<i64>,
    pub(super) bytes: Option<i64>,
    pub(super) columns: Option<&'a str>,
    pub(super) reuse_key: Option<&'a str>,
    pub(super) workers: Option<i64>,
    pub(super) in_row: Option<&'a ResultInRow>,
}

impl<'a> EndColumns<'a> {
    /// A final state without a result.
    pub(super) fn without_result(state: &'static str, reason: Option<&'a str>) -> Self {
        Self {
            state,
            reason,
            path: None,
            rows: None,
            bytes: None,
            columns: None,
            reuse_key: None,
            workers: None,
            in_row: None,
        }
    }

    pub(super) fn of(outcome: &'a QueryOutcome) -> Self {
        match outcome {
            QueryOutcome::Succeeded {
                result_path,
                rows,
                bytes,
                columns_json,
                reuse_key,
                workers,
                in_row,
            } => Self {
                state: "SUCCEEDED",
                reason: None,
                path: result_path.as_deref(),
                rows: Some(*rows),
                bytes: Some(*bytes),
                columns: Some(columns_json.as_str()),
                reuse_key: reuse_key.as_deref(),
                workers: *workers,
                in_row: Some(in_row),
            },
            QueryOutcome::Failed { reason } => Self::without_result("FAILED", Some(reason)),
        }
    }

    pub(super) fn csv_in_row(&self) -> Option<&'a [u8]> {
        self.in_row.and_then(|kept| kept.csv.as_deref())
    }

    pub(super) fn arrow_in_row(&self) -> Option<&'a [u8]> {
        self.in_row.and_then(|kept| kept.arrow.as_deref())
    }
}

impl Store {
    /// One form of the result job `id` keeps in its row (`None` when the
    /// lake keeps it, or there is no such job).
    pub async fn result_in_row(&self, id: &str, form: RowForm) -> Result<Option<Bytes>> {
        let column = match form {
            RowForm::Csv => "result_csv",
            RowForm::Arrow => "result_arrow",
        };
        let bytes: Option<Option<Vec<u8>>> =
            sqlx::query_scalar(&format!("SELECT {column} FROM query_jobs WHERE id = $1"))
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        Ok(bytes.flatten().map(Bytes::from))
    }
}
