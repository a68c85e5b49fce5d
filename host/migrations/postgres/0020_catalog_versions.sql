-- Each database's catalog version: bumped in the same transaction as every
-- change to its tables, views or committed files, by these triggers (so no
-- writer, old replica or operator's hand edit can skip it). A replica keeps
-- an org's catalog in memory and reads it again only when one of the
-- versions it read it at has moved (store/catalog/snapshot.rs).
ALTER TABLE lake_databases ADD COLUMN catalog_version BIGINT NOT NULL DEFAULT 0;

-- Tables and views name their database.
CREATE FUNCTION lake_database_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = OLD.database_id;
    END IF;
    IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.database_id <> OLD.database_id) THEN
        UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = NEW.database_id;
    END IF;
    RETURN NULL;
END
$$;

-- A file's database is its table's. A file deleted with its table (ON
-- DELETE CASCADE) finds no table any more: the table's own trigger bumps.
CREATE FUNCTION lake_file_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE lake_databases SET catalog_version = catalog_version + 1
        WHERE id = (SELECT database_id FROM lake_tables WHERE id = OLD.table_id);
    END IF;
    IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.table_id <> OLD.table_id) THEN
        UPDATE lake_databases SET catalog_version = catalog_version + 1
        WHERE id = (SELECT database_id FROM lake_tables WHERE id = NEW.table_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER lake_tables_changed AFTER INSERT OR UPDATE OR DELETE ON lake_tables
    FOR EACH ROW EXECUTE FUNCTION lake_database_row_changed();
CREATE TRIGGER lake_views_changed AFTER INSERT OR UPDATE OR DELETE ON lake_views
    FOR EACH ROW EXECUTE FUNCTION lake_database_row_changed();
CREATE TRIGGER lake_files_changed AFTER INSERT OR UPDATE OR DELETE ON lake_files
    FOR EACH ROW EXECUTE FUNCTION lake_file_row_changed();
