-- Each database's catalog version: bumped in the same transaction as every
-- change to its tables, views or committed files, by these triggers (so no
-- writer, old replica or operator's hand edit can skip it). A replica keeps
-- an org's catalog in memory and reads it again only when one of the
-- versions it read it at has moved (store/catalog/snapshot.rs).
ALTER TABLE lake_databases ADD COLUMN catalog_version BIGINT NOT NULL DEFAULT 0;

CREATE TRIGGER lake_tables_inserted AFTER INSERT ON lake_tables BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = NEW.database_id;
END;
CREATE TRIGGER lake_tables_updated AFTER UPDATE ON lake_tables BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1
    WHERE id IN (OLD.database_id, NEW.database_id);
END;
CREATE TRIGGER lake_tables_deleted AFTER DELETE ON lake_tables BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = OLD.database_id;
END;

CREATE TRIGGER lake_views_inserted AFTER INSERT ON lake_views BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = NEW.database_id;
END;
CREATE TRIGGER lake_views_updated AFTER UPDATE ON lake_views BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1
    WHERE id IN (OLD.database_id, NEW.database_id);
END;
CREATE TRIGGER lake_views_deleted AFTER DELETE ON lake_views BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = OLD.database_id;
END;

-- A file's database is its table's. A file deleted with its table (ON
-- DELETE CASCADE) finds no table any more: the table's own trigger bumps.
CREATE TRIGGER lake_files_inserted AFTER INSERT ON lake_files BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1
    WHERE id = (SELECT database_id FROM lake_tables WHERE id = NEW.table_id);
END;
CREATE TRIGGER lake_files_updated AFTER UPDATE ON lake_files BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1
    WHERE id IN (SELECT database_id FROM lake_tables WHERE id IN (OLD.table_id, NEW.table_id));
END;
CREATE TRIGGER lake_files_deleted AFTER DELETE ON lake_files BEGIN
    UPDATE lake_databases SET catalog_version = catalog_version + 1
    WHERE id = (SELECT database_id FROM lake_tables WHERE id = OLD.table_id);
END;
