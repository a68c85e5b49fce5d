//! The query engine: DataFusion sessions over the catalogued lake, with access
//! decided inside the table provider's scan (after partition pruning, so a
//! `count(*)` answered from statistics cannot slip past it).
//!
//! This module knows no HTTP; its errors are plain enums that `api/error.rs`
//! maps to the spec's messages. Being built across issue 3: the provider and
//! the session catalog exist; statement policy, jobs, results and the endpoints
//! are still to come.

pub mod provider;
pub mod session;
pub mod statement;

pub use provider::{AccessDenied, LakeTableProvider};
