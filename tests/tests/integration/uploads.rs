//! Uploads through the descriptor's two routes with real clients: a form POST
//! with `requests`, and boto3 (`put_object`, multipart `upload_file`) with the
//! temporary credentials against the embedded S3-compatible endpoint; parquet
//! written by pyarrow. Then every way a descriptor can be misused.

use std::path::{Path, PathBuf};

use lakehost_tests::*;
use serde_json::{Value, json};

struct Upload {
    app: TestApp,
    python: PathBuf,
    token: String,
    load_id: String,
    dir: tempfile::TempDir,
}

/// A server, an OPEN load of the admin, and a scratch directory.
async fn setup(adjust: impl FnOnce(&mut lakehost::Config)) -> Upload {
    let python = test_python();
    let app = spawn_app_with(adjust).await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let load_id = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    Upload {
        app,
        python,
        token,
        load_id,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Upload {
    async fn client(&self, command: &str, args: Value) -> Value {
        upload_client(&self.python, command, &args).await
    }

    async fn descriptor(&self, file_key: &str) -> Value {
        self.app
            .file_descriptor(&self.token, &self.load_id, Some(file_key))
            .await
    }

    /// A parquet file of `rows` trips written by pyarrow.
    async fn parquet(&self, name: &str, rows: u64) -> PathBuf {
        let path = self.dir.path().join(name);
        let written = self
            .client("write_parquet", json!({"path": path, "rows": rows}))
            .await;
        assert_eq!(written["ok"], true);
        path
    }

    fn bytes(&self, name: &str, size: usize) -> PathBuf {
        let path = self.dir.path().join(name);
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, data).unwrap();
        path
    }

    async fn form_post(&self, descriptor: &Value, file: &Path, extra: Value) -> Value {
        let mut args = json!({"descriptor": descriptor, "file": file});
        if let Value::Object(map) = extra {
            args.as_object_mut().unwrap().extend(map);
        }
        self.client("form_post", args).await
    }

    async fn boto3(&self, command: &str, descriptor: &Value, extra: Value) -> Value {
        let mut args = json!({"descriptor": descriptor, "endpoint": self.app.upload_endpoint()});
        if let Value::Object(map) = extra {
            args.as_object_mut().unwrap().extend(map);
        }
        self.client(command, args).await
    }
}

fn refused(reply: &Value, status: u16, code: &str) {
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["status"], status, "{reply}");
    assert_eq!(reply["code"], code, "{reply}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_form_post_with_requests_stages_the_file_and_a_second_overwrites_it() {
    let up = setup(|_| {}).await;
    let descriptor = up.descriptor("part_1").await;
    let first = up.parquet("first.parquet", 100).await;
    let reply = up.form_post(&descriptor, &first, json!({})).await;
    assert_eq!(reply, json!({"ok": true, "status": 204}));
    assert_eq!(
        up.app.staged_object(&descriptor).await.unwrap(),
        std::fs::read(&first).unwrap()
    );
    let files = up.app.store.load_files(&up.load_id).await.unwrap();
    assert_eq!(
        files[0].size_bytes,
        Some(std::fs::metadata(&first).unwrap().len() as i64)
    );

    // The same file_key again: a new descriptor, the same object, new bytes.
    let again = up.descriptor("part_1").await;
    let second = up.parquet("second.parquet", 3000).await;
    let reply = up.form_post(&again, &second, json!({})).await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(
        up.app.staged_object(&descriptor).await.unwrap(),
        std::fs::read(&second).unwrap()
    );
    assert_eq!(up.app.store.load_files(&up.load_id).await.unwrap().len(), 1);

    // Staged rows are in no query: the table does not even exist yet.
    let (status, reply) = up
        .app
        .submit(
            ORG_HOST,
            &up.token,
            &json!({"query": "SELECT count(*) FROM trips"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .ends_with("table 'lakehost.demo_lake_v2.trips' not found"),
        "{reply}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn boto3_puts_and_uploads_in_parts_with_the_temporary_credentials() {
    let up = setup(|_| {}).await;
    let descriptor = up.descriptor("small").await;
    let file = up.parquet("small.parquet", 500).await;
    let reply = up
        .boto3("put_object", &descriptor, json!({"file": file}))
        .await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(
        up.app.staged_object(&descriptor).await.unwrap(),
        std::fs::read(&file).unwrap()
    );

    // Over 16 MB: boto3 switches to a multipart upload (8 MB parts).
    let big = up.bytes("big.bin", 20 * 1024 * 1024 + 12345);
    let descriptor = up.descriptor("big").await;
    let reply = up
        .boto3("upload_file", &descriptor, json!({"file": big}))
        .await;
    assert_eq!(reply["ok"], true, "{reply}");
    let staged = up.app.staged_object(&descriptor).await.unwrap();
    assert_eq!(staged.len(), 20 * 1024 * 1024 + 12345);
    assert!(staged == std::fs::read(&big).unwrap(), "bytes differ");
    let files = up.app.store.load_files(&up.load_id).await.unwrap();
    assert!(files.iter().all(|f| f.uploaded_at.is_some()), "{files:?}");
    // No part is left behind.
    let parts = lakehost::load::parts_prefix(&up.load_id);
    let listed = list(&up.app, &parts).await;
    assert!(listed.is_empty(), "{listed:?}");
}

async fn list(app: &TestApp, prefix: &object_store::path::Path) -> Vec<String> {
    use tokio_stream::StreamExt as _;
    let mut listing = app.lake.object_store().list(Some(prefix));
    let mut names = Vec::new();
    while let Some(meta) = listing.next().await {
        names.push(meta.unwrap().location.to_string());
    }
    names
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_credentials_allow_their_own_key_and_upload_operations_only() {
    let up = setup(|_| {}).await;
    let descriptor = up.descriptor("part_1").await;
    let file = up.parquet("a.parquet", 10).await;

    let other_key = format!("demo/-/{}/other.parquet", up.load_id);
    let reply = up
        .boto3(
            "put_object",
            &descriptor,
            json!({"file": file, "key": other_key}),
        )
        .await;
    refused(&reply, 403, "AccessDenied");
    let reply = up
        .boto3(
            "put_object",
            &descriptor,
            json!({"file": file, "bucket": "another-bucket"}),
        )
        .await;
    refused(&reply, 403, "AccessDenied");
    for operation in [
        "get_object",
        "delete_object",
        "list_objects",
        "list_buckets",
    ] {
        let reply = up
            .boto3(
                "other_operation",
                &descriptor,
                json!({"operation": operation}),
            )
            .await;
        refused(&reply, 403, "AccessDenied");
    }
    // A wrong secret, or a session token of other credentials.
    let reply = up
        .boto3(
            "put_object",
            &descriptor,
            json!({"file": file, "secret": "not-the-secret"}),
        )
        .await;
    refused(&reply, 403, "SignatureDoesNotMatch");
    let other = up.descriptor("part_2").await;
    let reply = up
        .boto3(
            "put_object",
            &descriptor,
            json!({"file": file, "session_token": other["sts_credentials"]["SessionToken"]}),
        )
        .await;
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["code"], "InvalidToken", "{reply}");
    assert!(up.app.staged_object(&descriptor).await.is_none());
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn expired_policies_and_credentials_are_refused() {
    let up = setup(|_| {}).await;
    let descriptor = up.descriptor("part_1").await;
    let file = up.parquet("a.parquet", 10).await;
    up.app.clock.advance(chrono::Duration::minutes(61));

    let reply = up.form_post(&descriptor, &file, json!({})).await;
    refused(&reply, 403, "AccessDenied");
    assert_eq!(
        reply["message"],
        "Invalid according to Policy: Policy expired."
    );
    let reply = up
        .boto3("put_object", &descriptor, json!({"file": file}))
        .await;
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["code"], "ExpiredToken", "{reply}");
    assert!(up.app.staged_object(&descriptor).await.is_none());

    // A new descriptor works again.
    let token = up.app.token_for(&["ZoneAdmin"], "[0]");
    let fresh = up
        .app
        .file_descriptor(&token, &up.load_id, Some("part_1"))
        .await;
    let reply = up.form_post(&fresh, &file, json!({})).await;
    assert_eq!(reply["ok"], true, "{reply}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn tampered_or_widened_forms_are_refused() {
    let up = setup(|_| {}).await;
    let descriptor = up.descriptor("part_1").await;
    let file = up.parquet("a.parquet", 10).await;

    let signature = descriptor["presigned_url"]["fields"]["Signature"]
        .as_str()
        .unwrap();
    let mut tampered = signature.to_string();
    tampered.replace_range(0..1, if signature.starts_with('A') { "B" } else { "A" });
    let reply = up
        .form_post(
            &descriptor,
            &file,
            json!({"override_fields": {"Signature": tampered}}),
        )
        .await;
    refused(&reply, 403, "SignatureDoesNotMatch");

    // A field the policy has no condition for.
    let reply = up
        .form_post(
            &descriptor,
            &file,
            json!({"override_fields": {"Content-Type": "text/plain"}}),
        )
        .await;
    refused(&reply, 403, "AccessDenied");
    assert_eq!(
        reply["message"],
        "Invalid according to Policy: Extra input fields: content-type"
    );

    // Another key than the policy's.
    let other_key = format!("demo/-/{}/other.parquet", up.load_id);
    let reply = up
        .form_post(
            &descriptor,
            &file,
            json!({"override_fields": {"key": other_key}}),
        )
        .await;
    refused(&reply, 403, "AccessDenied");

    // A policy the caller signed themselves with the temporary secret, for
    // another key and a later expiry: the grant still decides.
    let credentials = &descriptor["sts_credentials"];
    let signed = up
        .client(
            "sign_policy",
            json!({"descriptor": descriptor, "policy": {
                "expiration": "2099-01-01T00:00:00Z",
                "conditions": [
                    {"bucket": "lakehost-uploads"}, {"key": other_key},
                    {"x-amz-security-token": credentials["SessionToken"]},
                ]
            }}),
        )
        .await;
    let reply = up
        .form_post(
            &descriptor,
            &file,
            json!({"override_fields": {
                "key": other_key, "Policy": signed["Policy"], "Signature": signed["Signature"]
            }}),
        )
        .await;
    refused(&reply, 403, "AccessDenied");
    assert_eq!(
        reply["message"],
        "Upload credentials do not allow access to this bucket or key."
    );

    // Without the policy at all.
    let reply = up
        .form_post(&descriptor, &file, json!({"drop_fields": ["Policy"]}))
        .await;
    refused(&reply, 400, "InvalidArgument");
    assert!(up.app.staged_object(&descriptor).await.is_none());
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn an_upload_over_the_size_range_is_refused_and_leaves_nothing() {
    let up = setup(|config| config.uploads.max_file_bytes = 4096).await;
    let descriptor = up.descriptor("part_1").await;
    let big = up.bytes("big.bin", 10_000);
    let reply = up.form_post(&descriptor, &big, json!({})).await;
    refused(&reply, 400, "EntityTooLarge");
    let reply = up
        .boto3("put_object", &descriptor, json!({"file": big}))
        .await;
    refused(&reply, 400, "EntityTooLarge");
    assert!(up.app.staged_object(&descriptor).await.is_none());

    // Within the range it goes through; a later oversized try keeps it.
    let small = up.bytes("small.bin", 4096);
    let reply = up.form_post(&descriptor, &small, json!({})).await;
    assert_eq!(reply["ok"], true, "{reply}");
    let reply = up.form_post(&descriptor, &big, json!({})).await;
    refused(&reply, 400, "EntityTooLarge");
    assert_eq!(up.app.staged_object(&descriptor).await.unwrap().len(), 4096);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn staged_files_of_loads_that_never_commit_are_removed() {
    let up = setup(|config| config.uploads.staging_ttl_s = 3600 * 24).await;
    let descriptor = up.descriptor("part_1").await;
    let file = up.parquet("a.parquet", 10).await;
    assert_eq!(
        up.form_post(&descriptor, &file, json!({})).await["ok"],
        true
    );

    // Not yet stale.
    up.app.clock.advance(chrono::Duration::hours(23));
    assert_eq!(up.app.loads.sweep_stale_staging().await.unwrap(), 0);
    assert!(up.app.staged_object(&descriptor).await.is_some());

    up.app.clock.advance(chrono::Duration::hours(2));
    assert_eq!(up.app.loads.sweep_stale_staging().await.unwrap(), 1);
    assert!(up.app.staged_object(&descriptor).await.is_none());
    let files = up.app.store.load_files(&up.load_id).await.unwrap();
    assert_eq!(files[0].uploaded_at, None);
    // The load itself stays OPEN and takes files again.
    let token = up.app.token_for(&["ZoneAdmin"], "[0]");
    let (status, body) = up
        .app
        .get(ORG_HOST, &format!("{LOAD}/{}", up.load_id), Some(&token))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["LoadStatus"], "OPEN");
    let fresh = up
        .app
        .file_descriptor(&token, &up.load_id, Some("part_1"))
        .await;
    assert_eq!(up.form_post(&fresh, &file, json!({})).await["ok"], true);
    assert_eq!(up.app.loads.sweep_stale_staging().await.unwrap(), 0);
}
