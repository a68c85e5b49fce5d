-- A table's column order as its CREATE TABLE [AS] statement gave it: a JSON
-- array of every column name, partition columns where the statement put
-- them (the files and folders do not change: partition columns stay in the
-- paths). NULL for tables made before this column, by loads and by imports:
-- their columns are the file columns, then the partition columns.
ALTER TABLE lake_tables ADD COLUMN column_order_json TEXT;
