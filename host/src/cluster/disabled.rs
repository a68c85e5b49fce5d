//! A build without the cargo feature `distributed`: no cluster can exist
//! (`Config::validate` refuses `distributed.enabled` first), so every
//! caller's `Option<Arc<Cluster>>` is `None` and these are never reached.

/// A build without distributed queries: no cluster can exist.
#[derive(Debug)]
pub enum Cluster {}

impl Cluster {
    pub fn from_config(
        _config: &crate::config::Config,
    ) -> anyhow::Result<Option<std::sync::Arc<Self>>> {
        Ok(None)
    }

    pub fn start(&self, _stop: tokio_util::sync::CancellationToken) {
        match *self {}
    }

    pub fn worker_router(
        &self,
        _lake: &crate::lake::Lake,
        _metadata_cache: std::sync::Arc<
            datafusion::execution::cache::cache_manager::FileMetadataCache,
        >,
    ) -> axum::Router {
        match *self {}
    }
}

impl crate::engine::distributed::Coordinator for Cluster {
    fn coordinate(
        &self,
        _builder: datafusion::execution::SessionStateBuilder,
    ) -> datafusion::common::Result<datafusion::execution::SessionStateBuilder> {
        match *self {}
    }
}
