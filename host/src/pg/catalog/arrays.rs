//! Postgres arrays that datafusion-pg-catalog's static tables hold as text
//! (`pg_index.indkey` is `"1 2"`, `pg_constraint.conkey` is `"[1, 2]"`),
//! read as the arrays they are, and `_pg_expandarray`, the set-returning
//! function pgjdbc lists keys and index columns with:
//!
//! - `text_column[i]` is [`TEXT_ARRAY_ELEMENT`] (planned by
//!   [`TextArraySubscripts`]): the `i`th integer, counted from 0 in a vector
//!   (`int2vector`, `oidvector`: `"1 2"`, as Postgres counts them) and from
//!   1 in an array (`"{1,2}"`, `"[1, 2]"`), NULL past either end;
//! - `_pg_expandarray(a)` is rewritten (`rewrite.rs`) as
//!   `unnest(`[`EXPAND_ARRAY`]`(a))`: a row per element, a struct of the
//!   element `x` and its position `n` from 1, as in Postgres.
//!
//! Only integers are read from text (the vectors and key columns clients
//! index); any other text is an error, never a guess.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Array, ArrayRef, AsArray, Int32Array, Int64Builder, ListArray, ListBuilder},
        compute::cast,
        datatypes::{DataType, Field, Fields, Int64Type},
    },
    common::{DFSchema, Result, exec_err, plan_err},
    logical_expr::{
        ColumnarValue, Expr, ExprSchemable as _, GetFieldAccess, ScalarFunctionArgs, ScalarUDF,
        ScalarUDFImpl, Signature, Volatility,
        expr::ScalarFunction,
        planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr},
    },
};

/// The function `text[i]` is planned as.
pub const TEXT_ARRAY_ELEMENT: &str = "lakehost_text_array_element";

/// The function `_pg_expandarray(a)` is rewritten with.
pub const EXPAND_ARRAY: &str = "lakehost_expandarray";

/// The integers of an array or vector held as text, with the subscript of
/// the first: `{1,2}` and `[1, 2]` from 1, `1 2` from 0; `NULL` elements
/// are nulls.
fn text_array(text: &str) -> Result<(Vec<Option<i64>>, i64)> {
    let trimmed = text.trim();
    let (inner, separator, first) = match trimmed.chars().next() {
        Some('{') if trimmed.ends_with('}') => (&trimmed[1..trimmed.len() - 1], Some(','), 1),
        Some('[') if trimmed.ends_with(']') => (&trimmed[1..trimmed.len() - 1], Some(','), 1),
        _ => (trimmed, None, 0),
    };
    let parts: Vec<&str> = match separator {
        Some(separator) => inner.split(separator).collect(),
        None => inner.split_whitespace().collect(),
    };
    let mut elements = Vec::with_capacity(parts.len());
    for part in parts.iter().map(|part| part.trim()) {
        if part.is_empty() && parts.len() == 1 {
            break;
        }
        if part.eq_ignore_ascii_case("null") {
            elements.push(None);
            continue;
        }
        match part.parse::<i64>() {
            Ok(n) => elements.push(Some(n)),
            Err(_) => return exec_err!("{text:?} is not an array of integers"),
        }
    }
    Ok((elements, first))
}

/// `array` (of any string type) as `Utf8`.
fn as_utf8(array: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(array, &DataType::Utf8)?)
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    )
}

/// `text[i]`: see the module's header.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TextArrayElement {
    signature: Signature,
}

impl ScalarUDFImpl for TextArrayElement {
    fn name(&self) -> &str {
        TEXT_ARRAY_ELEMENT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [text, index] if is_text(text) && (index.is_integer() || index.is_null()) => {
                Ok(DataType::Int64)
            }
            _ => plan_err!("a subscript of text takes an integer, got {arg_types:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let texts = as_utf8(&args.args[0].to_array(rows)?)?;
        let indexes = cast(&args.args[1].to_array(rows)?, &DataType::Int64)?;
        let (texts, indexes) = (
            texts.as_string::<i32>(),
            indexes.as_primitive::<Int64Type>(),
        );
        let mut values = Int64Builder::with_capacity(rows);
        for row in 0..rows {
            if texts.is_null(row) || indexes.is_null(row) {
                values.append_null();
                continue;
            }
            let (elements, first) = text_array(texts.value(row))?;
            let at = indexes
                .value(row)
                .checked_sub(first)
                .and_then(|at| usize::try_from(at).ok());
            values.append_option(at.and_then(|at| elements.get(at).copied().flatten()));
        }
        Ok(ColumnarValue::Array(Arc::new(values.finish())))
    }
}

/// The struct `_pg_expandarray` answers per element: the element and its
/// position from 1.
fn expanded_fields(element: DataType) -> Fields {
    Fields::from(vec![
        Field::new("x", element, true),
        Field::new("n", DataType::Int32, true),
    ])
}

/// `lakehost_expandarray(a)`: `a` (an array, or one held as text) as a list
/// of `{x, n}` structs, for `unnest`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExpandArray {
    signature: Signature,
}

