//! Issue 47: pipelines deployed over the API (docs/pipeline-deploy.md), as
//! an org's admin uses them: a component uploaded by digest, a manifest
//! version naming it, activated and rolled back; the load's `/pipeline`
//! record of what judged it; every refusal with its status and body; zones
//! apart from their org; two replicas on one Postgres and one S3 lake; and
//! a version activated while a commit runs.

use lakehost_tests::*;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

const COMPONENTS: &str = "/v2/pipeline/components";
const ZONE_HOST: &str = "lab.demo.api.localhost";
/// Every scope an org's pipeline owner uses (and the loads' and queries').
const ORG_SCOPES: &str = "query:read query:write load:read load:write pipeline:read pipeline:write";

/// The example step (a real load component), the org's own.
fn guard() -> &'static [u8] {
    lakehost::pipeline::builtin::component("reject_columns")
        .unwrap()
        .1
}

/// A daily step (the daily run's SQL transform), for the wrong pipeline.
fn daily_step() -> &'static [u8] {
    lakehost::pipeline::builtin::component("sql_transform")
        .unwrap()
        .1
}

/// `sha256:<hex>` of `bytes`.
fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The default load pipeline with a `guard` step (step 5) naming
/// `component`, forbidding `column`.
fn manifest_with_guard(component: &str, column: &str) -> String {
    format!(
        "{}\n[[steps]]\nname = \"guard\"\ncomponent = \"{component}\"\n\
         grants = [\"staged-files\", \"log\"]\n[steps.config]\nforbidden = [\"{column}\"]\n",
        default_load_manifest()
    )
}

/// Points `pipeline.dir` at an empty folder: without a version, the org
/// runs the built-in default.
fn no_pipeline_files(config: &mut lakehost::Config) {
    let dir = config.storage.data_dir.join("pipelines");
    std::fs::create_dir_all(&dir).unwrap();
    config.pipeline.dir = dir;
}

/// An Org API token of `org` with these roles and this `scope` claim.
fn org_token(app: &TestApp, org: &str, roles: &[&str], scope: &str) -> String {
    let mut claims = app.valid_claims(org);
    claims["scope"] = json!(scope);
    claims["resource_access"] = json!({ "svc_api": { "roles": roles } });
    claims["service_client_id"] = json!("[0]");
    app.sign(org, &claims)
}

/// The demo org's pipeline owner: ZoneAdmin with every scope.
fn admin(app: &TestApp) -> String {
    org_token(app, "demo", &["ZoneAdmin"], ORG_SCOPES)
}

/// The ZoneAdmin of zone `lab`, with the zone's scopes.
fn zone_admin(app: &TestApp) -> String {
    let mut claims = app.valid_claims("demo");
    claims["aud"] = json!("svc_api_lab");
    claims["scope"] = json!(
        "lab:query:read lab:query:write lab:load:read lab:load:write \
         lab:pipeline:read lab:pipeline:write"
    );
    claims["resource_access"] = json!({ "svc_api_lab": { "roles": ["ZoneAdmin"] } });
    claims["service_client_id"] = json!("[0]");
    app.sign("demo", &claims)
}

/// Any request with an optional token and body; status and JSON body.
async fn send(
    app: &TestApp,
    method: reqwest::Method,
    host: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, Vec<u8>)>,
) -> (StatusCode, Value) {
    let mut request = app.request(method, host, path);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some((content_type, bytes)) = body {
        request = request.header("Content-Type", content_type).body(bytes);
    }
    read(request.send().await.expect("request sent")).await
}

/// PUT a component under `path_digest`.
async fn put_component_as(
    app: &TestApp,
    host: &str,
    token: &str,
    path_digest: &str,
    bytes: &[u8],
) -> (StatusCode, Value) {
    let path = format!("{COMPONENTS}/{path_digest}");
    let body = Some(("application/wasm", bytes.to_vec()));
    send(app, reqwest::Method::PUT, host, &path, Some(token), body).await
}

/// PUT a component under its own digest.
async fn put_component(
    app: &TestApp,
    host: &str,
    token: &str,
    bytes: &[u8],
) -> (StatusCode, Value) {
    put_component_as(app, host, token, &digest(bytes), bytes).await
}

/// POST a manifest as a new `kind` version.
async fn post_version(
    app: &TestApp,
    host: &str,
    token: &str,
    kind: &str,
    text: &str,
) -> (StatusCode, Value) {
    let path = format!("/v2/pipeline/{kind}/versions");
    let body = Some(("application/toml", text.as_bytes().to_vec()));
    send(app, reqwest::Method::POST, host, &path, Some(token), body).await
}

/// PUT `/v2/pipeline/load/active` with a raw JSON body.
async fn activate_raw(app: &TestApp, host: &str, token: &str, body: &str) -> (StatusCode, Value) {
    let body = Some(("application/json", body.as_bytes().to_vec()));
    let path = "/v2/pipeline/load/active";
    send(app, reqwest::Method::PUT, host, path, Some(token), body).await
}

/// Activates load version `version` on `host`; panics unless 200.
async fn activate(app: &TestApp, host: &str, token: &str, version: i64) -> Value {
    let (status, body) =
        activate_raw(app, host, token, &json!({ "version": version }).to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["version"], version, "{body}");
    assert_eq!(body["activatedBy"], "user-1", "{body}");
    assert!(body["activatedAt"].is_string(), "{body}");
    body
}

