-- The lake catalog (databases, tables, committed data files) and query jobs.
-- Times are microseconds since the Unix epoch, UTC. JSON is stored as text.

CREATE TABLE lake_databases (
    id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    zone TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    UNIQUE (org, zone, name)
);

CREATE TABLE lake_tables (
    id TEXT PRIMARY KEY,
    database_id TEXT NOT NULL REFERENCES lake_databases (id),
    name TEXT NOT NULL,
    schema_json TEXT NOT NULL,
    partition_columns_json TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (database_id, name)
);

CREATE TABLE lake_files (
    id TEXT PRIMARY KEY,
    table_id TEXT NOT NULL REFERENCES lake_tables (id) ON DELETE CASCADE,
    path TEXT NOT NULL UNIQUE,
    service_client_id BIGINT,
    partition_values_json TEXT NOT NULL,
    row_count BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL,
    load_id TEXT,
    committed_at BIGINT NOT NULL
);
CREATE INDEX lake_files_by_table ON lake_files (table_id);

CREATE TABLE query_jobs (
    id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    zone TEXT NOT NULL DEFAULT '',
    owner_sub TEXT NOT NULL,
    access_fingerprint TEXT NOT NULL,
    sql_text TEXT NOT NULL,
    database_name TEXT NOT NULL,
    statement_type TEXT NOT NULL,
    state TEXT NOT NULL,
    state_change_reason TEXT,
    submitted_at BIGINT NOT NULL,
    started_at BIGINT,
    completed_at BIGINT,
    result_path TEXT,
    result_rows BIGINT,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX query_jobs_by_state ON query_jobs (state, submitted_at);
