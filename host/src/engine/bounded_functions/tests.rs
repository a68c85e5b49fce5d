//! The bounds, against a plain session with the bounded functions.

use datafusion::{
    arrow::{array::RecordBatch, util::pretty::pretty_format_batches},
    execution::{memory_pool::FairSpillPool, runtime_env::RuntimeEnvBuilder},
    prelude::SessionConfig,
};

use super::*;

/// A session with the functions bounded at `max_bytes` a call and a memory
/// pool of `pool_bytes`.
fn bounded_session(max_bytes: usize, pool_bytes: usize) -> SessionContext {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(pool_bytes)))
        .build_arc()
        .unwrap();
    let context = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
    bound_functions_at(&context, max_bytes, &[]);
    context
}

async fn collect(context: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    context.sql(sql).await?.collect().await
}

async fn run_at(sql: &str, max_bytes: usize) -> Result<()> {
    collect(&bounded_session(max_bytes, 1 << 30), sql)
        .await
        .map(drop)
}

async fn run(sql: &str) -> Result<()> {
    run_at(sql, MAX_RESULT_BYTES).await
}

fn is_exhausted(outcome: Result<()>) -> bool {
    outcome
        .err()
        .is_some_and(|e| matches!(e.find_root(), DataFusionError::ResourcesExhausted(_)))
}

