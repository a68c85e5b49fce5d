-- The daily run flag per org (spec "Daily run flag"): no row until it is
-- first set, which GET /dailyRun/dailyRun_enabled answers with 404.
CREATE TABLE daily_run_flags (
    org TEXT PRIMARY KEY,
    enabled BIGINT NOT NULL, -- 1 or 0 (one type both backends decode alike)
    updated_at BIGINT NOT NULL
);
