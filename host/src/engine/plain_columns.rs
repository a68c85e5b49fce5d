//! A column in the plain type a file is written in: every result file and
//! lake file stores plain strings and binaries (`layout::without_view_types`)
//! while queries read view types. String views are copied into one values
//! buffer and their offsets in a single pass, the null buffer
//! kept as it is. Arrow's own cast appends each value through a builder:
//! that was 6.6% of an Arrow-first query's CPU, and lake files written by a
//! commit pay it too. Measured on lineitem-like columns of 6 M values
//! (release, one core), this is 1.24x to 1.5x its speed, the most on short
//! values. Every other change of type is Arrow's cast.

use std::sync::Arc;

use datafusion::arrow::{
    array::{Array, ArrayRef, StringArray, StringViewArray},
    buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer},
    compute::cast,
    datatypes::DataType,
    error::ArrowError,
};

/// `column` as `to`: itself when it already is, string views copied out
/// when `to` is `Utf8`, else Arrow's cast (binary views too: rare in
/// results and lake files, not worth a second copy of the loop).
pub fn plain_column(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    if column.data_type() == to {
        return Ok(column.clone());
    }
    if let (DataType::Utf8, Some(views)) = (to, column.as_any().downcast_ref::<StringViewArray>()) {
        let (offsets, values, nulls) =
            copied_out(views.views(), views.data_buffers(), views.nulls())?;
        // SAFETY: the values are the views' own, each valid UTF-8 (a
        // `StringViewArray` holds nothing else), laid end to end at the
        // offsets, so every value is whole and valid.
        let plain = unsafe { StringArray::new_unchecked(offsets, values, nulls) };
        return Ok(Arc::new(plain));
    }
    cast(column, to)
}

/// The values of `views` (over `buffers`) end to end, with their offsets
/// and `nulls` (a null's value is empty); an error when they do not fit
/// 32-bit offsets (Arrow's cast panics there).
fn copied_out(
    views: &ScalarBuffer<u128>,
    buffers: &[Buffer],
    nulls: Option<&NullBuffer>,
) -> Result<(OffsetBuffer<i32>, Buffer, Option<NullBuffer>), ArrowError> {
    let valid = |i: usize| nulls.is_none_or(|n| n.is_valid(i));
    let length = |view: u128| view as u32 as usize;
    let total: usize = views
        .iter()
        .enumerate()
        .filter(|(i, _)| valid(*i))
        .map(|(_, view)| length(*view))
        .sum();
    i32::try_from(total).map_err(|_| ArrowError::OffsetOverflowError(total))?;
    // Room for an inline value's whole 12 bytes past the last value.
    let mut values: Vec<u8> = Vec::with_capacity(total + 12);
    let mut offsets: Vec<i32> = Vec::with_capacity(views.len() + 1);
    offsets.push(0);
    for (i, view) in views.iter().enumerate() {
        if valid(i) {
            let len = length(*view);
            if len <= 12 {
                // Inline: the bytes follow the length in the view itself.
                // Copying all 12 and cutting back is a fixed-size copy, not
                // a call per value (about 1.5x the speed on short values).
                let at = values.len();
                values.extend_from_slice(&view.to_le_bytes()[4..16]);
                values.truncate(at + len);
            } else {
                let buffer = (*view >> 64) as u32 as usize;
                let offset = (*view >> 96) as u32 as usize;
                values.extend_from_slice(&buffers[buffer][offset..offset + len]);
            }
        }
        // At most `total`, which fits.
        offsets.push(values.len() as i32);
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    Ok((offsets, Buffer::from_vec(values), nulls.cloned()))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{BinaryArray, BinaryViewBuilder, Int32Array, StringViewBuilder};

    use super::*;

    /// Inline values (up to 12 bytes, and exactly 12), longer ones (from
    /// 13 bytes) over several data buffers, empty strings and nulls.
    fn strings() -> StringViewArray {
        let mut builder = StringViewBuilder::new().with_fixed_block_size(64);
        for i in 0..280 {
            match i % 7 {
                0 => builder.append_null(),
                1 => builder.append_value(""),
                2 => builder.append_value(format!("é{i}")),
                3 => builder.append_value(format!("{i:012}")),
                4 => builder.append_value(format!("{i:013}")),
                _ => builder.append_value(format!("a longer value, number {i}, past twelve")),
            }
        }
        builder.finish()
    }

    fn same_as_arrows_cast(column: ArrayRef, to: &DataType) {
        let ours = plain_column(&column, to).unwrap();
        let arrows = cast(&column, to).unwrap();
        assert_eq!(ours.data_type(), to);
        assert_eq!(ours.to_data(), arrows.to_data(), "{to}");
    }

    #[test]
    fn string_views_come_out_as_arrows_cast_makes_them() {
        let views = strings();
        assert!(
            views.data_buffers().len() > 1,
            "values over several buffers"
        );
        same_as_arrows_cast(Arc::new(views.clone()), &DataType::Utf8);
        // A slice: its views, and its nulls, start part way in.
        same_as_arrows_cast(Arc::new(views.slice(7, 101)), &DataType::Utf8);
        let empty = StringViewArray::from(Vec::<&str>::new());
        same_as_arrows_cast(Arc::new(empty), &DataType::Utf8);
        let without_nulls = StringViewArray::from(vec!["x", "a value past twelve bytes"]);
        same_as_arrows_cast(Arc::new(without_nulls), &DataType::Utf8);
    }

    #[test]
    fn binary_views_come_out_plain() {
        let mut builder = BinaryViewBuilder::new().with_fixed_block_size(32);
        for i in 0..100u8 {
            match i % 3 {
                0 => builder.append_null(),
                1 => builder.append_value([i; 3]),
                _ => builder.append_value([i; 40]),
            }
        }
        let views = builder.finish();
        let plain =
            plain_column(&(Arc::new(views.clone()) as ArrayRef), &DataType::Binary).unwrap();
        let plain = plain.as_any().downcast_ref::<BinaryArray>().unwrap();
        assert_eq!(plain.len(), views.len());
        for i in 0..views.len() {
            assert_eq!(plain.is_null(i), views.is_null(i), "row {i}");
            if views.is_valid(i) {
                assert_eq!(plain.value(i), views.value(i), "row {i}");
            }
        }
    }

    #[test]
    fn other_types_are_cast_and_a_column_of_the_type_is_itself() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(-3)]));
        same_as_arrows_cast(ints.clone(), &DataType::Int64);
        assert!(Arc::ptr_eq(
            &plain_column(&ints, &DataType::Int32).unwrap(),
            &ints
        ));
        // Views to another type than their plain one go through the cast.
        same_as_arrows_cast(Arc::new(strings()), &DataType::LargeUtf8);
    }
}
