//! What a finished distributed read did on its workers, from the metrics
//! each task sends back with its last message (datafusion-distributed's
//! `collect_metrics`, on by default): its plan with every task's figures,
//! so a read's bytes scanned count the workers' scans, and the bytes and
//! rows each boundary between stages moved, logged per boundary and
//! counted on `/metrics` (`lakehost_cluster_moved_bytes_total`).
//!
//! Moved bytes are Arrow's size in memory before compression, what each
//! receiving task took from its input stage; a task whose input ran on the
//! same worker takes it in process, and it counts too.

use std::{fmt, sync::Arc, time::Duration};

use datafusion::physical_plan::{ExecutionPlan, metrics::MetricValue};
use datafusion_distributed::{
    DistributedExec, DistributedMetricsFormat, rewrite_distributed_plan_with_metrics,
};

/// How long a finished read waits for its tasks' metrics. They come with
/// each task's last message, so they are normally there with the last row;
/// the wait only bounds a worker that died between the two.
const METRICS_WAIT: Duration = Duration::from_secs(2);

/// What one boundary between stages moved, as the receiving tasks counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// `shuffle`, `coalesce` or `broadcast`.
    pub boundary: &'static str,
    pub bytes: u64,
    pub rows: u64,
}

impl fmt::Display for Moved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} B {} rows", self.boundary, self.bytes, self.rows)
    }
}

/// After a read's last row: `plan` with its workers' metrics when it ran
/// distributed (and they came in time), else `plan` as it is. What its
/// stage boundaries moved is logged and counted here.
pub async fn finished_read(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    if plan.downcast_ref::<DistributedExec>().is_none() {
        return plan;
    }
    let rewritten =
        rewrite_distributed_plan_with_metrics(plan.clone(), DistributedMetricsFormat::Aggregated);
    let with_metrics = match tokio::time::timeout(METRICS_WAIT, rewritten).await {
        Ok(Ok(with_metrics)) => with_metrics,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a distributed read's task metrics do not fit its plan");
            return plan;
        }
        Err(_) => {
            tracing::debug!("a distributed read's task metrics did not all come");
            return plan;
        }
    };
    let moved = moved_between_stages(with_metrics.as_ref());
    for stage in &moved {
        crate::observability::metrics::cluster_bytes_moved(stage.boundary, stage.bytes);
    }
    let listed: Vec<String> = moved.iter().map(Moved::to_string).collect();
    tracing::info!(
        moved = %listed.join(", "),
        "distributed read: what each boundary between stages moved, top down"
    );
    with_metrics
}

/// What each boundary between stages in `plan` moved, top down.
fn moved_between_stages(plan: &dyn ExecutionPlan) -> Vec<Moved> {
    let mut moved = Vec::new();
    collect_moved(plan, &mut moved);
    moved
}

fn collect_moved(plan: &dyn ExecutionPlan, moved: &mut Vec<Moved>) {
    if let Some(boundary) = boundary_kind(plan.name()) {
        let metrics = plan.metrics().unwrap_or_default();
        // DataFusion's own metrics are matched by kind (`sum_by_name` finds
        // only named ones).
        let sum = |kind: fn(&MetricValue) -> bool| {
            metrics
                .sum(|metric| kind(metric.value()))
                .map_or(0, |value| value.as_usize() as u64)
        };
        moved.push(Moved {
            boundary,
            bytes: sum(|value| matches!(value, MetricValue::OutputBytes(_))),
            rows: sum(|value| matches!(value, MetricValue::OutputRows(_))),
        });
    }
    for child in plan.children() {
        collect_moved(child.as_ref(), moved);
    }
}

/// The boundary an operator named `name` is, if it is one. By name: after
/// the metrics are added, each operator is wrapped and only its name shows.
fn boundary_kind(name: &str) -> Option<&'static str> {
    match name {
        "NetworkShuffleExec" => Some("shuffle"),
        "NetworkCoalesceExec" => Some("coalesce"),
        "NetworkBroadcastExec" => Some("broadcast"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_boundaries_are_known_by_name_and_nothing_else() {
        assert_eq!(boundary_kind("NetworkShuffleExec"), Some("shuffle"));
        assert_eq!(boundary_kind("NetworkCoalesceExec"), Some("coalesce"));
        assert_eq!(boundary_kind("NetworkBroadcastExec"), Some("broadcast"));
        assert_eq!(boundary_kind("RepartitionExec"), None);
        assert_eq!(boundary_kind("DataSourceExec"), None);
    }

    #[test]
    fn a_moved_boundary_reads_as_one_short_phrase() {
        let moved = Moved {
            boundary: "shuffle",
            bytes: 1024,
            rows: 3,
        };
        assert_eq!(moved.to_string(), "shuffle 1024 B 3 rows");
    }
}
