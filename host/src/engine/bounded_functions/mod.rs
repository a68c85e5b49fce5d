//! Scalar functions and operators whose result can be far larger than their
//! arguments (`repeat('x', 1500000000)`, `range(1, 400000000)`, `lpad`,
//! `replace`, `s || s` doubled through CTEs, `encode(..., 'hex')` nested),
//! bounded. DataFusion's memory pool covers what operators hold (sorts,
//! joins, aggregations), not what one scalar function allocates for its
//! result, so a tiny query could take gigabytes. Every session caller SQL
//! runs in (queries, daily SQL, check_sum and staged SQL of loads) replaces
//! these functions with a wrapper, and sends `||` and the SQL planner's own
//! copies of them through it (`operators.rs`). Each call:
//!
//! - works out the result's size from the arguments first (`growth.rs`)
//!   and refuses past `MAX_RESULT_BYTES` with DataFusion's "Resources
//!   exhausted" error, and counts it against the session's memory limit;
//! - checks what the function returned against the same cap, so a chain of
//!   calls that each double their input stops at the cap too;
//! - counts what it returned against the session's memory limit while it
//!   lives (`live_results.rs`), so many calls each under the cap stop at the
//!   query's memory limit, with "Resources exhausted" too;
//! - is never folded into a constant while planning (the functions are
//!   volatile to the optimizer): a constant is copied into every row of a
//!   batch by whoever projects it, uncounted, whereas a call makes its rows
//!   itself, counted and charged.
//!
//! The same sessions also read Postgres' date format patterns in
//! `to_timestamp` and `to_date` (`postgres_patterns.rs`), as tools send them.

mod growth;
mod live_results;
mod operators;
mod postgres_patterns;
#[cfg(test)]
mod tests;

use std::{
    hash::{Hash, Hasher},
    sync::Arc,
};

use datafusion::{
    arrow::datatypes::{DataType, FieldRef},
    common::{DataFusionError, Result},
    logical_expr::{
        ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
        ScalarUDFImpl, Signature, Volatility, udf_eq::UdfEq,
    },
    prelude::SessionContext,
};

use growth::Growth;
use live_results::LiveResults;
use operators::{BoundedOperators, StringConcatOperator};

/// The most one call of a bounded function may return, over all rows of a
/// batch: a quarter of the default query memory limit.
pub const MAX_RESULT_BYTES: usize = 256 * 1024 * 1024;

/// The functions bounded, by name (their aliases follow them).
const BOUNDED: &[(&str, Growth)] = &[
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("concat", Growth::Sum),
    ("concat_ws", Growth::SumWithSeparator),
    ("array_concat", Growth::Sum),
    ("array_append", Growth::Sum),
    ("array_prepend", Growth::Sum),
    ("array_union", Growth::Sum),
    ("make_array", Growth::Sum),
    ("overlay", Growth::Sum),
    ("encode", Growth::Encode),
    ("array_to_string", Growth::PerElement),
    ("array_replace_all", Growth::PerElement),
    ("array_replace_n", Growth::PerElement),
    ("string_to_array", Growth::Returned),
    ("translate", Growth::Returned),
];

/// Replaces the context's growing functions with their bounded wrappers,
/// and sends `||` through them.
pub fn bound_functions(context: &SessionContext) {
    bound_functions_at(context, MAX_RESULT_BYTES, &[]);
}

/// `bound_functions`, and also `others`: functions a context has beyond
/// the engine's (the Postgres catalog session's `quote_ident`,
/// `json_build_object`, ...), each bounded by what it returns
/// (`Growth::Returned`).
pub fn bound_functions_and(context: &SessionContext, others: &[&str]) {
    bound_functions_at(context, MAX_RESULT_BYTES, others);
}

/// `bound_functions`, for a session that decodes plans made elsewhere (a
/// distributed read's worker): there `||` is also a function, under its
/// name, since the coordinator's plan calls it by that name.
pub fn bound_functions_by_name(context: &SessionContext) {
    let string_concat = bound_functions_at(context, MAX_RESULT_BYTES, &[]);
    context.register_udf(string_concat.as_ref().clone());
}

