-- Where a query's rows went (issue 20): 'stored' (the result files that
-- pages, downloads and links read) or 'flight-sql' (streamed to its Flight
-- SQL client while it ran; no result is kept). Older rows were all stored.
ALTER TABLE query_jobs ADD COLUMN delivery TEXT NOT NULL DEFAULT 'stored';
