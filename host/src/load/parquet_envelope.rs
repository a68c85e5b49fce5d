//! The envelope of an uploaded parquet file, checked before any parquet
//! reader sees it: `PAR1` at both ends, a footer length that fits in the
//! file, and a schema the readers can build (`parquet_schema_depth`). The
//! parquet crate trusts the footer length it reads (a length past the file's
//! start panics on an overflow in a debug build and wraps in a release one)
//! and builds the schema recursively, so a caller's bytes never reach it
//! unchecked.

use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _, path::Path};

use super::parquet_schema_depth::schema_depth_problem;

const MAGIC: &[u8; 4] = b"PAR1";
/// Leading magic, footer length, trailing magic.
const ENVELOPE_BYTES: u64 = 12;

/// Why the bytes at both ends of a file are not a parquet file's, checked
/// from the file's size, its first 4 bytes and its last 8.
pub fn envelope_problem(size: u64, head: &[u8], tail: &[u8]) -> Option<String> {
    if size < ENVELOPE_BYTES || head.len() < 4 || tail.len() < 8 {
        return Some(format!("{size} bytes is too short for a parquet file"));
    }
    if &head[..4] != MAGIC {
        return Some("it does not start with the parquet magic PAR1".into());
    }
    match &tail[4..8] {
        magic if magic == MAGIC => {}
        b"PARE" => return Some("encrypted parquet footers are not supported".into()),
        _ => return Some("it does not end with the parquet magic PAR1".into()),
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer + ENVELOPE_BYTES > size {
        return Some(format!(
            "its footer claims {footer} bytes in a file of {size} bytes"
        ));
    }
    None
}

/// Where the metadata of a file lies whose envelope passed.
pub fn footer_range(size: u64, tail: &[u8]) -> std::ops::Range<u64> {
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    size - 8 - footer..size - 8
}

/// Reads both ends of `path` and checks them; the file's metadata when they
/// are a parquet file's.
pub async fn check_envelope(store: &dyn ObjectStore, path: &Path) -> Result<ObjectMeta, String> {
    let meta = store.head(path).await.map_err(|e| e.to_string())?;
    let size = meta.size;
    let problem = if size < ENVELOPE_BYTES {
        envelope_problem(size, &[], &[])
    } else {
        let head = store
            .get_range(path, 0..4)
            .await
            .map_err(|e| e.to_string())?;
        let tail = store
            .get_range(path, size - 8..size)
            .await
            .map_err(|e| e.to_string())?;
        match envelope_problem(size, &head, &tail) {
            Some(problem) => Some(problem),
            None => {
                let footer = footer_range(size, &tail);
                let footer = store
                    .get_range(path, footer)
                    .await
                    .map_err(|e| e.to_string())?;
                schema_depth_problem(&footer)
            }
        }
    };
    match problem {
        None => Ok(meta),
        Some(problem) => Err(format!("not a parquet file: {problem}")),
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

    #[test]
    fn the_envelope_of_a_parquet_file() {
        let (head, tail) = ends(100);
        assert_eq!(envelope_problem(112, &head, &tail), None);
        assert!(
            envelope_problem(111, &head, &tail)
                .unwrap()
                .contains("footer claims 100")
        );
        let (head, tail) = ends(u32::MAX);
        assert!(envelope_problem(112, &head, &tail).is_some());
        assert!(
            envelope_problem(112, b"PAR2", &tail)
                .unwrap()
                .contains("start")
        );
        let mut encrypted = tail.clone();
        encrypted[4..].copy_from_slice(b"PARE");
        assert!(
            envelope_problem(112, &head, &encrypted)
                .unwrap()
                .contains("encrypted")
        );
        assert!(
            envelope_problem(11, &head, &tail)
                .unwrap()
                .contains("too short")
        );
        assert!(envelope_problem(0, &[], &[]).is_some());
    }
}
