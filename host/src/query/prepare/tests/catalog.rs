//! The catalog `prepare`'s table runs on: an org with its four standard
//! databases and a few tables whose files are catalogued, never written.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::{DataType, Field, Schema};

use super::super::{Prepared, QueryError, Target, prepare};
use crate::{
    auth::{Access, Role},
    engine::{
        layout::{SERVICE_CLIENT_COLUMN, StringColumns, TableLayout},
        session::{SessionScope, session_for},
        statement::classify,
    },
    lake::Lake,
    store::{Store, catalog::NewDataFile},
};

pub(super) const ORG: &str = "demo";
/// The database unqualified names resolve in (the org's lake, as the
/// query service sets it).
const LAKE: &str = "demo_lake_v2";
/// Every caller's `service_client_id` claim.
const OWN_CLIENT: u32 = 1;

/// An org `demo` with its four standard databases in a fresh store; a lake
/// on disk that nothing is written to.
pub(super) struct Catalog {
    pub(super) store: Store,
    _dir: tempfile::TempDir,
    lake: Lake,
}

impl Catalog {
    /// Tables of columns (n, service_client_id), each with one file per
    /// service client listed: `trips`, `summary` and `raw` hold clients 1
    /// and 2 (and 901 in the first two); the sandbox's `mine` holds only
    /// the callers' client 1, `shared` 1 and 2, `empty` nothing.
    pub(super) async fn seeded() -> Catalog {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("store.db"))
            .await
            .unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        store.ensure_standard_databases(ORG, None).await.unwrap();
        let catalog = Catalog {
            _dir: dir,
            store,
            lake,
        };
        catalog.table("demo_lake_v2", "trips", &[1, 2, 901]).await;
        catalog
            .table("demo_insights", "summary", &[1, 2, 901])
            .await;
        catalog.table("demo_data_input", "raw", &[1, 2]).await;
        catalog.table("demo_sandbox", "mine", &[1]).await;
        catalog.table("demo_sandbox", "shared", &[1, 2]).await;
        catalog.table("demo_sandbox", "empty", &[]).await;
        catalog
    }

    async fn table(&self, database: &str, name: &str, clients: &[i64]) {
        let database = self
            .store
            .database(ORG, None, database)
            .await
            .unwrap()
            .unwrap();
        let rows = Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new(SERVICE_CLIENT_COLUMN, DataType::Int64, false),
        ]);
        let entry = TableLayout::for_rows(&rows)
            .unwrap()
            .catalog_entry(&database.id, name, 0);
        let table = self
            .store
            .create_table(
                &database.id,
                name,
                &entry.schema_json,
                &entry.partition_columns,
                0,
            )
            .await
            .unwrap();
        let files: Vec<NewDataFile> = clients
            .iter()
            .map(|client| NewDataFile {
                path: format!(
                    "{}/{name}/service_client_id={client}/0.parquet",
                    database.name
                ),
                service_client_id: Some(*client),
                partition_values: BTreeMap::from([(
                    SERVICE_CLIENT_COLUMN.to_string(),
                    client.to_string(),
                )]),
                row_count: 1,
                size_bytes: 100,
                load_id: None,
            })
            .collect();
        self.store.commit_files(&table.id, &files, 0).await.unwrap();
    }

    /// What `role` (claiming service client 1) gets for `sql`: classified,
    /// then prepared in a session of its own, as `QueryService::plan` does
    /// (a statement `classify` refuses is `QueryError::Invalid` there too).
    pub(super) async fn prepare(&self, role: Role, sql: &str) -> Result<Prepared, QueryError> {
        let classified = classify(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
        let access = Access::new([role.name()], [OWN_CLIENT]);
        let scope = SessionScope {
            org: ORG,
            zone: None,
            access: &access,
            default_database: LAKE,
            memory_limit: None,
            metadata_cache: None,
            strings: StringColumns::Views,
            read_cache: None,
            cluster: None,
            target_partitions: 0,
        };
        let context = session_for(&self.store, &self.lake, &scope).await.unwrap();
        let target = Target {
            store: &self.store,
            org: ORG,
            zone: None,
            default_database: LAKE,
            access: &access,
        };
        prepare(&context, &target, sql, &classified, 0).await
    }
}
