-- Result reuse (issue 19). `reuse_key` is set on a SUCCEEDED read whose
-- result depends only on the lake: a hash of its org, zone, database, the
-- caller's access fingerprint, its SQL (normalised) and the snapshot of every
-- lake table its plan read (query/service/reuse.rs). `reused_query_id` names
-- the query whose result a reused query answers with.
ALTER TABLE query_jobs ADD COLUMN reuse_key TEXT;
ALTER TABLE query_jobs ADD COLUMN reused_query_id TEXT;
CREATE INDEX query_jobs_reuse ON query_jobs (reuse_key, completed_at);
