-- Small results kept in their job's row instead of the lake
-- (query.result_in_store_bytes, docs/design/small-results.md): the result
-- CSV and its typed Arrow copy, written with SUCCEEDED. NULL for a result
-- kept as lake files (every result before this, and every larger one).
ALTER TABLE query_jobs ADD COLUMN result_csv BYTEA;
ALTER TABLE query_jobs ADD COLUMN result_arrow BYTEA;
