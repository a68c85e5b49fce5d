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
//! - `replica.rs`: `Cluster`, this replica's part, which ties them to its
//!   read sessions (the `engine::distributed::Coordinator`) and its worker
//!   listener; `failure.rs`: a worker's death as a query's reason, which
//!   the sessions report through `engine::distributed::worker_failure`.
//!
//! Without the feature `Cluster` has no value, so callers hold an
//! `Option<Arc<Cluster>>` that is always `None`.

#[cfg(not(feature = "distributed"))]
mod disabled;
#[cfg(feature = "distributed")]
mod failure;
#[cfg(feature = "distributed")]
mod members;
#[cfg(feature = "distributed")]
mod replica;
#[cfg(feature = "distributed")]
mod secret;
#[cfg(feature = "distributed")]
mod worker;

#[cfg(not(feature = "distributed"))]
pub use disabled::Cluster;
#[cfg(feature = "distributed")]
pub use replica::Cluster;
