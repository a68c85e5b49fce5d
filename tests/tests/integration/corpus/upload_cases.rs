//! The upload-tampering cases of `tests/corpus/uploads/` (see the corpus
//! README): the scene each case runs in (five loads with staged files and
//! waiting multipart parts, made through the real upload routes), the one
//! request a case describes (a form POST, an S3 request signed with upload
//! credentials, or a load API call), sent byte for byte, and the state no
//! case may change.

use std::collections::BTreeMap;

use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use lakehost_tests::{
    raw_http::{RawRequest, RawResponse, send},
    s3_signing::{SigningCredentials, form_body, policy_signature, presign_v4, sign_v2, sign_v4},
    *,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ZONE_HOST, lake_state};

/// The loads of a scene, by the name cases use in templates.
const PARTIES: [&str; 5] = ["own", "sibling", "neighbour", "foreign", "zone"];

/// The largest upload the corpus server takes (`uploads.max_file_bytes`),
/// small so that "too large" bodies are cheap.
pub(super) const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How long presigned URLs of the cases last: within the endpoint's
/// 15-minute limit on presigned GETs, so only the case's attack decides.
const PRESIGNED_EXPIRES_S: u32 = 900;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadCase {
    #[serde(default)]
    own_load: OwnLoad,
    #[serde(default)]
    advance_clock_s: i64,
    answer: Answer,
    form: Option<FormCase>,
    s3: Option<S3Case>,
    api: Option<ApiCase>,
}

/// What the own load went through before the case's request.
#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum OwnLoad {
    #[default]
    Open,
    Succeeded,
    Failed,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    status: u16,
    code: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FormCase {
    #[serde(default = "bucket_path")]
    path: String,
    policy: Option<String>,
    #[serde(default)]
    signature: PolicySignature,
    #[serde(default)]
    fields: BTreeMap<String, String>,
    #[serde(default)]
    drop: Vec<String>,
    #[serde(default)]
    append: Vec<[String; 2]>,
    #[serde(default)]
    tamper: Option<Tamper>,
    #[serde(default)]
    file: Payload,
    #[serde(default = "default_filename")]
    filename: String,
}

fn bucket_path() -> String {
    "/{bucket}".into()
}

fn default_filename() -> String {
    "upload.parquet".into()
}

