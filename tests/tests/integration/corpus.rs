//! The hostile-input corpus (`tests/corpus/`, see its README): every SQL
//! case runs over HTTP for every role against a seeded server and must get
//! the answer it names; every malformed parquet file is uploaded and
//! committed by every role and must fail its load as INVALID_PARQUET; every
//! token is sent to the identity endpoint and must get its status; every
//! upload-tampering request, made by a caller of every role, must get its
//! refusal (`corpus/upload_cases.rs`). No case may change the catalog or the
//! lake's files.

mod upload_cases;

use std::{collections::BTreeMap, path::Path};

use lakehost_tests::*;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use upload_cases::{MAX_FILE_BYTES, Scene, UploadCase, upload_state};

const ROLES: [&str; 6] = [
    "Nobody",
    "PublicConsumer",
    "OwnServiceClientConsumer",
    "OwnServiceClientAnalyst",
    "AllServiceClientAnalyst",
    "ZoneAdmin",
];
const ZONE_HOST: &str = "lab.demo.api.localhost";
/// The public service client, whose rows every role may load.
const PUBLIC_CLIENT: i64 = 901;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlCase {
    sql: String,
    answer: String,
    #[serde(default)]
    roles: BTreeMap<String, String>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    not_in_rows: Vec<String>,
}

/// The case files of one corpus folder, by name.
fn cases(folder: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(folder);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    files
}

/// What a caller got, as the corpus names it; the result's cells when it ran.
async fn answer_of(app: &TestApp, host: &str, token: &str, sql: &str) -> (String, String) {
    let (status, body) = app.submit(host, token, &json!({ "query": sql })).await;
    let message = body["message"].as_str().unwrap_or_default();
    // The spec's error shape: `{"message": "..."}` and nothing else.
    let spec_error = !message.is_empty() && body.as_object().is_some_and(|o| o.len() == 1);
    let named = match status {
        StatusCode::ACCEPTED => None,
        StatusCode::BAD_REQUEST if spec_error => Some("invalid"),
        StatusCode::FORBIDDEN if message == DATA_DENIED => Some("data"),
        StatusCode::FORBIDDEN if message == EXECUTE_DENIED => Some("execute"),
        StatusCode::FORBIDDEN if message == STATEMENT_DENIED => Some("statement"),
        StatusCode::FORBIDDEN if message == CREATE_DENIED => Some("create"),
        _ => return (format!("{status} {body}"), String::new()),
    };
    if let Some(named) = named {
        return (named.to_string(), String::new());
    }
    let id = body["queryId"].as_str().unwrap();
    let ended = app.wait_for(host, token, id, None).await;
    match ended["status"]["state"].as_str() {
        Some("SUCCEEDED") => {
            let (_, page) = app.result_page(host, token, id, None).await;
            ("rows".into(), page.to_string())
        }
        _ => {
            let reason = ended["status"]["stateChangeReason"]
                .as_str()
                .unwrap_or_default();
            let named = match reason {
                DATA_DENIED => "data".to_string(),
                EXECUTE_DENIED => "execute".to_string(),
                _ => format!("FAILED {reason}"),
            };
            (named, String::new())
        }
    }
}

