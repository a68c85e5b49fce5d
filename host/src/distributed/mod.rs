//! Reads bigger than one process, run on several lakehost processes by
//! datafusion-distributed (docs/design/distributed-queries.md; the choice
//! in docs/decisions.md): the transport between them. Built with the cargo
//! feature `distributed`. The planner's side (the size gate, what a read's
//! workers did) is `engine::distributed`.
//!
//! - `worker.rs`: the stages other replicas send, run in a session like a
//!   query's (memory limit, bounded functions, the lake and nothing else).
//! - `secret.rs`: the cluster secret, checked before any plan is decoded,
//!   and carried on every call between processes.
//! - `members.rs`: which configured workers answer; stages go to those.
//! - `cluster.rs`: `Cluster`, which ties them to a replica's sessions and
//!   listener; `failure.rs`: a worker's death as a query's reason.
//!
//! Without the feature `Cluster` has no value, so callers hold an
//! `Option<Arc<Cluster>>` that is always `None`.

#[cfg(feature = "distributed")]
mod cluster;
#[cfg(not(feature = "distributed"))]
mod disabled;
#[cfg(feature = "distributed")]
mod failure;
#[cfg(feature = "distributed")]
mod members;
#[cfg(feature = "distributed")]
mod secret;
#[cfg(feature = "distributed")]
mod worker;

#[cfg(feature = "distributed")]
pub use cluster::{Cluster, workers_reached};
#[cfg(not(feature = "distributed"))]
pub use disabled::{Cluster, worker_failure, workers_reached};
#[cfg(feature = "distributed")]
pub use failure::worker_failure;
