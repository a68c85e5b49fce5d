-- The file a query wrote its result to while it ran (issue 50): 'csv' (the
-- spec's CSV; typed copies are made from it when first asked for) or
-- 'arrow' (the caller's `Prefer: result-format=arrow`: the Arrow IPC stream,
-- and the CSV only while small; a bigger CSV is made from the Arrow file
-- when first asked for). Older rows all wrote their CSV.
ALTER TABLE query_jobs ADD COLUMN result_first TEXT NOT NULL DEFAULT 'csv';