/// Every org's and zone's tables and views, and every file of the lake with the
/// SHA-256 of its bytes (query results aside; staged uploads included):
/// what no case may change.
async fn lake_state(app: &TestApp) -> (Vec<String>, Vec<String>) {
    let mut tables = Vec::new();
    for (org, zone) in [("demo", None), ("demo", Some("lab")), ("other", None)] {
        for table in app.store.catalog_of(org, zone).await.unwrap().1 {
            tables.push(format!(
                "{org}/{zone:?}/{}/{}",
                table.database_id, table.name
            ));
        }
        for view in app.store.views_of(org, zone).await.unwrap() {
            tables.push(format!(
                "{org}/{zone:?}/{}/{} view {}",
                view.database_id, view.name, view.sql
            ));
        }
    }
    let mut files = Vec::new();
    let root = app.data_dir.join("lake");
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(&root).unwrap().display().to_string();
            if relative.starts_with("_results") {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                files.push(format!("{relative} {:x}", Sha256::digest(&bytes)));
            }
        }
    }
    tables.sort();
    files.sort();
    (tables, files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sql_case_gets_its_answer_for_every_role_and_changes_nothing() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let before = lake_state(&app).await;
    let mut wrong = Vec::new();
    for (name, text) in cases("sql") {
        let case: SqlCase = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for role in ROLES {
            let (host, token) = match case.host.as_deref() {
                Some("zone") => (ZONE_HOST, app.zone_token_for("lab", &[role], "[1]")),
                None => (ORG_HOST, app.token_for(&[role], "[1]")),
                Some(other) => panic!("{name}: unknown host {other}"),
            };
            let expected = case.roles.get(role).unwrap_or(&case.answer);
            let (actual, cells) = answer_of(&app, host, &token, &case.sql).await;
            if &actual != expected {
                wrong.push(format!(
                    "{name} as {role}: expected {expected}, got {actual}"
                ));
            }
            for leak in &case.not_in_rows {
                if cells.contains(leak.as_str()) {
                    wrong.push(format!("{name} as {role}: the result holds {leak:?}"));
                }
            }
            if lake_state(&app).await != before {
                wrong.push(format!("{name} as {role}: the catalog or the lake changed"));
                break;
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ParquetCase {
    bytes: Option<String>,
    head: Option<String>,
    tail_magic: Option<String>,
    footer_length: Option<toml::Value>,
    keep_bytes: Option<String>,
    garble_footer: Option<bool>,
    nest: Option<usize>,
    claim_rows: Option<u8>,
    chunk_size: Option<i64>,
    /// Every column chunk's first page header declaring this many compressed
    /// bytes (an integer, or `"max"`: the most its field's width holds).
    page_size: Option<toml::Value>,
    /// The commit's check_sum; `{"count(*)": 2}` unless given.
    check_sum: Option<toml::Table>,
    /// The load's ErrorType; ParquetValidation (INVALID_PARQUET) unless given.
    answer: Option<String>,
    /// Another ErrorType for a role (a file whose rows read comes to the
    /// service-client check, which a user with no role never passes).
    #[serde(default)]
    roles: BTreeMap<String, String>,
}

/// A parquet file with a service_client_id and a column of `levels` structs
/// nested around an integer, without the Arrow schema in its metadata (so
/// only the parquet schema, which readers build recursively, describes it).
fn nested_file(levels: usize) -> Vec<u8> {
    use datafusion::arrow::{
        array::{ArrayRef, Int64Array, StructArray},
        datatypes::Field,
        record_batch::RecordBatch,
    };
    use datafusion::parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};
    let mut array: ArrayRef = std::sync::Arc::new(Int64Array::from(vec![1, 2]));
    for _ in 0..levels {
        let field = std::sync::Arc::new(Field::new("f", array.data_type().clone(), true));
        array = std::sync::Arc::new(StructArray::from(vec![(field, array)]));
    }
    let clients: ArrayRef = std::sync::Arc::new(Int64Array::from(vec![PUBLIC_CLIENT; 2]));
    let batch =
        RecordBatch::try_from_iter(vec![("service_client_id", clients), ("deep", array)]).unwrap();
    let mut bytes = Vec::new();
    let options = ArrowWriterOptions::new().with_skip_arrow_metadata(true);
    let mut writer =
        ArrowWriter::try_new_with_options(&mut bytes, batch.schema(), options).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    bytes
}

/// `file` (whose footer is `footer` bytes long) with a footer written again
/// in which every column chunk declares `size` compressed bytes.
fn with_chunk_size(mut file: Vec<u8>, footer: usize, size: i64) -> Vec<u8> {
    use datafusion::parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter};
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::from(file.clone()))
        .unwrap();
    let row_groups = metadata
        .row_groups()
        .iter()
        .map(|group| {
            let columns = group
                .columns()
                .iter()
                .map(|chunk| {
                    chunk
                        .clone()
                        .into_builder()
                        .set_total_compressed_size(size)
                        .build()
                        .unwrap()
                })
                .collect();
            group
                .clone()
                .into_builder()
                .set_column_metadata(columns)
                .build()
                .unwrap()
        })
        .collect();
    let edited = metadata.into_builder().set_row_groups(row_groups).build();
    file.truncate(file.len() - 8 - footer);
    ParquetMetaDataWriter::new(&mut file, &edited)
        .finish()
        .unwrap();
    file
}

/// A parquet file of `batch` with no column or offset index.
fn without_page_indexes(batch: &datafusion::arrow::record_batch::RecordBatch) -> Vec<u8> {
    use datafusion::parquet::{
        arrow::ArrowWriter,
        file::properties::{EnabledStatistics, WriterProperties},
    };
    let properties = WriterProperties::builder()
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    bytes
}

/// `file` with the first page header of every column chunk declaring
/// `size` compressed bytes, written in the width the writer gave the field
/// (a varint padded with continuation bytes), so that nothing else moves.
fn with_page_size(mut file: Vec<u8>, size: &toml::Value) -> Vec<u8> {
    use datafusion::parquet::file::metadata::ParquetMetaDataReader;
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::from(file.clone()))
        .unwrap();
    let first_pages: Vec<usize> = metadata
        .row_groups()
        .iter()
        .flat_map(|group| group.columns())
        .map(|chunk| {
            let data = chunk.data_page_offset();
            chunk.dictionary_page_offset().unwrap_or(data) as usize
        })
        .collect();
    for start in first_pages {
        // A PageHeader opens with three i32 fields in thrift's compact
        // protocol (header byte 0x15: the next field, an i32): the page type,
        // its uncompressed size, its compressed size.
        let mut at = start;
        for field in 1..=3 {
            assert_eq!(
                file[at], 0x15,
                "field {field} of the page header at {start}"
            );
            at += 1;
            let value_at = at;
            while file[at] & 0x80 != 0 {
                at += 1;
            }
            at += 1;
            if field == 3 {
                let width = at - value_at;
                let most = ((1u64 << (7 * width)) - 1) / 2;
                let size: i64 = match size {
                    toml::Value::Integer(n) => *n,
                    toml::Value::String(s) if s == "max" => most.min(i32::MAX as u64) as i64,
                    other => panic!("page_size {other}"),
                };
                let zigzag = ((size << 1) ^ (size >> 63)) as u64;
                assert!(
                    zigzag >> (7 * width) == 0,
                    "page_size {size} needs more than {width} bytes"
                );
                for (i, byte) in file[value_at..at].iter_mut().enumerate() {
                    let more = if i + 1 < width { 0x80 } else { 0 };
                    *byte = ((zigzag >> (7 * i)) & 0x7f) as u8 | more;
                }
            }
        }
    }
    file
}