impl ExpandArray {
    /// The element type of an argument of `arg_type`.
    fn element_type(arg_type: &DataType) -> Result<DataType> {
        match arg_type {
            DataType::List(field) => Ok(field.data_type().clone()),
            text if is_text(text) => Ok(DataType::Int64),
            other => plan_err!("_pg_expandarray takes an array, got {other}"),
        }
    }
}

impl ScalarUDFImpl for ExpandArray {
    fn name(&self) -> &str {
        EXPAND_ARRAY
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let [arg_type] = arg_types else {
            return plan_err!("_pg_expandarray takes one array");
        };
        let element = Self::element_type(arg_type)?;
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Struct(expanded_fields(element)),
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        let list: ListArray = if is_text(input.data_type()) {
            let texts = as_utf8(&input)?;
            let texts = texts.as_string::<i32>();
            let mut lists = ListBuilder::new(Int64Builder::new());
            for row in 0..rows {
                if texts.is_null(row) {
                    lists.append_null();
                    continue;
                }
                let (elements, _) = text_array(texts.value(row))?;
                lists.values().extend(elements);
                lists.append(true);
            }
            lists.finish()
        } else if let Some(list) = input.as_list_opt::<i32>() {
            list.clone()
        } else {
            return exec_err!("_pg_expandarray takes an array, got {}", input.data_type());
        };
        // Each element's position in its row's list, from 1; elements of no
        // row (before the first offset) get 0.
        let offsets = list.value_offsets();
        let mut positions = vec![0_i32; list.values().len()];
        for row in offsets.windows(2) {
            let (start, end) = (row[0] as usize, row[1] as usize);
            for (n, at) in (start..end).enumerate() {
                positions[at] = i32::try_from(n + 1).unwrap_or(i32::MAX);
            }
        }
        let element = list.values().data_type().clone();
        let structs = datafusion::arrow::array::StructArray::try_new(
            expanded_fields(element),
            vec![list.values().clone(), Arc::new(Int32Array::from(positions))],
            None,
        )?;
        let field = Arc::new(Field::new_list_field(structs.data_type().clone(), true));
        let expanded = ListArray::try_new(
            field,
            list.offsets().clone(),
            Arc::new(structs),
            list.nulls().cloned(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(expanded)))
    }
}

/// The two functions, for the catalog session.
pub fn functions() -> [ScalarUDF; 2] {
    [
        ScalarUDF::new_from_impl(TextArrayElement {
            signature: Signature::any(2, Volatility::Immutable),
        }),
        ScalarUDF::new_from_impl(ExpandArray {
            signature: Signature::any(1, Volatility::Immutable),
        }),
    ]
}

/// Plans `text[i]` as [`TEXT_ARRAY_ELEMENT`]; every other subscript and
/// field access is left to DataFusion's planners. Put before them.
#[derive(Debug)]
pub struct TextArraySubscripts {
    pub element: Arc<ScalarUDF>,
}

impl ExprPlanner for TextArraySubscripts {
    fn plan_field_access(
        &self,
        access: RawFieldAccessExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawFieldAccessExpr>> {
        // A column of an outer query has no type here: left as it is.
        let text = access
            .expr
            .get_type(schema)
            .is_ok_and(|data_type| is_text(&data_type));
        match access.field_access {
            GetFieldAccess::ListIndex { key } if text => {
                Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    ScalarFunction::new_udf(self.element.clone(), vec![access.expr, *key]),
                )))
            }
            field_access => Ok(PlannerResult::Original(RawFieldAccessExpr {
                field_access,
                expr: access.expr,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_held_as_text_are_read_with_postgres_subscripts() {
        assert_eq!(
            text_array("1 2").unwrap(),
            (vec![Some(1), Some(2)], 0),
            "int2vector"
        );
        assert_eq!(text_array("{3,NULL}").unwrap(), (vec![Some(3), None], 1));
        assert_eq!(text_array("[1, 20, 3]").unwrap().0.len(), 3);
        assert_eq!(text_array("").unwrap(), (vec![], 0));
        assert_eq!(text_array("{}").unwrap(), (vec![], 1));
        assert!(text_array("{a,b}").is_err());
        assert!(text_array("1 x").is_err());
    }
}
