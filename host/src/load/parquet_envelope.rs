//! The envelope of an uploaded parquet file, checked before any parquet
//! reader sees it: `PAR1` at both ends, a footer length that fits in the
//! file, a schema the readers can build (`parquet_schema_depth`), and
//! column chunks and page indexes that lie between the leading magic and
//! the footer. The parquet crate trusts the footer length it reads (a length
//! past the file's start panics on an overflow in a debug build and wraps in
//! a release one), builds the schema recursively, panics on a negative
//! chunk offset or size and asks the store for whatever range a chunk
//! claims, so a caller's bytes never reach it unchecked.

use datafusion::parquet::{errors::ParquetError, file::metadata::ParquetMetaDataReader};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _, path::Path};

use super::parquet_schema_depth::{SchemaProblem, schema_depth_problem};

const MAGIC: &[u8; 4] = b"PAR1";
/// Leading magic, footer length, trailing magic.
const ENVELOPE_BYTES: u64 = 12;

/// Why a file is not one the parquet readers may see.
#[derive(Debug, thiserror::Error)]
pub enum NotParquet {
    #[error("{size} bytes is too short for a parquet file")]
    TooShort { size: u64 },
    #[error("it does not start with the parquet magic PAR1")]
    NoLeadingMagic,
    #[error("encrypted parquet footers are not supported")]
    Encrypted,
    #[error("it does not end with the parquet magic PAR1")]
    NoTrailingMagic,
    #[error("its footer claims {footer} bytes in a file of {size} bytes")]
    FooterPastStart { footer: u64, size: u64 },
    #[error(transparent)]
    Schema(#[from] SchemaProblem),
    #[error("its footer cannot be read: {0}")]
    Footer(#[source] ParquetError),
    #[error("row group {group}'s column {column} claims bytes outside the file's data")]
    ChunkOutside { group: usize, column: String },
}

/// Why checking a staged file's envelope failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The store did not give its size or its ends.
    #[error(transparent)]
    Read(#[from] object_store::Error),
    #[error("not a parquet file: {0}")]
    NotParquet(#[source] NotParquet),
}

/// Why the bytes at both ends of a file are not a parquet file's, checked
/// from the file's size, its first 4 bytes and its last 8.
pub fn envelope_problem(size: u64, head: &[u8], tail: &[u8]) -> Option<NotParquet> {
    if size < ENVELOPE_BYTES || head.len() < 4 || tail.len() < 8 {
        return Some(NotParquet::TooShort { size });
    }
    if &head[..4] != MAGIC {
        return Some(NotParquet::NoLeadingMagic);
    }
    match &tail[4..8] {
        magic if magic == MAGIC => {}
        b"PARE" => return Some(NotParquet::Encrypted),
        _ => return Some(NotParquet::NoTrailingMagic),
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer + ENVELOPE_BYTES > size {
        return Some(NotParquet::FooterPastStart { footer, size });
    }
    None
}

/// Where the metadata of a file lies whose envelope passed.
pub fn footer_range(size: u64, tail: &[u8]) -> std::ops::Range<u64> {
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    size - 8 - footer..size - 8
}

/// Why the metadata `footer` (of a file whose envelope and schema depth
/// passed) does not describe a file whose data ends at `data_end` (where
/// the footer begins): a column chunk or page index with a negative offset
/// or size, or one reaching past that end or into the leading magic.
pub fn layout_problem(footer: &[u8], data_end: u64) -> Option<NotParquet> {
    let metadata = match ParquetMetaDataReader::decode_metadata(footer) {
        Ok(metadata) => metadata,
        Err(e) => return Some(NotParquet::Footer(e)),
    };
    let within = |offset: i64, length: i64| {
        let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length)) else {
            return false;
        };
        offset >= MAGIC.len() as u64
            && offset
                .checked_add(length)
                .is_some_and(|end| end <= data_end)
    };
    for (group, row_group) in metadata.row_groups().iter().enumerate() {
        for column in row_group.columns() {
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let indexes = [
                (column.column_index_offset(), column.column_index_length()),
                (column.offset_index_offset(), column.offset_index_length()),
            ];
            let indexes_fit = indexes.iter().all(|index| match *index {
                (Some(offset), Some(length)) => within(offset, i64::from(length)),
                _ => true,
            });
            if !within(start, column.compressed_size()) || !indexes_fit {
                return Some(NotParquet::ChunkOutside {
                    group,
                    column: column.column_path().to_string(),
                });
            }
        }
    }
    None
}

/// Reads both ends of `path` and checks them; the file's metadata when they
/// are a parquet file's.
pub async fn check_envelope(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<ObjectMeta, EnvelopeError> {
    let meta = store.head(path).await?;
    let size = meta.size;
    let problem = if size < ENVELOPE_BYTES {
        envelope_problem(size, &[], &[])
    } else {
        let head = store.get_range(path, 0..4).await?;
        let tail = store.get_range(path, size - 8..size).await?;
        match envelope_problem(size, &head, &tail) {
            Some(problem) => Some(problem),
            None => {
                let range = footer_range(size, &tail);
                let data_end = range.start;
                let footer = store.get_range(path, range).await?;
                schema_depth_problem(&footer)
                    .map(NotParquet::Schema)
                    .or_else(|| layout_problem(&footer, data_end))
            }
        }
    };
    match problem {
        None => Ok(meta),
        Some(problem) => Err(EnvelopeError::NotParquet(problem)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 4 and last 8 bytes of a file whose footer claims `footer`.
    fn ends(footer: u32) -> (Vec<u8>, Vec<u8>) {
        let mut tail = footer.to_le_bytes().to_vec();
        tail.extend_from_slice(MAGIC);
        (MAGIC.to_vec(), tail)
    }

    /// The text of `problem`, as a load's failure shows it.
    fn text(problem: Option<NotParquet>) -> String {
        problem.expect("a problem").to_string()
    }

    #[test]
    fn the_envelope_of_a_parquet_file() {
        let (head, tail) = ends(100);
        assert!(envelope_problem(112, &head, &tail).is_none());
        assert_eq!(
            text(envelope_problem(111, &head, &tail)),
            "its footer claims 100 bytes in a file of 111 bytes"
        );
        let (head, tail) = ends(u32::MAX);
        assert!(envelope_problem(112, &head, &tail).is_some());
        assert!(text(envelope_problem(112, b"PAR2", &tail)).contains("start"));
        let mut encrypted = tail.clone();
        encrypted[4..].copy_from_slice(b"PARE");
        assert!(text(envelope_problem(112, &head, &encrypted)).contains("encrypted"));
        assert!(text(envelope_problem(11, &head, &tail)).contains("too short"));
        assert!(envelope_problem(0, &[], &[]).is_some());
    }
}