#[tokio::test]
async fn growing_functions_stop_at_the_cap_and_work_below_it() {
    for sql in [
        "SELECT length(repeat('x', 1500000000))",
        "SELECT cardinality(range(1, 400000000))",
        "SELECT cardinality(generate_series(1, 400000000))",
        "SELECT cardinality(range(DATE '1970-01-01', DATE '2200-01-01', INTERVAL '1 second'))",
        "SELECT cardinality(range(DATE '1970-01-01', DATE '9999-12-31', INTERVAL '1 minute'))",
        "SELECT length(lpad('x', 1000000000))",
        "SELECT length(rpad('x', 1000000000, 'y'))",
        "SELECT length(replace(repeat('x', 100000), 'x', repeat('y', 10000)))",
        "SELECT length(regexp_replace(repeat('x', 100000), '', repeat('y', 10000), 'g'))",
        "SELECT cardinality(array_repeat(1, 100000000))",
        "SELECT cardinality(array_resize([1], 100000000))",
        "SELECT length(repeat(v, 1000000)) FROM (VALUES ('abcdefghij'), ('klmnopqrst')) t(v) \
         CROSS JOIN (SELECT * FROM generate_series(1, 30)) g",
    ] {
        assert!(is_exhausted(run(sql).await), "{sql} must be refused");
    }
    // Doubling: each call's arguments under the cap, its result checked.
    let doubling = "SELECT length(concat(repeat('x', 600000), repeat('x', 600000)))";
    assert!(is_exhausted(run_at(doubling, 1 << 20).await));
    run_at(
        "SELECT length(concat(repeat('x', 300000), repeat('x', 300000)))",
        1 << 20,
    )
    .await
    .unwrap();
    for sql in [
        "SELECT repeat('x', 1000), lpad('x', 10), rpad('x', 10, 'y')",
        "SELECT replace('abc', 'b', 'xyz'), regexp_replace('abc', 'b', 'x')",
        "SELECT range(1, 10), generate_series(1, 10, 2), array_repeat('a', 3), array_resize([1], 5)",
        "SELECT range(DATE '2026-01-01', DATE '2026-12-31', INTERVAL '1 day')",
        "SELECT concat('a', 'b'), concat_ws(',', 'a', 'b'), array_concat([1], [2])",
        "SELECT repeat(v, 3) FROM (VALUES ('a'), (NULL)) t(v)",
    ] {
        run(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn concatenation_operators_and_doubling_chains_stop_at_the_cap() {
    let cap = 1 << 20;
    for sql in [
        // Each level doubles the one before; the third is past the cap.
        "WITH a AS (SELECT repeat('x', 300000) s), b AS (SELECT s || s s FROM a), \
         c AS (SELECT s || s s FROM b), d AS (SELECT s || s s FROM c) SELECT length(s) FROM d",
        "SELECT length(s || s || s || s) FROM (SELECT repeat('x', 300000) s)",
        "SELECT cardinality(a || a || a) FROM (SELECT range(1, 50000) a)",
        "SELECT cardinality([a, a, a, a, a]) FROM (SELECT range(1, 50000) a)",
        "SELECT cardinality(array_append(array_repeat(a, 3), a)) FROM (SELECT range(1, 40000) a)",
        "SELECT length(encode(encode(encode(repeat('x', 200000), 'hex'), 'hex'), 'hex'))",
        "SELECT length(array_to_string(range(1, 10000), repeat('-', 200)))",
        "SELECT length(concat_ws(repeat('-', 300000), 'a', 'b', 'c', 'd'))",
    ] {
        assert!(
            is_exhausted(run_at(sql, cap).await),
            "{sql} must be refused"
        );
    }
    run_at(
        "WITH a AS (SELECT repeat('x', 100000) s), b AS (SELECT s || s s FROM a) \
         SELECT length(s) FROM b",
        cap,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_constant_result_copied_into_every_row_counts_every_copy() {
    // 100 KB once, but 2 MB over the twenty rows a projection makes of it.
    let copied =
        "SELECT max(length(s)) FROM (SELECT repeat('x', 100000) s FROM generate_series(1, 20))";
    assert!(is_exhausted(run_at(copied, 1 << 20).await));
    let joined =
        "SELECT max(length(s || 'y')) FROM generate_series(1, 20) CROSS JOIN (SELECT 'x' s)";
    run_at(joined, 1 << 20).await.unwrap();
}

#[tokio::test]
async fn results_alive_together_stop_at_the_memory_limit() {
    // Six results of 300 KB, each under the 1 MiB cap, alive in one batch:
    // past a 1 MiB memory limit.
    let columns: Vec<String> = (0..6)
        .map(|i| format!("repeat('x', 300000) c{i}"))
        .collect();
    let context = bounded_session(1 << 20, 1 << 20);
    let refused = collect(&context, &format!("SELECT {}", columns.join(", "))).await;
    let message = refused.expect_err("past the pool").to_string();
    assert!(
        message.contains("Resources exhausted") && message.contains("function results"),
        "{message}"
    );
    // What a finished query held is given back: the same session runs
    // the same work again, one column at a time.
    for column in &columns {
        collect(&context, &format!("SELECT {column}"))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn bounding_changes_neither_values_nor_column_names() {
    let plain = SessionContext::new();
    let bounded = bounded_session(MAX_RESULT_BYTES, 1 << 30);
    for sql in [
        "SELECT 'a' || 'b', 'a' || NULL, NULL || 'b', repeat('ab', 2) || 'c'",
        "SELECT v || w, v || 'x' AS named FROM (VALUES ('a', 'b'), (NULL, 'c')) t(v, w)",
        "SELECT CAST('ab' AS BYTEA) || CAST('cd' AS BYTEA)",
        "SELECT arrow_cast(v, 'Dictionary(Int32, Utf8)') || 'b', arrow_cast(v, 'Utf8View') || v, \
         arrow_cast(v, 'LargeUtf8') || 'c' FROM (VALUES ('a'), (NULL)) t(v)",
        "SELECT [1, 2] || [3], [1] || 2, 0 || [1], make_array(1, 2)",
        "SELECT concat('a', NULL, 'b'), concat_ws('-', 'a', NULL, 'b'), encode('ab', 'hex')",
        "SELECT array_to_string([1, NULL, 3], ',', '?'), string_to_array('a,b', ','), translate('abc', 'b', 'x')",
        "SELECT v, count(*) FROM (VALUES ('a'), ('b'), ('a')) t(v) GROUP BY v || '!' , v ORDER BY v || '!'",
        "SELECT lpad(v, 3, '*') FROM (VALUES ('a'), ('bb')) t(v) WHERE v || 'x' = 'ax'",
    ] {
        let expected = collect(&plain, sql).await.unwrap();
        let got = collect(&bounded, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(
            pretty_format_batches(&got).unwrap().to_string(),
            pretty_format_batches(&expected).unwrap().to_string(),
            "{sql}"
        );
        // Names and types; a constant the plain session folded is
        // non-nullable there, a bounded call never folded is not.
        let columns = |batches: &[RecordBatch]| {
            let schema = batches[0].schema();
            let fields = schema.fields().iter();
            fields
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(columns(&got), columns(&expected), "{sql}");
    }
}
