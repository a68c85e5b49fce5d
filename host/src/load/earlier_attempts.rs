//! Files of a commit's earlier attempts: an attempt that died, or lost its
//! lease, in its insert left `<load>-a<k>-<n>.parquet` files in the table's
//! folder that no catalog row names; the attempt that ends the commit
//! deletes them.

use futures::StreamExt as _;
use object_store::path::Path as ObjectPath;

use crate::{
    engine::table_writer::delete_paths,
    lake::Lake,
    store::{catalog::standard_databases, loads::LoadRecord},
};

/// Deletes the files earlier attempts of an ended commit wrote and never
/// recorded (`<load>-a<k>-<n>.parquet`, k below this attempt's): an
/// attempt that died, or lost its lease, in its insert left them in the
/// table's folder. Only a commit run more than once lists the folder.
pub(super) async fn sweep_earlier_attempts(lake: &Lake, record: &LoadRecord) {
    if record.attempts <= 1 {
        return;
    }
    let load = &record.load;
    let database = standard_databases(&load.org, load.zone.as_deref()).lake;
    let folder = ObjectPath::from(format!("{database}/{}", load.table_name));
    let any_attempt = format!("{}-a", load.id);
    let this_attempt = format!("{}-a{}-", load.id, record.attempts);
    let store = lake.object_store();
    let mut earlier = Vec::new();
    let mut listing = store.list(Some(&folder));
    while let Some(meta) = listing.next().await {
        match meta {
            Ok(meta) => {
                let name = meta.location.filename().unwrap_or_default();
                if name.starts_with(&any_attempt) && !name.starts_with(&this_attempt) {
                    earlier.push(meta.location.to_string());
                }
            }
            Err(e) => {
                tracing::warn!(load = %load.id, error = %e, "earlier attempts' files not listed");
                return;
            }
        }
    }
    delete_paths(store.as_ref(), &earlier).await;
}
