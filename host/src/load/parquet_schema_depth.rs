//! How deep an uploaded parquet file's schema nests, read from its footer's
//! Thrift bytes without building the schema tree. The parquet and Arrow
//! readers build that tree (and every type over it) recursively: a 7 KB file
//! nesting 200 structs overflows a worker's stack and takes the whole process
//! down. So the depth is worked out first, iteratively, and a schema past
//! `MAX_SCHEMA_DEPTH` never reaches them.
//!
//! The footer is a Thrift compact-protocol `FileMetaData`; its field 2 is
//! the schema, a flat list of `SchemaElement`s in depth-first order, each
//! group giving its `num_children` (field 5). Everything else is skipped,
//! with Thrift's own nesting capped too.

/// Levels a schema may nest below its root: the engine's type-depth cap.
pub use crate::engine::expression_limits::MAX_TYPE_DEPTH as MAX_SCHEMA_DEPTH;
/// Thrift structs nested inside the footer (the format itself nests a few).
const MAX_THRIFT_NESTING: usize = 32;

const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// `FileMetaData.schema` and `SchemaElement.num_children`.
const SCHEMA_FIELD: i16 = 2;
const NUM_CHILDREN_FIELD: i16 = 5;

/// Why a file's schema may not reach the readers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaProblem {
    #[error("its schema nests more than {MAX_SCHEMA_DEPTH} levels deep")]
    TooDeep,
    #[error("its footer cannot be read: {0}")]
    Unreadable(#[source] FooterError),
}

/// Why the footer's Thrift bytes are not a readable schema list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FooterError {
    #[error("it ends early")]
    EndsEarly,
    #[error("a number runs past 10 bytes")]
    NumberTooLong,
    #[error("a field id out of range")]
    FieldIdOutOfRange,
    #[error("a list claims more elements than bytes left")]
    ListPastEnd,
    #[error("a map claims more entries than bytes left")]
    MapPastEnd,
    #[error("a negative number of children")]
    NegativeChildren,
    #[error("its metadata nests more than {MAX_THRIFT_NESTING} levels")]
    NestedTooDeep,
    #[error("an unknown Thrift type {0}")]
    UnknownType(u8),
    #[error("no schema")]
    NoSchema,
    #[error("the schema is empty")]
    EmptySchema,
    #[error("the schema is not a list of elements")]
    NotElements,
    #[error("the schema lists more elements than its groups hold")]
    MoreElementsThanGroupsHold,
}

/// Why the schema in `footer` (the metadata bytes before the footer length)
/// cannot be read safely: too deep, or not a schema list at all.
pub fn schema_depth_problem(footer: &[u8]) -> Option<SchemaProblem> {
    match schema_children(footer).and_then(|children| depth_of(&children)) {
        Ok(depth) if depth > MAX_SCHEMA_DEPTH => Some(SchemaProblem::TooDeep),
        Ok(_) => None,
        Err(problem) => Some(SchemaProblem::Unreadable(problem)),
    }
}

/// The deepest level of the tree a depth-first list of `num_children`
/// describes (the root is level 0), or the first level past the cap.
fn depth_of(children: &[i64]) -> Result<usize, FooterError> {
    let Some((&root, rest)) = children.split_first() else {
        return Err(FooterError::EmptySchema);
    };
    // Children still to come of each open group, the root's first.
    let mut open: Vec<i64> = vec![root];
    let mut deepest = 0;
    for &count in rest {
        let Some(remaining) = open.last_mut().filter(|r| **r > 0) else {
            return Err(FooterError::MoreElementsThanGroupsHold);
        };
        *remaining -= 1;
        deepest = deepest.max(open.len());
        if deepest > MAX_SCHEMA_DEPTH {
            return Ok(deepest);
        }
        if count > 0 {
            open.push(count);
        }
        while open.last() == Some(&0) {
            open.pop();
        }
    }
    Ok(deepest)
}

