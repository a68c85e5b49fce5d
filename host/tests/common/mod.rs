//! What the host crate's process tests share (`cli.rs`, `crash.rs`,
//! `replicas.rs`): a small parquet file to load, and a token of the embedded
//! provider's demo admin. Each test file uses some of it.
#![allow(dead_code)]

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Int64Array, RecordBatch},
        datatypes::{DataType, Field, Schema},
    },
    parquet::arrow::ArrowWriter,
};

/// A parquet file of `rows` rows: `first_column` counting from 0, and
/// `service_client_id` cycling through 1..=`service_clients`.
pub fn parquet(first_column: &str, rows: i64, service_clients: i64) -> Vec<u8> {
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new(first_column, DataType::Int64, false),
            Field::new("service_client_id", DataType::Int64, false),
        ])),
        vec![
            Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(
                (0..rows)
                    .map(|i| 1 + i % service_clients)
                    .collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    bytes
}

/// A token of the embedded provider's `demo-admin` client from the server at
/// `base` (client credentials).
pub async fn demo_admin_token(http: &reqwest::Client, base: &str) -> String {
    let reply: serde_json::Value = http
        .post(format!("{base}/realms/demo/protocol/openid-connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "demo-admin"),
            ("client_secret", "demo-admin-secret"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    reply["access_token"].as_str().unwrap().to_string()
}
