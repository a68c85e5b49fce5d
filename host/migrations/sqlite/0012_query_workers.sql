-- How many lakehost workers ran a distributed read (issue 21): NULL for a
-- query that ran on one replica alone (every query before this).
ALTER TABLE query_jobs ADD COLUMN workers BIGINT;
