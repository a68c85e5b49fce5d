-- The commit of a load is a durable job on its row: what the commit asked for
-- (check_sum, the caller's access), and a lease that any replica's worker can
-- claim and that another takes over when it runs out.
ALTER TABLE loads ADD COLUMN check_sum_json TEXT;
ALTER TABLE loads ADD COLUMN access_json TEXT;
ALTER TABLE loads ADD COLUMN committed_at BIGINT;
ALTER TABLE loads ADD COLUMN lease_owner TEXT;
ALTER TABLE loads ADD COLUMN lease_expires_at BIGINT;
ALTER TABLE loads ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
