//! What an operator watches: metrics (`metrics.rs`, rendered on
//! `server.metrics_listen`), the bounded label values they may carry
//! (`labels.rs`), log lines (`logs.rs`: text or JSON) and the job
//! transitions that are both logged and counted (`jobs.rs`), the retention
//! sweep's figures (`retention.rs`); with the `otel`
//! feature, spans exported to an OpenTelemetry collector (`traces.rs`).
//!
//! Code paths call the small functions here rather than the `metrics` or
//! `tracing` macros with names of their own, so every metric name and label
//! is in one place. It knows no HTTP (`api/metrics.rs` serves the scrape)
//! and must never put caller input (SQL, ids, tokens) into a label.

pub mod jobs;
pub mod labels;
pub mod logs;
pub mod metrics;
pub mod retention;
#[cfg(feature = "otel")]
pub mod traces;
