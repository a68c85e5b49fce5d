//! The integration tests: one binary, the real server on port 0, HTTP as a
//! client speaks it. Helpers live in `lakehost_tests` (tests/src/lib.rs).

mod commits;
mod comotion_sdk;
mod connections;
mod contract;
mod corpus;
mod dailyrun;
mod drain;
mod expression_limits;
mod fair_sharing;
mod flight_sql;
mod fuzz;
mod gateway;
mod golden;
mod idempotency;
mod idp;
mod loads;
mod memory_limits;
mod metrics;
mod paging;
mod pg_wire;
mod pipeline_data;
mod query_access;
mod query_api;
mod query_permissions;
mod query_wait;
mod result_formats;
mod result_reuse;
mod routing;
mod s3_lake;
mod sdk_compat;
mod security_metadata;
mod store;
mod token_attacks;
mod uploads;
