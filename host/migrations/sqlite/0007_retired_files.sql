-- Data files no longer listed by any table (a DROP TABLE, a daily refresh's
-- swap), kept on the object store until queries planned on the old file list
-- are over: the retired-file sweeper deletes them `query.time_limit_s` after
-- `retired_at`. Written in the transaction that unlists them, so a crash never
-- leaks a file nor deletes one a table still lists.
CREATE TABLE retired_files (
    path TEXT PRIMARY KEY,
    retired_at BIGINT NOT NULL
);
CREATE INDEX retired_files_by_time ON retired_files (retired_at);