impl ParquetCase {
    /// The file the case describes (README: one edit of a good file).
    fn file(&self) -> Vec<u8> {
        if let Some(bytes) = &self.bytes {
            return bytes.as_bytes().to_vec();
        }
        if let Some(levels) = self.nest {
            // Arrow's writer recurses per level too: a thread with room.
            return std::thread::Builder::new()
                .stack_size(256 << 20)
                .spawn(move || nested_file(levels))
                .unwrap()
                .join()
                .unwrap();
        }
        let mut file = if self.page_size.is_some() {
            // Without page indexes: a reader that has an offset index takes
            // each page's extent from it and never follows the header's size.
            without_page_indexes(&trips_batch(&[PUBLIC_CLIENT], 2))
        } else {
            parquet_bytes(&trips_batch(&[PUBLIC_CLIENT], 2))
        };
        let end = file.len();
        let footer_at = end - 8;
        let footer = u32::from_le_bytes(file[footer_at..footer_at + 4].try_into().unwrap());
        if let Some(head) = &self.head {
            file[..4].copy_from_slice(head.as_bytes());
        }
        if let Some(magic) = &self.tail_magic {
            file[end - 4..].copy_from_slice(magic.as_bytes());
        }
        if let Some(length) = &self.footer_length {
            let length = match length {
                toml::Value::Integer(n) => u32::try_from(*n).unwrap(),
                toml::Value::String(s) if s == "file_size" => end as u32,
                other => panic!("footer_length {other}"),
            };
            file[footer_at..footer_at + 4].copy_from_slice(&length.to_le_bytes());
        }
        if self.garble_footer == Some(true) {
            let start = footer_at - footer as usize;
            for (i, byte) in file[start..footer_at].iter_mut().enumerate() {
                *byte = (i * 37 % 251) as u8;
            }
        }
        if let Some(rows) = self.claim_rows {
            // Every count of 2 in the footer (the file's and the row group's
            // num_rows, each column chunk's num_values: an i64 field after
            // the one before it, zigzag 2 = 0x04) made `rows`, the same width.
            assert!(rows < 64, "a one-byte zigzag count");
            let start = footer_at - footer as usize;
            let mut at = start;
            while at + 1 < footer_at {
                if file[at..at + 2] == [0x16, 0x04] {
                    file[at + 1] = rows * 2;
                    at += 2;
                } else {
                    at += 1;
                }
            }
        }
        if let Some(size) = self.chunk_size {
            file = with_chunk_size(file, footer as usize, size);
        }
        if let Some(size) = &self.page_size {
            file = with_page_size(file, size);
        }
        if self.keep_bytes.as_deref() == Some("half") {
            file.truncate(end / 2);
        }
        file
    }

