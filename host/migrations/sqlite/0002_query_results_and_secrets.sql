-- What a query worker needs to re-plan a job on any replica (the caller's roles
-- and service clients at submission), and what a finished query's result is.
ALTER TABLE query_jobs ADD COLUMN access_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE query_jobs ADD COLUMN result_columns_json TEXT;
ALTER TABLE query_jobs ADD COLUMN result_bytes BIGINT;
CREATE INDEX query_jobs_by_owner ON query_jobs (owner_sub, submitted_at);

-- Secrets every replica must share (the key that signs CSV links), created
-- once by whichever replica starts first.
CREATE TABLE server_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
