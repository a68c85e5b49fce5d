-- The file a query wrote its result to while it ran (issue 50): 'csv' (the
-- spec's CSV; typed copies are made from it when first asked for) or
-- 'arrow' or 'parquet' (the caller's `Prefer: result-format=arrow|parquet`:
-- the Arrow IPC stream or the Parquet file, and the CSV only while small; a
-- bigger CSV is made from that file when first asked for). Older rows all
-- wrote their CSV.
ALTER TABLE query_jobs ADD COLUMN result_first TEXT NOT NULL DEFAULT 'csv';