/// Each schema element's `num_children` (0 for a leaf), in the footer's order.
fn schema_children(footer: &[u8]) -> Result<Vec<i64>, FooterError> {
    let mut reader = Reader {
        bytes: footer,
        at: 0,
    };
    let mut last_id = 0;
    while let Some((id, kind)) = reader.field_header(&mut last_id)? {
        if id != SCHEMA_FIELD || kind != LIST {
            reader.skip(kind, 1)?;
            continue;
        }
        let (element, count) = reader.collection_header()?;
        if element != STRUCT {
            return Err(FooterError::NotElements);
        }
        let mut children = Vec::new();
        for _ in 0..count {
            children.push(reader.num_children()?);
        }
        return Ok(children);
    }
    Err(FooterError::NoSchema)
}

/// A cursor over Thrift compact-protocol bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, FooterError> {
        let byte = *self.bytes.get(self.at).ok_or(FooterError::EndsEarly)?;
        self.at += 1;
        Ok(byte)
    }

    fn advance(&mut self, count: u64) -> Result<(), FooterError> {
        let end = usize::try_from(count)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|end| *end <= self.bytes.len())
            .ok_or(FooterError::EndsEarly)?;
        self.at = end;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, FooterError> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FooterError::NumberTooLong)
    }

    fn zigzag(&mut self) -> Result<i64, FooterError> {
        let raw = self.varint()?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    /// The next field's id and type, or `None` at the struct's end.
    fn field_header(&mut self, last_id: &mut i16) -> Result<Option<(i16, u8)>, FooterError> {
        let header = self.byte()?;
        if header == STOP {
            return Ok(None);
        }
        let delta = i16::from(header >> 4);
        let id = if delta == 0 {
            i16::try_from(self.zigzag()?).map_err(|_| FooterError::FieldIdOutOfRange)?
        } else {
            last_id.saturating_add(delta)
        };
        *last_id = id;
        Ok(Some((id, header & 0x0f)))
    }

    /// A list's or set's element type and size; each element takes at least
    /// one byte, so a size past the bytes left is refused here.
    fn collection_header(&mut self) -> Result<(u8, u64), FooterError> {
        let header = self.byte()?;
        let size = match header >> 4 {
            15 => self.varint()?,
            short => u64::from(short),
        };
        if size > (self.bytes.len() - self.at) as u64 {
            return Err(FooterError::ListPastEnd);
        }
        Ok((header & 0x0f, size))
    }

    /// One `SchemaElement`: its `num_children`, the rest skipped.
    fn num_children(&mut self) -> Result<i64, FooterError> {
        let mut children = 0;
        let mut last_id = 0;
        while let Some((id, kind)) = self.field_header(&mut last_id)? {
            if id == NUM_CHILDREN_FIELD && kind == I32 {
                children = self.zigzag()?;
                if children < 0 {
                    return Err(FooterError::NegativeChildren);
                }
            } else {
                self.skip(kind, 2)?;
            }
        }
        Ok(children)
    }

    /// Skips one value of `kind`, `nesting` structs deep.
    fn skip(&mut self, kind: u8, nesting: usize) -> Result<(), FooterError> {
        match kind {
            TRUE | FALSE => Ok(()),
            BYTE => self.advance(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.advance(8),
            BINARY => {
                let length = self.varint()?;
                self.advance(length)
            }
            LIST | SET => {
                let (element, size) = self.collection_header()?;
                for _ in 0..size {
                    // A boolean in a list is a byte of its own.
                    match element {
                        TRUE | FALSE => self.advance(1)?,
                        other => self.skip(other, nesting)?,
                    }
                }
                Ok(())
            }
            MAP => {
                let size = self.varint()?;
                if size == 0 {
                    return Ok(());
                }
                if size > (self.bytes.len() - self.at) as u64 {
                    return Err(FooterError::MapPastEnd);
                }
                let types = self.byte()?;
                for _ in 0..size {
                    self.skip(types >> 4, nesting)?;
                    self.skip(types & 0x0f, nesting)?;
                }
                Ok(())
            }
            STRUCT => {
                if nesting >= MAX_THRIFT_NESTING {
                    return Err(FooterError::NestedTooDeep);
                }
                let mut last_id = 0;
                while let Some((_, field)) = self.field_header(&mut last_id)? {
                    self.skip(field, nesting + 1)?;
                }
                Ok(())
            }
            other => Err(FooterError::UnknownType(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{ArrayRef, Int64Array, StructArray},
        datatypes::Field,
        record_batch::RecordBatch,
    };
    use datafusion::parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};

    use super::*;

    /// A parquet file with a service_client_id and a column nesting `levels`
    /// structs around an integer, without the Arrow schema in its metadata
    /// (so only the parquet schema describes it).
    fn nested_file(levels: usize) -> Vec<u8> {
        let mut array: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        for _ in 0..levels {
            let field = Arc::new(Field::new("f", array.data_type().clone(), true));
            array = Arc::new(StructArray::from(vec![(field, array)]));
        }
        let batch = RecordBatch::try_from_iter(vec![
            (
                "service_client_id",
                Arc::new(Int64Array::from(vec![1, 1])) as ArrayRef,
            ),
            ("deep", array),
        ])
        .unwrap();
        let mut bytes = Vec::new();
        let options = ArrowWriterOptions::new().with_skip_arrow_metadata(true);
        let mut writer =
            ArrowWriter::try_new_with_options(&mut bytes, batch.schema(), options).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes
    }

    /// The metadata bytes of a parquet file.
    fn footer_of(file: &[u8]) -> &[u8] {
        let length = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap());
        &file[file.len() - 8 - length as usize..file.len() - 8]
    }

    #[test]
    fn a_flat_and_a_nested_file_have_their_depths() {
        let flat = nested_file(0);
        assert_eq!(depth_of(&schema_children(footer_of(&flat)).unwrap()), Ok(1));
        // The deep column: `levels` structs, then the integer leaf.
        let nested = nested_file(5);
        assert_eq!(
            depth_of(&schema_children(footer_of(&nested)).unwrap()),
            Ok(6)
        );
        assert_eq!(schema_depth_problem(footer_of(&nested)), None);
    }

    #[test]
    fn a_schema_past_the_cap_is_refused_before_any_reader_sees_it() {
        let at_cap = nested_file(MAX_SCHEMA_DEPTH - 1);
        assert_eq!(schema_depth_problem(footer_of(&at_cap)), None);
        let past = nested_file(MAX_SCHEMA_DEPTH);
        assert_eq!(
            schema_depth_problem(footer_of(&past)).unwrap().to_string(),
            format!("its schema nests more than {MAX_SCHEMA_DEPTH} levels deep")
        );
        // Far past it: the walk stops at the cap, whatever the claim.
        let mut children = vec![1i64; 1_000_000];
        children.push(0);
        assert_eq!(depth_of(&children), Ok(MAX_SCHEMA_DEPTH + 1));
    }

    #[test]
    fn garbage_and_lies_are_problems_not_panics() {
        assert!(schema_depth_problem(&[]).is_some());
        assert!(schema_depth_problem(&[0xff; 64]).is_some());
        // A list claiming 2^60 elements in 12 bytes.
        assert!(
            schema_depth_problem(&[0x29, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f])
                .is_some()
        );
        // Structs nested past Thrift's cap in an unknown field.
        let mut deep = vec![0x1c; 100];
        deep.extend(std::iter::repeat_n(0u8, 100));
        assert!(
            schema_depth_problem(&deep)
                .unwrap()
                .to_string()
                .contains("nests more than")
        );
        // More elements than the root's children.
        assert!(depth_of(&[1, 0, 0]).is_err());
        assert!(depth_of(&[]).is_err());
        let file = nested_file(2);
        let footer = footer_of(&file);
        for cut in 0..footer.len() {
            let _ = schema_depth_problem(&footer[..cut]);
        }
    }
}
