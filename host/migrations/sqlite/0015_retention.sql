-- Retention (issue 49, docs/operating.md "Retention"): what the sweeps
-- (host/src/retention/) need. Times are microseconds since the Unix epoch.
--
-- When the retention sweep deleted a query's result (its files and the
-- forms kept in its row); NULL while the result is kept. The job's row
-- stays (GET /query/{id} answers) until the job rows' own time is up.
ALTER TABLE query_jobs ADD COLUMN result_expired_at BIGINT;
CREATE INDEX query_jobs_by_completion ON query_jobs (completed_at);
-- Rows sharing one result's files (a reused result names its source's).
CREATE INDEX query_jobs_by_result ON query_jobs (result_path);
CREATE INDEX loads_by_update ON loads (updated_at);
CREATE INDEX daily_runs_by_stop ON daily_runs (stopped_at);

-- One replica sweeps at a time: the holder of a lease renews it each round;
-- another takes it over once `held_until` has passed.
CREATE TABLE sweep_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    held_until BIGINT NOT NULL
);