/// Who signs a policy the case writes.
#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum PolicySignature {
    /// The attacker, with the credentials' secret.
    #[default]
    SelfSigned,
    /// Nobody: the descriptor's Signature is kept (the policy was edited).
    Descriptor,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Tamper {
    Signature,
    Body,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Payload {
    #[default]
    Parquet,
    Empty,
    TooLarge,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct S3Case {
    method: String,
    path: String,
    #[serde(default)]
    query: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Payload,
    body_text: Option<String>,
    #[serde(default)]
    auth: S3Auth,
    #[serde(default = "own_access_key")]
    access_key: String,
    #[serde(default = "own_secret")]
    secret: String,
    #[serde(default = "own_token")]
    token: String,
    tamper: Option<Tamper>,
}

fn own_access_key() -> String {
    "{own_access_key}".into()
}

fn own_secret() -> String {
    "{own_secret}".into()
}

fn own_token() -> String {
    "{own_token}".into()
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum S3Auth {
    #[default]
    Sigv4,
    Presigned,
    Sigv2,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiCase {
    #[serde(default = "post")]
    method: String,
    path: String,
    #[serde(default = "own_party", rename = "as")]
    caller: String,
    #[serde(default)]
    body: String,
}

fn post() -> String {
    "POST".into()
}

fn own_party() -> String {
    "own".into()
}

impl UploadCase {
    /// Parses a case and checks that it names one request and an answer
    /// that can fail: an S3 refusal names its Code, an API refusal its message.
    pub(super) fn parse(name: &str, text: &str) -> Self {
        let case: Self = toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let routes = [case.form.is_some(), case.s3.is_some(), case.api.is_some()];
        assert_eq!(
            routes.iter().filter(|r| **r).count(),
            1,
            "{name}: one of [form], [s3], [api]"
        );
        if case.answer.status >= 300 {
            if case.api.is_some() {
                assert!(
                    case.answer.message.is_some(),
                    "{name}: an API refusal names its message"
                );
            } else {
                assert!(
                    case.answer.code.is_some(),
                    "{name}: an S3 refusal names its Code"
                );
            }
        }
        case
    }
}

/// One load of a scene and its descriptor for the file `part_1`.
struct Party {
    load_id: String,
    descriptor: Value,
}

/// The five loads a case runs among, each with `part_1` staged; `own` and
/// `sibling` also have a multipart upload of `part_1` with part 1 waiting.
pub(super) struct Scene {
    /// The role of the attacking user, who owns the own and sibling loads.
    role: &'static str,
    parties: BTreeMap<&'static str, Party>,
    templates: BTreeMap<String, String>,
}

/// A fresh token of the party's user, on its API: the attacker (own and
/// sibling loads) has `role`, the other parties are zone admins.
fn token_of_party(app: &TestApp, party: &str, role: &str) -> String {
    match party {
        "own" | "sibling" => app.token_for(&[role], "[0]"),
        "neighbour" => app.token_of("user-2", &["ZoneAdmin"], "[0]"),
        "foreign" => app.org_token_for("other", &["ZoneAdmin"], "[0]"),
        "zone" => app.zone_token_for("lab", &["ZoneAdmin"], "[0]"),
        other => panic!("no party {other}"),
    }
}

fn host_of_party(party: &str) -> &'static str {
    match party {
        "foreign" => OTHER_ORG_HOST,
        "zone" => ZONE_HOST,
        _ => ORG_HOST,
    }
}

fn upload_host(app: &TestApp) -> String {
    format!("localhost:{}", app.upload_addr.port())
}

fn credentials_of(descriptor: &Value) -> SigningCredentials {
    let sts = &descriptor["sts_credentials"];
    SigningCredentials {
        access_key_id: sts["AccessKeyId"].as_str().unwrap().into(),
        secret_access_key: sts["SecretAccessKey"].as_str().unwrap().into(),
        session_token: sts["SessionToken"].as_str().unwrap().into(),
    }
}

/// The descriptor's form fields.
fn descriptor_fields(descriptor: &Value) -> Vec<(String, String)> {
    descriptor["presigned_url"]["fields"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// Two public trips (service client 901): rows every role may load.
fn trips_file() -> Vec<u8> {
    parquet_bytes(&trips_batch(&[901], 2))
}

fn payload(kind: Payload) -> Vec<u8> {
    match kind {
        Payload::Parquet => trips_file(),
        Payload::Empty => Vec::new(),
        Payload::TooLarge => vec![b'x'; MAX_FILE_BYTES as usize + 1],
    }
}

/// A form POST of `fields` and the file `filename` to `path`.
fn form_post(
    app: &TestApp,
    path: &str,
    fields: &[(String, String)],
    filename: &str,
    file: &[u8],
) -> RawRequest {
    let (content_type, body) = form_body(fields, filename, file);
    let mut request = RawRequest::new("POST", path, &upload_host(app));
    request.set_header("Content-Type", &content_type);
    request.body = body;
    request
}

/// A SigV4-signed S3 request of a descriptor's credentials.
fn signed(
    app: &TestApp,
    method: &str,
    target: &str,
    body: Vec<u8>,
    credentials: &SigningCredentials,
) -> RawRequest {
    let mut request = RawRequest::new(method, target, &upload_host(app));
    request.body = body;
    sign_v4(&mut request, credentials, chrono::Utc::now());
    request
}

impl Scene {
    /// Makes the loads, stages their files through the form route and
    /// starts the multipart uploads; then takes the own load where the case
    /// wants it.
    pub(super) async fn build(app: &TestApp, case: &UploadCase, role: &'static str) -> Self {
        let mut parties = BTreeMap::new();
        for name in PARTIES {
            parties.insert(name, Self::party(app, name, role).await);
        }
        let mut upload_ids = BTreeMap::new();
        for name in ["own", "sibling"] {
            upload_ids.insert(name, Self::start_multipart(app, &parties[name]).await);
        }
        let templates = Self::templates(&parties, &upload_ids);
        let scene = Self {
            role,
            parties,
            templates,
        };
        // A user with no role may load no rows: its load ends, but FAIL.
        let passes = if role == "Nobody" { "FAIL" } else { "SUCCESS" };
        match case.own_load {
            OwnLoad::Open => {}
            OwnLoad::Succeeded => scene.commit_own(app, 2, passes).await,
            OwnLoad::Failed => scene.commit_own(app, 3, "FAIL").await,
        }
        scene
    }

    async fn party(app: &TestApp, name: &'static str, role: &str) -> Party {
        let host = host_of_party(name);
        let token = token_of_party(app, name, role);
        let body = json!({"load_type": "APPEND_ONLY", "table_name": "trips"}).to_string();
        let (status, created) = app.post_raw(host, LOAD, &token, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{name}: {created}");
        let load_id = created["loadId"].as_str().unwrap().to_string();
        let descriptor = app
            .file_descriptor_on(host, &token, &load_id, Some("part_1"))
            .await;
        let bucket_path = format!("/{}", descriptor["bucket"].as_str().unwrap());
        let fields = descriptor_fields(&descriptor);
        let staged = send(
            app.upload_addr,
            &form_post(app, &bucket_path, &fields, "part_1.parquet", &trips_file()),
        )
        .await;
        assert_eq!(staged.status, 204, "{name}: staging: {}", staged.text());
        Party {
            load_id,
            descriptor,
        }
    }

    /// CreateMultipartUpload and UploadPart 1 of the party's `part_1`; the
    /// upload id.
    async fn start_multipart(app: &TestApp, party: &Party) -> String {
        let credentials = credentials_of(&party.descriptor);
        let object = format!(
            "/{}/{}",
            party.descriptor["bucket"].as_str().unwrap(),
            party.descriptor["path"].as_str().unwrap()
        );
        let created = send(
            app.upload_addr,
            &signed(
                app,
                "POST",
                &format!("{object}?uploads"),
                Vec::new(),
                &credentials,
            ),
        )
        .await;
        assert_eq!(created.status, 200, "{}", created.text());
        let upload_id = created.xml("UploadId").expect("UploadId");
        let part = send(
            app.upload_addr,
            &signed(
                app,
                "PUT",
                &format!("{object}?partNumber=1&uploadId={upload_id}"),
                trips_file(),
                &credentials,
            ),
        )
        .await;
        assert_eq!(part.status, 200, "{}", part.text());
        upload_id
    }

    fn templates(
        parties: &BTreeMap<&'static str, Party>,
        upload_ids: &BTreeMap<&'static str, String>,
    ) -> BTreeMap<String, String> {
        let mut templates = BTreeMap::new();
        for (name, party) in parties {
            let credentials = credentials_of(&party.descriptor);
            for (what, value) in [
                ("load", party.load_id.clone()),
                (
                    "key",
                    party.descriptor["path"].as_str().unwrap().to_string(),
                ),
                ("access_key", credentials.access_key_id),
                ("secret", credentials.secret_access_key),
                ("token", credentials.session_token),
            ] {
                templates.insert(format!("{name}_{what}"), value);
            }
        }
        for (name, id) in upload_ids {
            templates.insert(format!("{name}_upload_id"), id.clone());
        }
        templates.insert(
            "bucket".into(),
            parties["own"].descriptor["bucket"].as_str().unwrap().into(),
        );
        templates.insert("forged_token".into(), forged_token(&templates));
        templates
    }

    /// Commits the own load with a check_sum of `count` rows (2 passes, 3
    /// fails) and waits for its end and the removal of its staged files.
    async fn commit_own(&self, app: &TestApp, count: u32, ends: &str) {
        let token = token_of_party(app, "own", self.role);
        let own = &self.parties["own"];
        let body = json!({"check_sum": {"count(*)": count}}).to_string();
        let (status, reply) = app.commit(&token, &own.load_id, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
        let ended = app.wait_for_load(&token, &own.load_id).await;
        assert_eq!(ended["LoadStatus"], ends, "{ended}");
        let staged = lakehost::load::staging_path(own.descriptor["path"].as_str().unwrap());
        let parts = lakehost::load::parts_prefix(&own.load_id);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while app.lake_has(staged.as_ref()).await || !listing(app, &parts).await.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the staged files of a committed load stay"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `text` with every `{name}` of the scene filled in; a `{name}` the
    /// scene does not know is a mistake in the case (`${filename}`, S3's own
    /// placeholder, stays).
    pub(super) fn fill(&self, text: &str) -> String {
        let mut filled = text.to_string();
        for (name, value) in &self.templates {
            filled = filled.replace(&format!("{{{name}}}"), value);
        }
        let mut rest = filled.as_str();
        while let Some(at) = rest.find('{') {
            let tail = &rest[at + 1..];
            let name_len = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            let placeholder = name_len > 0 && tail[name_len..].starts_with('}');
            let s3_own = rest[..at].ends_with('$');
            assert!(
                !placeholder || s3_own,
                "unknown template {{{}}} in {text}",
                &tail[..name_len]
            );
            rest = tail;
        }
        filled
    }

    /// The loads of the scene as they stand: state and files.
    pub(super) async fn loads_state(&self, app: &TestApp) -> Vec<String> {
        let mut state = Vec::new();
        for (name, party) in &self.parties {
            let record = app.store.load(&party.load_id).await.unwrap().unwrap();
            state.push(format!(
                "{name}: {:?} {:?} {:?}",
                record.state, record.error_type, record.staging_removed_at
            ));
            for file in app.store.load_files(&party.load_id).await.unwrap() {
                state.push(format!(
                    "{name}: {} {} requested {} uploaded {:?} size {:?}",
                    file.file_key,
                    file.object_key,
                    file.requested_at,
                    file.uploaded_at,
                    file.size_bytes
                ));
            }
        }
        state
    }

    /// Moves the clock as the case says, then sends its request.
    pub(super) async fn attack(&self, app: &TestApp, case: &UploadCase) -> RawResponse {
        app.clock
            .advance(chrono::Duration::seconds(case.advance_clock_s));
        let (addr, request) = self.request(app, case);
        send(addr, &request).await
    }

    /// The request the case describes.
    fn request(&self, app: &TestApp, case: &UploadCase) -> (std::net::SocketAddr, RawRequest) {
        if let Some(form) = &case.form {
            (app.upload_addr, self.form_request(app, form))
        } else if let Some(s3) = &case.s3 {
            (app.upload_addr, self.s3_request(app, s3))
        } else {
            let api = case.api.as_ref().expect("one route");
            (app.addr, self.api_request(app, api))
        }
    }

    fn form_request(&self, app: &TestApp, form: &FormCase) -> RawRequest {
        let mut fields = descriptor_fields(&self.parties["own"].descriptor);
        if let Some(policy) = &form.policy {
            let encoded = STANDARD.encode(self.fill(policy));
            if form.signature == PolicySignature::SelfSigned {
                let signature = policy_signature(&self.templates["own_secret"], &encoded);
                set_field(&mut fields, "Signature", signature);
            }
            set_field(&mut fields, "Policy", encoded);
        }
        for (name, value) in &form.fields {
            set_field(&mut fields, name, self.fill(value));
        }
        fields.retain(|(name, _)| !form.drop.contains(name));
        for [name, value] in &form.append {
            fields.push((name.clone(), self.fill(value)));
        }
        match form.tamper {
            None => {}
            Some(Tamper::Signature) => {
                let signature = fields
                    .iter_mut()
                    .find(|(n, _)| n == "Signature")
                    .expect("a Signature to tamper with");
                signature.1 = flip_first(&signature.1);
            }
            Some(Tamper::Body) => panic!("[form] tampers with the signature only"),
        }
        form_post(
            app,
            &self.fill(&form.path),
            &fields,
            &self.fill(&form.filename),
            &payload(form.file),
        )
    }

    fn s3_request(&self, app: &TestApp, s3: &S3Case) -> RawRequest {
        let mut target = self.fill(&s3.path);
        if !s3.query.is_empty() {
            target = format!("{target}?{}", self.fill(&s3.query));
        }
        let mut request = RawRequest::new(&s3.method, &target, &upload_host(app));
        for (name, value) in &s3.headers {
            request.set_header(name, &self.fill(value));
        }
        request.body = match &s3.body_text {
            Some(text) => self.fill(text).into_bytes(),
            None => payload(s3.body),
        };
        let credentials = SigningCredentials {
            access_key_id: self.fill(&s3.access_key),
            secret_access_key: self.fill(&s3.secret),
            session_token: self.fill(&s3.token),
        };
        let now = chrono::Utc::now();
        match s3.auth {
            S3Auth::Sigv4 => sign_v4(&mut request, &credentials, now),
            S3Auth::Presigned => presign_v4(&mut request, &credentials, now, PRESIGNED_EXPIRES_S),
            S3Auth::Sigv2 => sign_v2(&mut request, &credentials, now),
        }
        match s3.tamper {
            None => {}
            Some(Tamper::Signature) => {
                let authorization = request.header("Authorization").expect("header-signed");
                request.set_header("Authorization", &flip_last(authorization));
            }
            Some(Tamper::Body) => {
                for byte in &mut request.body {
                    *byte ^= 0x55;
                }
            }
        }
        request
    }

    fn api_request(&self, app: &TestApp, api: &ApiCase) -> RawRequest {
        let host = host_of_party(&api.caller);
        let mut request = RawRequest::new(
            &api.method,
            &self.fill(&api.path),
            &format!("{host}:{}", app.addr.port()),
        );
        let token = token_of_party(app, &api.caller, self.role);
        request.set_header("Authorization", &format!("Bearer {token}"));
        request.set_header("Content-Type", "application/json");
        request.body = self.fill(&api.body).into_bytes();
        request
    }

    /// Whether `response` is the case's answer; what it was instead.
    pub(super) fn judge(&self, case: &UploadCase, response: &RawResponse) -> Result<(), String> {
        let answer = &case.answer;
        let code = response.xml("Code");
        let message = if case.api.is_some() {
            response.json_message()
        } else {
            response.xml("Message")
        };
        let expected_message = answer.message.as_deref().map(|m| self.fill(m));
        let right = response.status == answer.status
            && (answer.code.is_none() || code == answer.code)
            && (expected_message.is_none() || message == expected_message);
        if right {
            Ok(())
        } else {
            Err(format!(
                "expected {} {:?} {:?}, got {} {}",
                answer.status,
                answer.code,
                expected_message,
                response.status,
                response.text()
            ))
        }
    }
}

fn set_field(fields: &mut Vec<(String, String)>, name: &str, value: String) {
    match fields.iter_mut().find(|(n, _)| n == name) {
        Some(field) => field.1 = value,
        None => fields.push((name.to_string(), value)),
    }
}

/// The own session token with its grant rewritten to the sibling's load and
/// key, the own signature kept: a widened token.
fn forged_token(templates: &BTreeMap<String, String>) -> String {
    let token = &templates["own_token"];
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "the session token's shape: {token}");
    let mut grant: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap())
        .expect("the grant is JSON");
    grant["l"] = json!(templates["sibling_load"]);
    grant["k"] = json!(templates["sibling_key"]);
    let payload = URL_SAFE_NO_PAD.encode(grant.to_string());
    format!("{}.{payload}.{}", parts[0], parts[2])
}

fn flip(c: char) -> char {
    if c == 'A' { 'B' } else { 'A' }
}

fn flip_first(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    chars[0] = flip(chars[0]);
    chars.into_iter().collect()
}

/// A SigV4 Authorization header with the last hex digit of its signature changed.
fn flip_last(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let last = chars.len() - 1;
    chars[last] = if chars[last] == '0' { '1' } else { '0' };
    chars.into_iter().collect()
}

async fn listing(app: &TestApp, prefix: &object_store::path::Path) -> Vec<String> {
    use tokio_stream::StreamExt as _;
    let mut listed = app.lake.object_store().list(Some(prefix));
    let mut names = Vec::new();
    while let Some(meta) = listed.next().await {
        names.push(meta.unwrap().location.to_string());
    }
    names
}

/// What no case may change: the catalog, every lake and staging object
/// (with its bytes), and the scene's loads.
pub(super) async fn upload_state(
    app: &TestApp,
    scene: &Scene,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (tables, files) = lake_state(app).await;
    (tables, files, scene.loads_state(app).await)
}