/// Stores the guard and makes a load version of the default pipeline plus
/// the guard forbidding `column`; panics unless 201. The version's body.
async fn guard_version(app: &TestApp, host: &str, token: &str, column: &str) -> (String, Value) {
    let (status, stored) = put_component(app, host, token, guard()).await;
    assert!(
        matches!(status, StatusCode::CREATED | StatusCode::OK),
        "{status} {stored}"
    );
    let text = manifest_with_guard(&digest(guard()), column);
    let (status, version) = post_version(app, host, token, "load", &text).await;
    assert_eq!(status, StatusCode::CREATED, "{version}");
    (text, version)
}

/// Commits two trips of service client 1 on `host`: the loadId and the
/// ended resource.
async fn commit_two_trips(app: &TestApp, host: &str, token: &str) -> (String, Value) {
    let id = app
        .start_commit_on(host, token, &trips_batch(&[1], 2), json!({"count(*)": 2}))
        .await;
    let ended = app.wait_for_load_on(host, token, &id).await;
    (id, ended)
}

/// GET /v2/load/{id}/pipeline on `host`; panics unless 200.
async fn judged(app: &TestApp, host: &str, token: &str, id: &str) -> Value {
    let (status, body) = app
        .get(host, &format!("{LOAD}/{id}/pipeline"), Some(token))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["loadId"], id, "{body}");
    body
}

/// The `(name, outcome)` of each step of a `/pipeline` record.
fn outcomes(judged: &Value) -> Vec<(String, String)> {
    judged["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

const DEFAULT_STEPS: [&str; 5] = [
    "validate_parquet",
    "enforce_service_clients",
    "verify_checksums",
    "match_schema",
    "insert",
];

/// The default steps passed (the insert's rows pending), then the guard,
/// the last step, failed the load naming the column.
fn assert_guard_failed(judged: &Value, column: &str) {
    let mut want: Vec<(String, String)> = DEFAULT_STEPS
        .iter()
        .map(|s| (s.to_string(), "passed".to_string()))
        .collect();
    want.push(("guard".into(), "failed".into()));
    assert_eq!(outcomes(judged), want, "{judged}");
    let message = judged["steps"][5]["message"]
        .as_str()
        .expect("the guard's message");
    assert!(message.contains(column), "{judged}");
}

/// Every step of the default pipeline passed, and nothing else ran.
fn assert_default_passed(judged: &Value) {
    let want: Vec<(String, String)> = DEFAULT_STEPS
        .iter()
        .map(|s| (s.to_string(), "passed".to_string()))
        .collect();
    assert_eq!(outcomes(judged), want, "{judged}");
}

/// The keys of a JSON object, sorted.
fn keys(body: &Value) -> Vec<String> {
    let mut keys: Vec<String> = body.as_object().expect("object").keys().cloned().collect();
    keys.sort();
    keys
}

/// PUTs a component over a plain TCP stream, with the head and as much of
/// the body as given, and reads the answer without sending the rest (a
/// server that refuses before the body's end then closes on a client with
/// nothing more in flight, and the answer is read, never a reset).
/// `framing` is the body's header (`Content-Length: N` or
/// `Transfer-Encoding: chunked`). Status and JSON body.
async fn put_raw(
    app: &TestApp,
    token: &str,
    path_digest: &str,
    framing: &str,
    sent: &[u8],
) -> (u16, Value) {
    use tokio::io::AsyncWriteExt as _;
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "PUT {COMPONENTS}/{path_digest} HTTP/1.1\r\nHost: {ORG_HOST}:{}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/wasm\r\n\
         {framing}\r\n\r\n",
        app.addr.port(),
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(sent).await.unwrap();
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        lakehost_tests::raw_http::read_answer(&mut stream),
    )
    .await
    .expect("an answer before the body's end")
    .expect("an answer, not a closed connection");
    (
        answer.status,
        serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_and_manifests_are_refused_with_a_status_and_a_reason() {
    // Small enough that a few more bytes than a step are over it.
    let cap = guard().len().max(daily_step().len()) as u64 + 1024;
    let app = spawn_app_with(|c| {
        no_pipeline_files(c);
        c.pipeline.max_component_bytes = cap;
    })
    .await;
    let admin = admin(&app);

    // The path is not sha256: and 64 lowercase hex digits.
    let hex = &digest(guard())["sha256:".len()..];
    for path in [
        format!("sha256:{}", hex.to_uppercase()),
        format!("sha256:{}", &hex[..63]),
        format!("sha512:{hex}"),
        hex.to_string(),
    ] {
        let (status, body) = put_component_as(&app, ORG_HOST, &admin, &path, guard()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let message = body["message"].as_str().expect("message");
        assert!(message.contains("sha256:"), "{path}: {body}");
    }

    // The body's digest is another.
    let declared = digest(b"another body");
    let (status, body) = put_component_as(&app, ORG_HOST, &admin, &declared, guard()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({"message": format!("the body's digest is {}, not {declared}", digest(guard()))})
    );

    // Not a component: text, and a core WebAssembly module.
    for bytes in [&b"not webassembly at all"[..], b"\0asm\x01\0\0\0"] {
        let (status, body) = put_component(&app, ORG_HOST, &admin, bytes).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].is_string(), "{body}");
        let (status, body) = app
            .get(
                ORG_HOST,
                &format!("{COMPONENTS}/{}", digest(bytes)),
                Some(&admin),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "a refused body was stored: {body}"
        );
    }

    // Over the cap: from Content-Length, before the body is read, and a
    // body without one as soon as it passes the cap.
    let big = vec![0u8; cap as usize + 1];
    let framing = format!("Content-Length: {}", big.len());
    let (status, body) = put_raw(&app, &admin, &digest(&big), &framing, &[]).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body, json!({"message": "Request Entity Too Large"}));
    let mut chunk = format!("{:x}\r\n", big.len()).into_bytes();
    chunk.extend_from_slice(&big);
    chunk.extend_from_slice(b"\r\n");
    let framing = "Transfer-Encoding: chunked";
    let (status, body) = put_raw(&app, &admin, &digest(&big), framing, &chunk).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body, json!({"message": "Request Entity Too Large"}));

    // A digest never stored.
    let never = digest(b"never stored");
    let (status, body) = app
        .get(ORG_HOST, &format!("{COMPONENTS}/{never}"), Some(&admin))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        body,
        json!({"message": format!("component {never} was not found")})
    );

    // Manifests: each refusal names its key, and none makes a version.
    let (status, stored) = put_component(&app, ORG_HOST, &admin, daily_step()).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    assert_eq!(stored["world"], "daily-step", "{stored}");
    let default = default_load_manifest();
    let refused = [
        // A digest this org never stored.
        (manifest_with_guard(&never, "city"), "steps[5].component"),
        // A daily step in the load pipeline.
        (
            manifest_with_guard(&digest(daily_step()), "city"),
            "steps[5].component",
        ),
        // A key the format does not have.
        (
            default.replacen("version = 1\n", "version = 1\ncolour = \"red\"\n", 1),
            "colour",
        ),
        // A time limit over the operator's.
        (
            default.replace("time_limit_ms = 600000", "time_limit_ms = 999999999999"),
            "steps[4].time_limit_ms",
        ),
        // Nothing would write the rows.
        (
            "version = 1\n[[steps]]\nname = \"validate_parquet\"\n\
             component = \"builtin:validate_parquet\"\ngrants = [\"staged-files\", \"log\"]\n"
                .to_string(),
            "steps",
        ),
        // A file path: no replica has the uploader's disk.
        (
            manifest_with_guard("guard.wasm", "city"),
            "steps[5].component",
        ),
    ];
    for (text, key) in &refused {
        let (status, body) = post_version(&app, ORG_HOST, &admin, "load", text).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {body}");
        let message = body["message"].as_str().expect("message");
        assert!(message.starts_with(&format!("{key}: ")), "{key}: {body}");
    }
    // A TOML syntax error names its line.
    let (status, body) =
        post_version(&app, ORG_HOST, &admin, "load", "version = 1\n[[steps]\n").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().expect("message").contains("line"),
        "{body}"
    );
    let (status, body) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"versions": []}));

    // Activation: a version that does not exist; a body that is not
    // {"version": <integer>}.
    let (status, body) = activate_raw(&app, ORG_HOST, &admin, r#"{"version": 9}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body, json!({"message": "version 9 was not found"}));
    for bad in [
        r#"{"version": "1"}"#,
        r#"{"version": 1.5}"#,
        r#"{"v": 1}"#,
        r#"{"version": 1, "by": "me"}"#,
        "1",
        "",
        "{",
    ] {
        let (status, body) = activate_raw(&app, ORG_HOST, &admin, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["message"].is_string(), "{bad}: {body}");
    }
    let (status, body) = app
        .get(ORG_HOST, "/v2/pipeline/load/active", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"version": null, "activatedBy": null, "activatedAt": null})
    );

    // An unknown kind is an unknown path.
    for path in [
        "/v2/pipeline/nope/versions",
        "/v2/pipeline/nope/active",
        "/v2/pipeline/nope/history",
    ] {
        let (status, body) = app.get(ORG_HOST, path, Some(&admin)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body, json!({"message": "Not Found"}), "{path}");
    }
    let (status, body) = post_version(&app, ORG_HOST, &admin, "nope", &default).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

