-- Daily-run executions (spec "Daily run execution"). Times are microseconds
-- since the Unix epoch. A run is held by the replica that started it
-- (lease_owner, renewed until lease_expires_at); a run whose lease lapsed is
-- ended ABORTED, one past deadline_at TIMED_OUT.
CREATE TABLE daily_runs (
    name TEXT PRIMARY KEY,           -- DailyScheduledETL_<org>_<timestamp>
    org TEXT NOT NULL,
    status TEXT NOT NULL,            -- RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED
    scheduled_for BIGINT,            -- the schedule's slot; NULL for a manual start
    started_at BIGINT NOT NULL,
    stopped_at BIGINT,
    deadline_at BIGINT NOT NULL,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    error TEXT,                      -- why it did not succeed: a short name ...
    cause TEXT                       -- ... and the details
);

-- At most one RUNNING execution per org, whoever starts it (spec: 409).
CREATE UNIQUE INDEX daily_runs_one_running ON daily_runs (org) WHERE status = 'RUNNING';
-- Each slot of the schedule starts at most one execution, on any replica.
CREATE UNIQUE INDEX daily_runs_one_per_slot ON daily_runs (org, scheduled_for);
CREATE INDEX daily_runs_by_start ON daily_runs (org, started_at);
