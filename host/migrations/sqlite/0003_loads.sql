-- Loads (spec "Load"): one row per load, owned by its creator, and the files
-- asked for with POST /load/{id}/file. A file row exists from the moment its
-- upload descriptor is handed out; uploaded_at is set when its bytes arrive.
-- Times are microseconds since the Unix epoch, UTC.

CREATE TABLE loads (
    id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    zone TEXT NOT NULL DEFAULT '',
    owner_sub TEXT NOT NULL,
    load_type TEXT NOT NULL,
    table_name TEXT NOT NULL,
    load_as_service_client_id TEXT,
    partitions_json TEXT NOT NULL,
    state TEXT NOT NULL,
    error_type TEXT,
    error_messages_json TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    staging_removed_at BIGINT
);
CREATE INDEX loads_by_state ON loads (state, updated_at);

CREATE TABLE load_files (
    load_id TEXT NOT NULL REFERENCES loads (id) ON DELETE CASCADE,
    file_key TEXT NOT NULL,
    object_key TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    uploaded_at BIGINT,
    size_bytes BIGINT,
    PRIMARY KEY (load_id, file_key)
);
