//! lakehost: the data-lake API service (see `ARCHITECTURE.md` for the map).
//!
//! The binary in `main.rs` reads configuration and starts tracing; everything
//! else is here so tests can start the whole server in-process on port 0.

pub mod api;
pub mod auth;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod dailyrun;
pub mod drain;
pub mod edge;
pub mod engine;
#[cfg(feature = "flight-sql")]
pub mod flight;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod idp;
pub mod import;
pub mod lake;
pub mod lease;
pub mod listener;
pub mod load;
pub mod locks;
pub mod observability;
pub mod periodic;
#[cfg(feature = "pg-wire")]
pub mod pg;
pub mod pipeline;
pub mod query;
pub mod readiness;
pub mod retention;
pub mod retired;
pub mod runtime;
pub mod s3;
pub mod startup;
pub mod store;

pub use config::Config;
pub use startup::Application;
