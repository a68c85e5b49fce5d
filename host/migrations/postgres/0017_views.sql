-- SQL views (CREATE VIEW): a named SELECT of a database, planned again as
-- each reader when it is read, so its base tables' access decision is the
-- reader's. Views share their database's names with its tables (no view is
-- named as a table of the same database: the query service checks).
-- sql_text is the SELECT as the parser printed it; default_database is the
-- database its unqualified names resolve in (the creating session's);
-- schema_json its columns when it was created (lake::schema_to_json).
CREATE TABLE lake_views (
    id TEXT PRIMARY KEY,
    database_id TEXT NOT NULL REFERENCES lake_databases (id),
    name TEXT NOT NULL,
    sql_text TEXT NOT NULL,
    default_database TEXT NOT NULL,
    schema_json TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (database_id, name)
);