/// Bounds the context's functions; the bounded `||` it sends the operator to.
fn bound_functions_at(
    context: &SessionContext,
    max_bytes: usize,
    others: &[&str],
) -> Arc<ScalarUDF> {
    let live = Arc::new(LiveResults::new(&context.runtime_env().memory_pool));
    let bounded = |inner: Arc<dyn ScalarUDFImpl>, growth: Growth| {
        Arc::new(ScalarUDF::new_from_impl(Bounded::new(
            inner,
            growth,
            max_bytes,
            live.clone(),
        )))
    };
    // Read under the state's lock: `context.state()` clones the whole
    // session state (every function registry), which once per function
    // cost a small query more than its planning.
    let functions: Vec<_> = {
        let state = context.state_ref();
        let state = state.read();
        BOUNDED
            .iter()
            .copied()
            .chain(others.iter().map(|name| (*name, Growth::Returned)))
            .filter_map(|(name, growth)| {
                let inner = state.scalar_functions().get(name)?;
                Some(bounded(inner.inner().clone(), growth))
            })
            .collect()
    };
    for function in &functions {
        context.register_udf(function.as_ref().clone());
    }
    // Not growing functions, but every session caller SQL runs in is made
    // here: Postgres' date patterns are read wherever SQL is.
    postgres_patterns::register(context);
    let string_concat = bounded(Arc::new(StringConcatOperator::new()), Growth::Sum);
    context.add_analyzer_rule(Arc::new(BoundedOperators::new(
        functions,
        string_concat.clone(),
    )));
    string_concat
}

/// How a scalar function's value may vary between runs with the same
/// arguments. A bounded function answers for the function it wraps: it is
/// volatile to the optimizer only (so no constant is folded uncounted), its
/// values are the wrapped function's.
pub fn value_volatility(function: &ScalarUDF) -> Volatility {
    match function.inner().downcast_ref::<Bounded>() {
        Some(bounded) => bounded.inner.signature().volatility,
        None => function.signature().volatility,
    }
}

/// A growing function, bounded: see the module's header.
#[derive(Debug)]
struct Bounded {
    inner: UdfEq<Arc<dyn ScalarUDFImpl>>,
    growth: Growth,
    max_bytes: usize,
    /// The inner function's signature, volatile: never folded while planning.
    signature: Signature,
    /// The session's results still in memory, held to its memory limit.
    live: Arc<LiveResults>,
}

impl Bounded {
    fn new(
        inner: Arc<dyn ScalarUDFImpl>,
        growth: Growth,
        max_bytes: usize,
        live: Arc<LiveResults>,
    ) -> Self {
        let signature = Signature {
            volatility: Volatility::Volatile,
            ..inner.signature().clone()
        };
        Self {
            inner: UdfEq::from(inner),
            growth,
            max_bytes,
            signature,
            live,
        }
    }

    fn exhausted(&self, bytes: u128) -> DataFusionError {
        DataFusionError::ResourcesExhausted(format!(
            "{} would return {bytes} bytes, more than one function call may ({} bytes)",
            self.name(),
            self.max_bytes
        ))
    }

    /// Refuses `bytes` past the per-call cap.
    fn within_cap(&self, bytes: u128) -> Result<usize> {
        match usize::try_from(bytes) {
            Ok(bytes) if bytes <= self.max_bytes => Ok(bytes),
            _ => Err(self.exhausted(bytes)),
        }
    }
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
            && self.growth == other.growth
            && self.max_bytes == other.max_bytes
            && Arc::ptr_eq(&self.live, &other.live)
    }
}

impl Eq for Bounded {}

impl Hash for Bounded {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.growth.hash(state);
        self.max_bytes.hash(state);
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let expected = self.within_cap(self.growth.expected_bytes(&args)?)?;
        let room = self.live.make_room(expected, self.name())?;
        let result = self.inner.invoke_with_args(args)?;
        drop(room);
        // One value per row: a scalar becomes its rows here, counted, rather
        // than copied by the projection that asked for it.
        let result = match result {
            ColumnarValue::Array(array) => array,
            ColumnarValue::Scalar(value) => {
                self.within_cap((value.size() as u128).saturating_mul(rows as u128))?;
                value.to_array_of_size(rows)?
            }
        };
        self.within_cap(result.get_array_memory_size() as u128)?;
        self.live.charge(&result, self.name())?;
        Ok(ColumnarValue::Array(result))
    }
}