    fn check_sum(&self) -> serde_json::Value {
        match &self.check_sum {
            Some(table) => serde_json::to_value(table).unwrap(),
            None => json!({"count(*)": 2}),
        }
    }

    /// The ErrorType and the first item's detail a load by `role` must end
    /// with.
    fn answer(&self, role: &str) -> (&str, &str) {
        match self
            .roles
            .get(role)
            .or(self.answer.as_ref())
            .map(String::as_str)
        {
            None | Some("ParquetValidation") => ("ParquetValidation", "INVALID_PARQUET"),
            Some("CheckSumError") => ("CheckSumError", "CHECKSUM_MISMATCH"),
            Some("ServiceClientError") => ("ServiceClientError", "SERVICE_CLIENT_MISMATCH"),
            Some(other) => panic!("answer {other}"),
        }
    }
}

/// Whether the catalog and the lake come back to `state` within ten seconds.
async fn settles_to(app: &TestApp, state: &(Vec<String>, Vec<String>)) -> bool {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if lake_state(app).await == *state {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_parquet_case_fails_its_load_as_invalid_parquet_for_every_role() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let before = lake_state(&app).await;
    let mut wrong = Vec::new();
    for (name, text) in cases("parquet") {
        let case: ParquetCase = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let file = case.file();
        // Every role may load public rows (the spec's load row of the
        // capability table), and the file's rows are public.
        for role in ROLES {
            let loader = app.token_for(&[role], "[1]");
            let load = app
                .create_load(
                    &loader,
                    &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
                )
                .await;
            app.stage_bytes_on(ORG_HOST, &loader, &load, "bad", file.clone())
                .await;
            let body = json!({"check_sum": case.check_sum()}).to_string();
            let (status, reply) = app.commit(&loader, &load, &body).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{name} as {role}: {reply}");
            let ended = app.wait_for_load(&loader, &load).await;
            let got = (
                ended["ErrorType"].as_str().unwrap_or_default(),
                ended["ErrorDetails"][0]["ErrorType"]
                    .as_str()
                    .unwrap_or_default(),
            );
            if got != case.answer(role) {
                wrong.push(format!("{name} as {role}: {ended}"));
            }
            // The load's staged file is removed just after it ended.
            if !settles_to(&app, &before).await {
                wrong.push(format!("{name} as {role}: the catalog or the lake changed"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The server goes on serving.
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let (status, _) = app.get(ORG_HOST, SECURITY_METADATA, Some(&admin)).await;
    assert_eq!(status, StatusCode::OK);
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenCase {
    answer: u16,
    message: Option<String>,
    /// The identity API's `error` field of a 403 (default `Unauthorized`).
    error: Option<String>,
    sign: Option<String>,
    alg: Option<String>,
    kid: Option<String>,
    #[serde(default)]
    header: toml::Table,
    #[serde(default)]
    claims: toml::Table,
    #[serde(default)]
    remove_claims: Vec<String>,
    signature: Option<String>,
    after: Option<String>,
    raw: Option<String>,
    /// A claim `padding` of this many bytes.
    pad_claim: Option<usize>,
}

fn b64(bytes: &[u8]) -> String {
    use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A TOML value of a case as JSON, with its templates filled in: `now+N`
/// and `now-N` (seconds from the server's clock; quoted, they stay text),
/// `{issuer}`, `{ISSUER}`, `{issuer_base}`, `{other_issuer}`.
fn case_value(app: &TestApp, value: &toml::Value) -> serde_json::Value {
    let now = app.now();
    match value {
        toml::Value::String(text) => {
            let time = |t: &str| {
                let (sign, n) = match t.strip_prefix("now") {
                    Some("") => (1, "0"),
                    Some(rest) => (if rest.starts_with('-') { -1 } else { 1 }, &rest[1..]),
                    None => return None,
                };
                n.parse::<i64>().ok().map(|n| now + sign * n)
            };
            if let Some(seconds) = time(text) {
                return json!(seconds);
            }
            if let Some(quoted) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"'))
                && let Some(seconds) = time(quoted)
            {
                return json!(seconds.to_string());
            }
            let issuer = app.issuer("demo");
            let base = issuer.trim_end_matches("/realms/demo").to_string();
            json!(
                text.replace("{issuer_base}", &base)
                    .replace("{issuer}", &issuer)
                    .replace("{ISSUER}", &issuer.to_uppercase())
                    .replace("{other_issuer}", &app.issuer("other"))
            )
        }
        toml::Value::Array(items) => items.iter().map(|v| case_value(app, v)).collect(),
        toml::Value::Table(table) => table
            .iter()
            .map(|(k, v)| (k.clone(), case_value(app, v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => serde_json::to_value(other).unwrap(),
    }
}

/// The realm's RSA public key as PEM, and its JWKS modulus.
fn realm_public_key(app: &TestApp) -> (String, String) {
    use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
    use rsa::{
        pkcs8::{DecodePrivateKey as _, EncodePublicKey as _, LineEnding},
        traits::PublicKeyParts as _,
    };
    let private =
        rsa::RsaPrivateKey::from_pkcs8_pem(&app.realm_key("demo").private_key_pem).unwrap();
    let public = rsa::RsaPublicKey::from(&private);
    let pem = public.to_public_key_pem(LineEnding::LF).unwrap();
    (pem, URL_SAFE_NO_PAD.encode(public.n().to_bytes_be()))
}

impl TokenCase {
    /// The token the case describes (README: one change of a valid token).
    fn token(&self, app: &TestApp) -> String {
        use jsonwebtoken::{Algorithm, EncodingKey, crypto::sign};
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let mut claims = app.valid_claims("demo");
        for (name, value) in &self.claims {
            claims[name] = case_value(app, value);
        }
        for name in &self.remove_claims {
            claims.as_object_mut().unwrap().remove(name);
        }
        if let Some(bytes) = self.pad_claim {
            claims["padding"] = json!("x".repeat(bytes));
        }
        let alg = self.alg.as_deref().unwrap_or("RS256");
        let mut header = json!({"alg": alg, "typ": "JWT"});
        match self.kid.as_deref() {
            None => header["kid"] = json!(app.realm_key("demo").kid),
            Some("none") => {}
            Some("attacker") => header["kid"] = json!(attacker_key().kid),
            Some(kid) => header["kid"] = json!(kid),
        }
        for (name, value) in &self.header {
            header[name] = case_value(app, value);
        }
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rsa = |key: &lakehost::idp::StoredKey| {
            EncodingKey::from_rsa_pem(key.private_key_pem.as_bytes()).unwrap()
        };
        let algorithm = alg.parse::<Algorithm>();
        let signature = match self.sign.as_deref().unwrap_or("realm") {
            _ if self.signature.is_some() => self.signature.clone().unwrap(),
            "none" => String::new(),
            "realm" => sign(
                input.as_bytes(),
                &rsa(&app.realm_key("demo")),
                algorithm.unwrap(),
            )
            .unwrap(),
            "other_realm" => sign(
                input.as_bytes(),
                &rsa(&app.realm_key("other")),
                algorithm.unwrap(),
            )
            .unwrap(),
            "attacker" => {
                sign(input.as_bytes(), &rsa(&attacker_key()), algorithm.unwrap()).unwrap()
            }
            "hs256_public_pem" | "hs256_public_n" => {
                let (pem, n) = realm_public_key(app);
                let secret = match self.sign.as_deref() {
                    Some("hs256_public_pem") => pem,
                    _ => n,
                };
                sign(
                    input.as_bytes(),
                    &EncodingKey::from_secret(secret.as_bytes()),
                    Algorithm::HS256,
                )
                .unwrap()
            }
            "es256_attacker" => {
                let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
                let key = EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap();
                sign(input.as_bytes(), &key, Algorithm::ES256).unwrap()
            }
            other => panic!("unknown sign {other}"),
        };
        let token = format!("{input}.{signature}");
        match self.after.as_deref() {
            None => token,
            Some("strip_signature") => format!("{input}."),
            Some("drop_signature") => input,
            Some("extra_segment") => format!("{token}.{signature}"),
            Some("widen_payload") => {
                claims["service_client_id"] = json!("[0]");
                let header = input.split('.').next().unwrap();
                format!(
                    "{header}.{}.{signature}",
                    b64(claims.to_string().as_bytes())
                )
            }
            Some(other) => panic!("unknown after {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_token_case_gets_its_answer_and_writes_nothing() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let before = lake_state(&app).await;
    let mut wrong = Vec::new();
    for (name, text) in cases("tokens") {
        let case: TokenCase = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let token = case.token(&app);
        let (status, body) = app.get(ORG_HOST, SECURITY_METADATA, Some(&token)).await;
        let message = case.message.clone().unwrap_or_else(|| match case.answer {
            401 => "Unauthorized".into(),
            _ => String::new(),
        });
        // The whole body in the spec's shape: the gateway's `{message}` for
        // a 401, the identity API's `{error, message}` for a 403.
        let body_ok = match case.answer {
            401 => body == json!({ "message": message }),
            403 => {
                let error = case.error.as_deref().unwrap_or("Unauthorized");
                body == json!({ "error": error, "message": message })
            }
            _ => message.is_empty() || body["message"] == message.as_str(),
        };
        if status.as_u16() != case.answer || !body_ok {
            wrong.push(format!(
                "{name}: expected {} {message:?}, got {status} {body}",
                case.answer
            ));
        }
        // A refused token is refused alike when it tries to write.
        if case.answer == 401 {
            let write = json!({ "query": "CREATE TABLE demo_sandbox.token_case AS SELECT 1 AS x" });
            let (status, body) = app.submit(ORG_HOST, &token, &write).await;
            if status != StatusCode::UNAUTHORIZED || body != json!({ "message": message }) {
                wrong.push(format!("{name}: a write got {status} {body}"));
            }
        }
    }
    if lake_state(&app).await != before {
        wrong.push("the catalog or the lake changed".into());
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The items of `before` and `after` that are not in both, marked - and +.
fn differences(before: &[String], after: &[String]) -> Vec<String> {
    let gone = before
        .iter()
        .filter(|b| !after.contains(b))
        .map(|b| format!("-{b}"));
    let new = after
        .iter()
        .filter(|a| !before.contains(a))
        .map(|a| format!("+{a}"));
    gone.chain(new).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upload_tampering_case_gets_its_answer_for_every_role_and_changes_nothing() {
    let app = spawn_app_with(|config| {
        config.uploads.max_file_bytes = MAX_FILE_BYTES;
        // Cases move the clock; no staged file may be swept meanwhile.
        config.uploads.staging_ttl_s = 365 * 24 * 3600;
    })
    .await;
    seed_demo_lake(&app).await;
    let mut wrong = Vec::new();
    for (name, text) in cases("uploads") {
        let case = UploadCase::parse(&name, &text);
        for role in ROLES {
            let scene = Scene::build(&app, &case, role).await;
            let before = upload_state(&app, &scene).await;
            let response = scene.attack(&app, &case).await;
            if let Err(why) = scene.judge(&case, &response) {
                wrong.push(format!("{name} as {role}: {why}"));
            }
            let after = upload_state(&app, &scene).await;
            if after != before {
                let changed = [
                    differences(&before.0, &after.0),
                    differences(&before.1, &after.1),
                    differences(&before.2, &after.2),
                ]
                .concat();
                wrong.push(format!("{name} as {role}: changed {changed:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