/// `[1]` is not `{"version": <integer>}` (serde would read a struct from
/// a sequence): 400, not an activation (nor a 404 of version 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_body_that_is_an_array_is_refused() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let (status, body) = activate_raw(&app, ORG_HOST, &admin, "[1]").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].is_string(), "{body}");
    // With a version 1, an array must not activate it either.
    let manifest = default_load_manifest();
    let (status, v1) = post_version(&app, ORG_HOST, &admin, "load", &manifest).await;
    assert_eq!(status, StatusCode::CREATED, "{v1}");
    let (status, body) = activate_raw(&app, ORG_HOST, &admin, "[1]").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, history) = app
        .get(ORG_HOST, "/v2/pipeline/load/history", Some(&admin))
        .await;
    assert_eq!(history, json!({"activations": []}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_operator_does_not_allow_is_refused() {
    let app = spawn_app_with(|c| {
        no_pipeline_files(c);
        c.pipeline.org_grants = ["staged-files", "lake-schema", "lake-append", "log"]
            .map(String::from)
            .to_vec();
    })
    .await;
    let admin = admin(&app);
    // The built-in steps are the host's: the default pipeline's staged-sql
    // grants are not the org's to be bounded.
    let (status, body) =
        post_version(&app, ORG_HOST, &admin, "load", &default_load_manifest()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // The org's own component asking for staged-sql is refused.
    let (status, stored) = put_component(&app, ORG_HOST, &admin, guard()).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    let text = manifest_with_guard(&digest(guard()), "city").replace(
        "grants = [\"staged-files\", \"log\"]\n[steps.config]",
        "grants = [\"staged-sql\", \"log\"]\n[steps.config]",
    );
    let (status, body) = post_version(&app, ORG_HOST, &admin, "load", &text).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["message"].as_str().expect("message");
    assert!(message.starts_with("steps[5].grants: "), "{body}");
    assert!(message.contains("staged-sql"), "{body}");
    let (_, versions) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions", Some(&admin))
        .await;
    assert_eq!(
        versions["versions"].as_array().map(Vec::len),
        Some(1),
        "{versions}"
    );
}

/// A request to each endpoint: method, path, body (its Content-Type and
/// bytes) and whether it writes.
type Call = (
    reqwest::Method,
    String,
    Option<(&'static str, Vec<u8>)>,
    bool,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_orgs_zone_admin_with_the_scope_reaches_its_pipelines() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let (_, version) = guard_version(&app, ORG_HOST, &admin, "city").await;
    assert_eq!(version["version"], 1, "{version}");
    let component = format!("{COMPONENTS}/{}", digest(guard()));
    let manifest = default_load_manifest();

    // Each endpoint, with a body that would be accepted.
    use reqwest::Method;
    let calls: Vec<Call> = vec![
        (
            Method::PUT,
            component.clone(),
            Some(("application/wasm", guard().to_vec())),
            true,
        ),
        (Method::GET, component.clone(), None, false),
        (
            Method::POST,
            "/v2/pipeline/load/versions".into(),
            Some(("application/toml", manifest.as_bytes().to_vec())),
            true,
        ),
        (
            Method::GET,
            "/v2/pipeline/load/versions".into(),
            None,
            false,
        ),
        (
            Method::GET,
            "/v2/pipeline/load/versions/1".into(),
            None,
            false,
        ),
        (
            Method::PUT,
            "/v2/pipeline/load/active".into(),
            Some(("application/json", br#"{"version": 1}"#.to_vec())),
            true,
        ),
        (Method::GET, "/v2/pipeline/load/active".into(), None, false),
        (
            Method::DELETE,
            "/v2/pipeline/load/active".into(),
            None,
            true,
        ),
        (Method::GET, "/v2/pipeline/load/history".into(), None, false),
    ];
    let analyst = org_token(&app, "demo", &["AllServiceClientAnalyst"], ORG_SCOPES);
    let reader = org_token(
        &app,
        "demo",
        &["ZoneAdmin"],
        "query:read load:read load:write pipeline:read",
    );
    let unscoped = app.token_for(&["ZoneAdmin"], "[0]");
    let forbidden = json!({"message": "Forbidden"});
    for (method, path, body, writes) in &calls {
        let call = |token: Option<String>| {
            let (method, body) = (method.clone(), body.clone());
            let app = &app;
            async move { send(app, method, ORG_HOST, path, token.as_deref(), body).await }
        };
        // A role below ZoneAdmin, with every scope.
        let (status, answer) = call(Some(analyst.clone())).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert_eq!(answer, forbidden, "{method} {path}");
        // The ZoneAdmin without the pipeline scopes.
        let (status, answer) = call(Some(unscoped.clone())).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert_eq!(answer, forbidden, "{method} {path}");
        // The ZoneAdmin with pipeline:read only: the reads, not the writes.
        if *writes {
            let (status, answer) = call(Some(reader.clone())).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
            assert_eq!(answer, forbidden, "{method} {path}");
        } else {
            let (status, answer) = call(Some(reader.clone())).await;
            assert_eq!(status, StatusCode::OK, "{method} {path}: {answer}");
        }
        // No token.
        let (status, answer) = call(None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {answer}"
        );
        assert_eq!(answer, unauthorized(), "{method} {path}");
    }
    // None of the refused writes took: one version, none active.
    let (_, versions) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions", Some(&admin))
        .await;
    assert_eq!(
        versions["versions"].as_array().unwrap().len(),
        1,
        "{versions}"
    );
    let (_, history) = app
        .get(ORG_HOST, "/v2/pipeline/load/history", Some(&admin))
        .await;
    assert_eq!(history, json!({"activations": []}));

    // Another org's admin: demo's component and version are not found,
    // and it sees no version of its own.
    let other = org_token(&app, "other", &["ZoneAdmin"], ORG_SCOPES);
    let (status, body) = app.get(OTHER_ORG_HOST, &component, Some(&other)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        body,
        json!({"message": format!("component {} was not found", digest(guard()))})
    );
    let (status, body) = app
        .get(OTHER_ORG_HOST, "/v2/pipeline/load/versions/1", Some(&other))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body, json!({"message": "version 1 was not found"}));
    let (status, body) = activate_raw(&app, OTHER_ORG_HOST, &other, r#"{"version": 1}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = app
        .get(OTHER_ORG_HOST, "/v2/pipeline/load/versions", Some(&other))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"versions": []}));
    // A version that names demo's digest is refused in other.
    let text = manifest_with_guard(&digest(guard()), "city");
    let (status, body) = post_version(&app, OTHER_ORG_HOST, &other, "load", &text).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("steps[5].component: "),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_is_deployed_activated_judges_commits_and_is_rolled_back() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);

    // The component: stored now, then already stored.
    let guard_digest = digest(guard());
    let (status, created) = put_component(&app, ORG_HOST, &admin, guard()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["digest"], guard_digest, "{created}");
    assert_eq!(created["bytes"], guard().len(), "{created}");
    assert_eq!(created["world"], "step", "{created}");
    let (status, again) = put_component(&app, ORG_HOST, &admin, guard()).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["digest"], guard_digest, "{again}");
    assert_eq!(again["bytes"], guard().len(), "{again}");
    assert_eq!(again["world"], "step", "{again}");
    let (status, got) = app
        .get(
            ORG_HOST,
            &format!("{COMPONENTS}/{guard_digest}"),
            Some(&admin),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["digest"], guard_digest, "{got}");
    assert_eq!(got["world"], "step", "{got}");
    assert_eq!(got["createdBy"], "user-1", "{got}");
    assert!(got["createdAt"].is_string(), "{got}");

    // A version: the default steps and a guard against `city`, which the
    // trips have.
    let text = manifest_with_guard(&guard_digest, "city");
    let (status, v1) = post_version(&app, ORG_HOST, &admin, "load", &text).await;
    assert_eq!(status, StatusCode::CREATED, "{v1}");
    assert_eq!(v1["version"], 1, "{v1}");
    assert_eq!(v1["digest"], digest(text.as_bytes()), "{v1}");
    assert_eq!(v1["createdBy"], "user-1", "{v1}");
    assert!(v1["createdAt"].is_string(), "{v1}");
    assert!(v1.get("manifest").is_none(), "{v1}");
    let names: Vec<&str> = v1["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [&DEFAULT_STEPS[..], &["guard"]].concat(), "{v1}");
    let step = &v1["steps"][5];
    assert_eq!(step["component"], guard_digest, "{v1}");
    let mut grants: Vec<&str> = step["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect();
    grants.sort();
    assert_eq!(grants, ["log", "staged-files"], "{v1}");
    assert!(step["timeLimitMs"].is_u64(), "{v1}");
    assert!(step["memoryLimitBytes"].is_u64(), "{v1}");
    assert_eq!(v1["steps"][0]["component"], "builtin:validate_parquet");

    let (status, listed) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed, json!({"versions": [v1.clone()]}));
    let (status, one) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions/1", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    let mut with_manifest = v1.clone();
    with_manifest["manifest"] = json!(text);
    assert_eq!(one, with_manifest);
    let (status, missing) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions/2", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing, json!({"message": "version 2 was not found"}));

    // A load whose commit has not begun has no record (as a load that is
    // not there).
    let open = app
        .create_load(
            &admin,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    for id in [open.as_str(), "no-such-load"] {
        let (status, body) = app
            .get(ORG_HOST, &format!("{LOAD}/{id}/pipeline"), Some(&admin))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {body}");
        assert_eq!(
            body,
            json!({"message": "NotFound: load_id does not exist for this user."})
        );
    }

    // The daily pipeline's versions are numbered apart.
    let (status, daily) = post_version(&app, ORG_HOST, &admin, "daily", &pause_manifest(0)).await;
    assert_eq!(status, StatusCode::CREATED, "{daily}");
    assert_eq!(daily["version"], 1, "{daily}");
    assert_eq!(daily["steps"][0]["component"], "builtin:daily_pause");

    // Before any activation the built-in default judges, and a failed
    // load's body has the spec's keys (a checksum that does not match).
    let id = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &trips_batch(&[1], 2),
            json!({"count(*)": 3}),
        )
        .await;
    let spec_failure = app.wait_for_load(&admin, &id).await;
    assert_eq!(spec_failure["LoadStatus"], "FAIL", "{spec_failure}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["source"], "built-in", "{record}");
    assert_eq!(record["version"], Value::Null, "{record}");
    assert_eq!(record["digest"], Value::Null, "{record}");

    // Activated: the guard fails the next commit.
    activate(&app, ORG_HOST, &admin, 1).await;
    let (status, active) = app
        .get(ORG_HOST, "/v2/pipeline/load/active", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{active}");
    assert_eq!(active["version"], 1, "{active}");
    let (failed_id, failed) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(failed["ErrorType"], "ValidationError", "{failed}");
    assert!(failed.to_string().contains("city"), "{failed}");
    assert_eq!(keys(&failed), keys(&spec_failure), "{failed}");
    let record = judged(&app, ORG_HOST, &admin, &failed_id).await;
    assert_eq!(record["source"], "version", "{record}");
    assert_eq!(record["version"], 1, "{record}");
    assert_eq!(record["digest"], v1["digest"], "{record}");
    assert_guard_failed(&record, "city");

    // Rolled back to the operator's files (here the built-in default):
    // the same trips load.
    let (status, cleared) = send(
        &app,
        reqwest::Method::DELETE,
        ORG_HOST,
        "/v2/pipeline/load/active",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["version"], Value::Null, "{cleared}");
    assert_eq!(cleared["activatedBy"], "user-1", "{cleared}");
    assert!(cleared["activatedAt"].is_string(), "{cleared}");
    let (id, done) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["source"], "built-in", "{record}");
    assert_eq!(record["version"], Value::Null, "{record}");
    assert_default_passed(&record);

    // A version 2 without the guard, activated; then a rollback to 1.
    let (status, v2) = post_version(&app, ORG_HOST, &admin, "load", &default_load_manifest()).await;
    assert_eq!(status, StatusCode::CREATED, "{v2}");
    assert_eq!(v2["version"], 2, "{v2}");
    activate(&app, ORG_HOST, &admin, 2).await;
    let (id, done) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["source"], "version", "{record}");
    assert_eq!(record["version"], 2, "{record}");
    assert_eq!(record["digest"], v2["digest"], "{record}");
    assert_default_passed(&record);
    activate(&app, ORG_HOST, &admin, 1).await;
    let (id, failed) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(judged(&app, ORG_HOST, &admin, &id).await["version"], 1);

    // The history, newest first.
    let (status, history) = app
        .get(ORG_HOST, "/v2/pipeline/load/history", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let versions: Vec<Value> = history["activations"]
        .as_array()
        .expect("activations")
        .iter()
        .map(|a| a["version"].clone())
        .collect();
    assert_eq!(
        versions,
        [json!(1), json!(2), Value::Null, json!(1)],
        "{history}"
    );
    let (_, listed) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions", Some(&admin))
        .await;
    let numbers: Vec<&Value> = listed["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["version"])
        .collect();
    assert_eq!(numbers, [&json!(2), &json!(1)], "{listed}");

    // Four rows: the two trips of each of the two commits that passed.
    let rows = app
        .rows_of(ORG_HOST, &admin, "SELECT count(*) FROM trips")
        .await;
    assert_eq!(rows, [[Some("4".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_runs_its_own_version_else_its_orgs() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let zone = zone_admin(&app);

    // The org's guard, active: it judges the zone's loads too.
    let (_, org_v1) = guard_version(&app, ORG_HOST, &admin, "city").await;
    activate(&app, ORG_HOST, &admin, 1).await;
    let (id, failed) = commit_two_trips(&app, ZONE_HOST, &zone).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    let record = judged(&app, ZONE_HOST, &zone, &id).await;
    assert_eq!(record["source"], "version", "{record}");
    assert_eq!(record["digest"], org_v1["digest"], "{record}");
    assert_guard_failed(&record, "city");

    // The zone shares nothing with its org: no versions, not the org's
    // component, no activation.
    let (status, body) = app
        .get(ZONE_HOST, "/v2/pipeline/load/versions", Some(&zone))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"versions": []}));
    let (status, body) = app
        .get(
            ZONE_HOST,
            &format!("{COMPONENTS}/{}", digest(guard())),
            Some(&zone),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = app
        .get(ZONE_HOST, "/v2/pipeline/load/active", Some(&zone))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["version"], Value::Null, "{body}");

    // The zone's own version (no guard), active in the zone only.
    let plain = default_load_manifest();
    let (status, zone_v1) = post_version(&app, ZONE_HOST, &zone, "load", &plain).await;
    assert_eq!(status, StatusCode::CREATED, "{zone_v1}");
    assert_eq!(zone_v1["version"], 1, "{zone_v1}");
    let (status, body) = activate_raw(&app, ZONE_HOST, &zone, r#"{"version": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (id, done) = commit_two_trips(&app, ZONE_HOST, &zone).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&app, ZONE_HOST, &zone, &id).await;
    assert_eq!(record["source"], "version", "{record}");
    assert_eq!(record["version"], 1, "{record}");
    assert_eq!(record["digest"], digest(plain.as_bytes()), "{record}");
    assert_default_passed(&record);
    // The org's commits still run the org's guard.
    let (id, failed) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["digest"], org_v1["digest"], "{record}");

    // A guard active in the zone, none in the org: only the zone refuses.
    let (status, _) = send(
        &app,
        reqwest::Method::DELETE,
        ORG_HOST,
        "/v2/pipeline/load/active",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, zone_v2) = guard_version(&app, ZONE_HOST, &zone, "fare").await;
    assert_eq!(zone_v2["version"], 2, "{zone_v2}");
    let (status, body) = activate_raw(&app, ZONE_HOST, &zone, r#"{"version": 2}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (id, failed) = commit_two_trips(&app, ZONE_HOST, &zone).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    let record = judged(&app, ZONE_HOST, &zone, &id).await;
    assert_eq!(record["version"], 2, "{record}");
    assert_guard_failed(&record, "fare");
    let (id, done) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["source"], "built-in", "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(all(lakehost_has_postgres, lakehost_has_s3)),
    ignore = "needs Postgres and an S3 server: eval \"$(.ci/postgres)\"; eval \"$(.ci/s3)\" first (README, Tests)"
)]
async fn two_replicas_on_one_database_and_lake_run_the_version_either_activated() {
    let url = fresh_postgres_url().await;
    let endpoint = s3_endpoint();
    let bucket = format!("lakehost-test-{}", &lakehost::store::new_id()[..12]);
    let created = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let lake_url = format!("s3://{bucket}/lake");
    let replica = |url: String, lake_url: String| {
        spawn_app_with(move |c| {
            no_pipeline_files(c);
            c.storage.database_url = Some(url);
            c.storage.lake_url = Some(lake_url);
        })
    };
    let a = replica(url.clone(), lake_url.clone()).await;
    let b = replica(url, lake_url).await;
    // Both hold the same pinned keys; a token names its replica as issuer.
    let (admin_a, admin_b) = (admin(&a), admin(&b));

    // Uploaded, created and activated on A.
    let (_, v1) = guard_version(&a, ORG_HOST, &admin_a, "city").await;
    assert_eq!(v1["version"], 1, "{v1}");
    activate(&a, ORG_HOST, &admin_a, 1).await;

    // B sees them, and its next commit is judged by version 1.
    let (status, got) = b
        .get(
            ORG_HOST,
            &format!("{COMPONENTS}/{}", digest(guard())),
            Some(&admin_b),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["world"], "step", "{got}");
    let (id, failed) = commit_two_trips(&b, ORG_HOST, &admin_b).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    let record = judged(&b, ORG_HOST, &admin_b, &id).await;
    assert_eq!(record["source"], "version", "{record}");
    assert_eq!(record["version"], 1, "{record}");
    assert_eq!(record["digest"], v1["digest"], "{record}");
    assert_guard_failed(&record, "city");

    // Rolled back on B: A's next commit runs the default.
    let (status, cleared) = send(
        &b,
        reqwest::Method::DELETE,
        ORG_HOST,
        "/v2/pipeline/load/active",
        Some(&admin_b),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["version"], Value::Null, "{cleared}");
    let (status, active) = a
        .get(ORG_HOST, "/v2/pipeline/load/active", Some(&admin_a))
        .await;
    assert_eq!(status, StatusCode::OK, "{active}");
    assert_eq!(active["version"], Value::Null, "{active}");
    let (id, done) = commit_two_trips(&a, ORG_HOST, &admin_a).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&a, ORG_HOST, &admin_a, &id).await;
    assert_eq!(record["source"], "built-in", "{record}");
    assert_default_passed(&record);

    // And activated again on B, A judges by it.
    activate(&b, ORG_HOST, &admin_b, 1).await;
    let (id, failed) = commit_two_trips(&a, ORG_HOST, &admin_a).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(judged(&a, ORG_HOST, &admin_a, &id).await["version"], 1);
    let (_, history) = a
        .get(ORG_HOST, "/v2/pipeline/load/history", Some(&admin_a))
        .await;
    let versions: Vec<Value> = history["activations"]
        .as_array()
        .expect("activations")
        .iter()
        .map(|a| a["version"].clone())
        .collect();
    assert_eq!(versions, [json!(1), Value::Null, json!(1)], "{history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_keeps_the_version_it_began_with() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let (status, stored) = put_component(&app, ORG_HOST, &admin, guard()).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    // Version 1 pauses, then refuses `city`; version 2 only inserts.
    let paused = format!(
        "version = 1\n\
         [[steps]]\nname = \"pause\"\ncomponent = \"builtin:pause\"\n[steps.config]\nms = 4000\n\
         [[steps]]\nname = \"guard\"\ncomponent = \"{}\"\ngrants = [\"staged-files\", \"log\"]\n\
         [steps.config]\nforbidden = [\"city\"]\n\
         [[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\n\
         grants = [\"staged-sql\", \"lake-append\"]\n",
        digest(guard())
    );
    let plain = "version = 1\n[[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\n\
                 grants = [\"staged-sql\", \"lake-append\"]\n";
    let (status, v1) = post_version(&app, ORG_HOST, &admin, "load", &paused).await;
    assert_eq!(status, StatusCode::CREATED, "{v1}");
    activate(&app, ORG_HOST, &admin, 1).await;

    // The first commit, held in its pause step.
    let first = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &trips_batch(&[1], 2),
            json!({"count(*)": 2}),
        )
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let record = app.store.load(&first).await.unwrap().unwrap();
        if record.running_step.as_deref() == Some("pause") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never reached its pause step"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Meanwhile version 2 is made and activated.
    let (status, v2) = post_version(&app, ORG_HOST, &admin, "load", plain).await;
    assert_eq!(status, StatusCode::CREATED, "{v2}");
    activate(&app, ORG_HOST, &admin, 2).await;

    // The first commit ran version 1 to its end: its guard refused.
    let ended = app.wait_for_load(&admin, &first).await;
    assert_eq!(ended["LoadStatus"], "FAIL", "{ended}");
    assert!(ended.to_string().contains("city"), "{ended}");
    let record = judged(&app, ORG_HOST, &admin, &first).await;
    assert_eq!(record["version"], 1, "{record}");
    assert_eq!(record["digest"], v1["digest"], "{record}");
    let steps = pairs(&[
        ("pause", "passed"),
        ("guard", "failed"),
        ("insert", "not run"),
    ]);
    assert_eq!(outcomes(&record), steps, "{record}");

    // The next one runs version 2.
    let (id, done) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_eq!(record["version"], 2, "{record}");
    assert_eq!(
        outcomes(&record),
        pairs(&[("insert", "passed")]),
        "{record}"
    );
}

/// GET /v2/pipeline/load/shadow on the org's API until it counts `loads`
/// commits (a shadow's run is recorded after its commit's end).
async fn shadow_report_of(app: &TestApp, token: &str, loads: i64) -> Value {
    for _ in 0..200 {
        let (status, report) = app
            .get(ORG_HOST, "/v2/pipeline/load/shadow", Some(token))
            .await;
        assert_eq!(status, StatusCode::OK, "{report}");
        if report["loads"] == loads {
            return report;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the shadow never counted {loads} loads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_reports_what_it_would_refuse_and_decides_and_writes_nothing() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let (_, guard) = guard_version(&app, ORG_HOST, &admin, "city").await;
    let shadow = |version: &Value| json!({ "version": version }).to_string();
    let put = |body: String| {
        let body = Some(("application/json", body.into_bytes()));
        send(
            &app,
            reqwest::Method::PUT,
            ORG_HOST,
            "/v2/pipeline/load/shadow",
            Some(&admin),
            body,
        )
    };
    // No shadow yet; a version that does not exist; a body that is no object.
    let (status, report) = app
        .get(ORG_HOST, "/v2/pipeline/load/shadow", Some(&admin))
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["version"], Value::Null, "{report}");
    assert_eq!(
        (report["loads"].clone(), report["agreements"].clone()),
        (json!(0), json!(0))
    );
    let (status, body) = put(shadow(&json!(7))).await;
    assert_eq!(
        (status, body["message"].clone()),
        (StatusCode::NOT_FOUND, json!("version 7 was not found"))
    );
    for body in [
        "[1]",
        "",
        "{\"version\": 1, \"x\": 2}",
        "{\"version\": \"1\"}",
    ] {
        let (status, refused) = put(body.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        assert_eq!(
            refused["message"], "Body must be valid JSON: {\"version\": <integer>}.",
            "{body}"
        );
    }
    // A version that is no number names no version.
    let (status, body) = app
        .get(ORG_HOST, "/v2/pipeline/load/versions/one", Some(&admin))
        .await;
    assert_eq!(
        (status, body["message"].clone()),
        (StatusCode::NOT_FOUND, json!("Not Found"))
    );

    // The guard shadows the built-in default: the load succeeds with its
    // rows once, and the shadow's refusal is reported.
    let (status, set) = put(shadow(&guard["version"])).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(
        (set["version"].clone(), set["setBy"].clone()),
        (guard["version"].clone(), json!("user-1"))
    );
    let (id, ended) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(ended["LoadStatus"], "SUCCESS", "{ended}");
    let report = shadow_report_of(&app, &admin, 1).await;
    assert_eq!(report["agreements"], 0, "{report}");
    let disagreement = &report["disagreements"][0];
    assert_eq!(disagreement["loadId"], id.as_str(), "{report}");
    assert_eq!(disagreement["activeOutcome"], "passed", "{report}");
    assert!(
        disagreement["shadowOutcome"]
            .as_str()
            .unwrap()
            .starts_with("failed ("),
        "{report}"
    );
    assert_eq!(disagreement["step"], "guard", "{report}");
    assert!(
        disagreement["message"].as_str().unwrap().contains("city"),
        "{report}"
    );
    // The record of the load shows both; the shadow's insert was not run.
    let record = judged(&app, ORG_HOST, &admin, &id).await;
    assert_default_passed(&record);
    assert_eq!(record["source"], "built-in", "{record}");
    let steps = &record["shadow"]["steps"];
    assert_eq!(steps[4]["name"], "insert", "{record}");
    assert_eq!(steps[4]["outcome"], "not run", "{record}");
    assert_eq!(steps[5]["outcome"], "failed", "{record}");

    // The built-in default as the shadow agrees, and writes nothing: the
    // table holds each load's rows once.
    let (status, default) =
        post_version(&app, ORG_HOST, &admin, "load", &default_load_manifest()).await;
    assert_eq!(status, StatusCode::CREATED, "{default}");
    let (status, _) = put(shadow(&default["version"])).await;
    assert_eq!(status, StatusCode::OK);
    let (_, ended) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(ended["LoadStatus"], "SUCCESS", "{ended}");
    let report = shadow_report_of(&app, &admin, 1).await;
    assert_eq!(report["agreements"], 1, "{report}");
    assert_eq!(report["disagreements"], json!([]), "{report}");
    let rows = app
        .rows_of(ORG_HOST, &admin, "SELECT count(*) FROM trips")
        .await;
    assert_eq!(rows, vec![vec![Some("4".to_string())]]);

    // Off: the next commit runs no shadow.
    let (status, off) = send(
        &app,
        reqwest::Method::DELETE,
        ORG_HOST,
        "/v2/pipeline/load/shadow",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        (status, off["version"].clone()),
        (StatusCode::OK, Value::Null)
    );
    let (id, _) = commit_two_trips(&app, ORG_HOST, &admin).await;
    assert_eq!(
        judged(&app, ORG_HOST, &admin, &id).await["shadow"],
        Value::Null
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_version_of_a_stored_component_runs_the_orgs_daily_run() {
    let app = spawn_app_with(no_pipeline_files).await;
    let admin = admin(&app);
    let (status, stored) = put_component(&app, ORG_HOST, &admin, daily_step()).await;
    assert_eq!(
        (status, stored["world"].clone()),
        (StatusCode::CREATED, json!("daily-step"))
    );
    let text = refresh_manifest(
        "deployed_counts",
        "SELECT 7 AS service_client_id, 41 + 1 AS n",
    )
    .replace("builtin:sql_transform", &digest(daily_step()));
    let (status, version) = post_version(&app, ORG_HOST, &admin, "daily", &text).await;
    assert_eq!(status, StatusCode::CREATED, "{version}");
    assert_eq!(
        version["steps"][0]["component"],
        digest(daily_step()),
        "{version}"
    );
    let body = Some((
        "application/json",
        json!({"version": version["version"]})
            .to_string()
            .into_bytes(),
    ));
    let (status, active) = send(
        &app,
        reqwest::Method::PUT,
        ORG_HOST,
        "/v2/pipeline/daily/active",
        Some(&admin),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{active}");
    // The load pipeline is another kind: still the built-in default.
    let (_, load_active) = app
        .get(ORG_HOST, "/v2/pipeline/load/active", Some(&admin))
        .await;
    assert_eq!(load_active["version"], Value::Null, "{load_active}");

    let daily = app.daily_token();
    assert_eq!(app.start_daily_run(&daily).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&daily).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    let rows = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT service_client_id, n FROM demo_insights.deployed_counts",
        )
        .await;
    assert_eq!(rows, [[Some("7".to_string()), Some("42".to_string())]]);
}
