//! `Idempotency-Key` on POST /query, POST /load and POST /load/{id}/commit
//! (issue 19, `api/idempotency.rs`): a retry with the same key and body from
//! the same caller gets the first answer, byte for byte, and the store holds
//! one job; another body is 409, another caller is another key; failures
//! keep nothing; keys live 24 hours on the injected clock; replicas sharing
//! a store (one SQLite file, one Postgres database) answer alike; concurrent
//! duplicates make one job; a first request still in progress makes a retry
//! wait, then 409. Jobs are counted in the store's own tables.

use std::time::{Duration, Instant};

use lakehost::{
    api::{
        idempotency::{BAD_KEY, IN_PROGRESS_WAIT, RequestBody as _, request_hash},
        json_body::JsonBody,
    },
    auth::AccessGrant,
    clock::Clock as _,
    store::idempotency::{KeyScope, KeyedRequest, NewClaim, StoredAnswer},
};
use lakehost_tests::*;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

const ZONE_HOST: &str = "lab.demo.api.localhost";
const SELECT_1: &str = r#"{"query": "SELECT 1", "database": "demo_lake_v2"}"#;
/// `SELECT_1` with its fields in another order and other white space.
const SELECT_1_AGAIN: &str = "{ \"database\":\"demo_lake_v2\",\n  \"query\":\"SELECT 1\" }";
const LOAD_BODY: &str = r#"{"load_type": "APPEND_ONLY", "table_name": "trips"}"#;

const OTHER_BODY: &str = "This Idempotency-Key was already used in the last 24 hours with \
    another request body; a new request needs a new key.";
const OTHER_ACCESS: &str = "This Idempotency-Key was already used in the last 24 hours with \
    other access (roles or service clients); a new request needs a new key.";
const IN_PROGRESS: &str = "The first request with this Idempotency-Key is still in progress; \
    retry later to get its answer.";

fn message(text: &str) -> Value {
    json!({ "message": text })
}

/// An answer as sent: status, whether it was marked a replay, the body's bytes.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: StatusCode,
    replayed: bool,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn id(&self, field: &str) -> String {
        self.json()[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field} in {self:?}"))
            .to_string()
    }
}

/// POST `path` on `host` with each of `keys` as an `Idempotency-Key` header.
fn keyed(
    app: &TestApp,
    (host, path): (&str, &str),
    token: &str,
    keys: &[&str],
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = app
        .request(reqwest::Method::POST, host, path)
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(body.to_string());
    for key in keys {
        request = request.header("Idempotency-Key", HeaderValue::from_str(key).unwrap());
    }
    request
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let replayed = match response.headers().get("idempotent-replayed") {
        None => false,
        Some(value) => {
            assert_eq!(value, "true");
            true
        }
    };
    Answer {
        status,
        replayed,
        body: response.text().await.unwrap(),
    }
}

async fn post(
    app: &TestApp,
    target: (&str, &str),
    token: &str,
    keys: &[&str],
    body: &str,
) -> Answer {
    send(keyed(app, target, token, keys, body)).await
}

fn query_on(host: &str) -> (&str, &'static str) {
    (host, QUERY)
}

const ORG_QUERY: (&str, &str) = (ORG_HOST, QUERY);
const ORG_LOAD: (&str, &str) = (ORG_HOST, LOAD);

/// The store's own tables, read beside the server (a second connection).
struct Db(sqlx::AnyPool);

impl Db {
    async fn connect(url: &str) -> Db {
        sqlx::any::install_default_drivers();
        Db(sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .unwrap())
    }

    async fn sqlite_of(app: &TestApp) -> Db {
        let file = app.data_dir.join("lakehost.db");
        Db::connect(&format!("sqlite://{}?mode=rw", file.display())).await
    }

    async fn count(&self, table: &str, owner_sub: &str) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} WHERE owner_sub = $1"
        ))
        .bind(owner_sub)
        .fetch_one(&self.0)
        .await
        .unwrap()
    }

    async fn queries_of(&self, owner_sub: &str) -> i64 {
        self.count("query_jobs", owner_sub).await
    }

    async fn loads_of(&self, owner_sub: &str) -> i64 {
        self.count("loads", owner_sub).await
    }
}

/// A demo Org API admin token of `sub` (every service client).
fn admin_of(app: &TestApp, sub: &str) -> String {
    app.token_of(sub, &["ZoneAdmin"], "[0]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_and_body_get_the_first_answer_and_make_one_query() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-same");
    let first = post(&app, ORG_QUERY, &token, &["q-1"], SELECT_1).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{first:?}");
    assert!(!first.replayed, "the first answer is not a replay");
    let id = first.id("queryId");
    assert_eq!(db.queries_of("idem-same").await, 1);

    // The same body with its fields reordered and spaced otherwise, the
    // key bare or quoted (the IETF draft's form): the first answer.
    for key in ["q-1", "\"q-1\""] {
        let again = post(&app, ORG_QUERY, &token, &[key], SELECT_1_AGAIN).await;
        assert_eq!(
            again,
            Answer {
                replayed: true,
                ..first.clone()
            },
            "{key}"
        );
    }
    // Still the first answer after the query ended.
    let done = app.wait_for(ORG_HOST, &token, &id, None).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let again = post(&app, ORG_QUERY, &token, &["q-1"], SELECT_1).await;
    assert_eq!((again.status, again.id("queryId")), (first.status, id));
    assert_eq!(db.queries_of("idem-same").await, 1, "no second job");

    // Without the header, or with another key, each request is a query.
    let (status, body) = app
        .submit(
            ORG_HOST,
            &token,
            &json!({"query": "SELECT 1", "database": "demo_lake_v2"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_ne!(body["queryId"], json!(first.id("queryId")));
    let other = post(&app, ORG_QUERY, &token, &["q-2"], SELECT_1).await;
    assert_eq!(other.status, StatusCode::ACCEPTED);
    assert!(!other.replayed);
    assert_ne!(other.id("queryId"), first.id("queryId"));
    assert_eq!(db.queries_of("idem-same").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_for_another_request_is_409_and_keeps_the_first_answer() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-other");
    let first = post(&app, ORG_QUERY, &token, &["k"], SELECT_1).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{first:?}");

    // Another body (SQL, database, a field more), another operation, the
    // same caller with other access.
    for body in [
        r#"{"query": "SELECT 2", "database": "demo_lake_v2"}"#,
        r#"{"query": "SELECT 1"}"#,
        r#"{"query": "SELECT 1", "database": "demo_lake_v2", "extra": 1}"#,
    ] {
        let answer = post(&app, ORG_QUERY, &token, &["k"], body).await;
        assert_eq!(
            (answer.status, answer.json()),
            (StatusCode::CONFLICT, message(OTHER_BODY)),
            "{body}"
        );
    }
    let as_load = post(&app, ORG_LOAD, &token, &["k"], LOAD_BODY).await;
    assert_eq!(
        (as_load.status, as_load.json()),
        (
            StatusCode::CONFLICT,
            message(
                "This Idempotency-Key was already used in the last 24 hours for \
                 POST /v2/query; a new request needs a new key."
            )
        )
    );
    let narrower = app.token_of("idem-other", &["ZoneAdmin"], "[1]");
    let answer = post(&app, ORG_QUERY, &narrower, &["k"], SELECT_1).await;
    assert_eq!(
        (answer.status, answer.json()),
        (StatusCode::CONFLICT, message(OTHER_ACCESS))
    );
    assert_eq!(db.queries_of("idem-other").await, 1);
    assert_eq!(db.loads_of("idem-other").await, 0);

    // The first answer is still the key's.
    let again = post(&app, ORG_QUERY, &token, &["k"], SELECT_1).await;
    assert_eq!(again.body, first.body);
    assert!(again.replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_caller_with_the_same_key_is_independent() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let alice = admin_of(&app, "idem-alice");
    let bob = admin_of(&app, "idem-bob");
    let alice_first = post(&app, ORG_QUERY, &alice, &["shared"], SELECT_1).await;
    let bob_first = post(&app, ORG_QUERY, &bob, &["shared"], SELECT_1).await;
    for answer in [&alice_first, &bob_first] {
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
        assert!(!answer.replayed);
    }
    assert_ne!(alice_first.id("queryId"), bob_first.id("queryId"));
    // Bob's key with another body is no conflict of Alice's.
    let bob_other = post(&app, ORG_QUERY, &bob, &["other"], SELECT_1).await;
    assert_eq!(bob_other.status, StatusCode::ACCEPTED);

    // The same subject on a Zone API is another caller too; there the key
    // works the same way.
    let zone = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let zone_body = r#"{"query": "SELECT 1"}"#;
    let on_zone = post(&app, query_on(ZONE_HOST), &zone, &["shared"], zone_body).await;
    assert_eq!(on_zone.status, StatusCode::ACCEPTED, "{on_zone:?}");
    assert!(!on_zone.replayed);
    let zone_again = post(&app, query_on(ZONE_HOST), &zone, &["shared"], zone_body).await;
    assert_eq!(zone_again.body, on_zone.body);
    assert!(zone_again.replayed);
    let org_user = post(
        &app,
        ORG_QUERY,
        &admin_of(&app, "user-1"),
        &["shared"],
        zone_body,
    )
    .await;
    assert_eq!(org_user.status, StatusCode::ACCEPTED);
    assert!(!org_user.replayed, "the Org API's user-1 is not the zone's");
    assert_ne!(org_user.id("queryId"), on_zone.id("queryId"));

    // Another org.
    let other_org = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let there = post(
        &app,
        query_on(OTHER_ORG_HOST),
        &other_org,
        &["shared"],
        r#"{"query": "SELECT 1"}"#,
    )
    .await;
    assert_eq!(there.status, StatusCode::ACCEPTED, "{there:?}");
    assert!(!there.replayed);

    assert_eq!(db.queries_of("idem-alice").await, 1);
    assert_eq!(db.queries_of("idem-bob").await, 2);
    assert_eq!(db.queries_of("user-1").await, 3, "zone, Org API, other org");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_request_keeps_nothing_and_its_retry_runs_again() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-failed");
    // A query the engine refuses: 400 each time, run each time.
    let missing = r#"{"query": "SELECT * FROM no_such_table"}"#;
    let refused = post(&app, ORG_QUERY, &token, &["f"], missing).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{refused:?}");
    let again = post(&app, ORG_QUERY, &token, &["f"], missing).await;
    assert_eq!(again, refused, "run again, not replayed");
    // The key is free for another body: the failure was not kept.
    let ok = post(&app, ORG_QUERY, &token, &["f"], SELECT_1).await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{ok:?}");
    assert!(!ok.replayed);
    assert_eq!(db.queries_of("idem-failed").await, 1);

    // A body that is not JSON is 400 and keeps nothing either.
    let not_json = post(&app, ORG_LOAD, &token, &["g"], "{not json").await;
    assert_eq!(
        (not_json.status, not_json.json()),
        (StatusCode::BAD_REQUEST, message("JSON not well formed."))
    );
    let created = post(&app, ORG_LOAD, &token, &["g"], LOAD_BODY).await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{created:?}");

    // A commit of an unknown load: 404, and the key is free again.
    let path = format!("{LOAD}/{}/commit", uuid_like());
    let commit = r#"{"check_sum": {"count(*)": 1}}"#;
    let unknown = post(&app, (ORG_HOST, &path), &token, &["c"], commit).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{unknown:?}");
    let load_id = created.id("loadId");
    let real = format!("{LOAD}/{load_id}/commit");
    let empty = post(&app, (ORG_HOST, &real), &token, &["c"], commit).await;
    assert_eq!(empty.status, StatusCode::ACCEPTED, "{empty:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_400_and_change_nothing() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-bad");
    let load_id = app
        .create_load(&token, &serde_json::from_str(LOAD_BODY).unwrap())
        .await;
    let commit_path = format!("{LOAD}/{load_id}/commit");
    let too_long = "k".repeat(256);
    let bad: [&[&str]; 9] = [
        &[""],
        &["\"\""],
        &["\"unbalanced"],
        &["two words"],
        &["a,b"],
        &["caf\u{e9}"],
        &["semi;colon"],
        &[&too_long],
        &["a", "b"],
    ];
    for keys in bad {
        for (target, body) in [
            (ORG_QUERY, SELECT_1),
            (ORG_LOAD, LOAD_BODY),
            (
                (ORG_HOST, commit_path.as_str()),
                r#"{"check_sum": {"count(*)": 1}}"#,
            ),
        ] {
            let answer = post(&app, target, &token, keys, body).await;
            assert_eq!(
                (answer.status, answer.json()),
                (StatusCode::BAD_REQUEST, message(BAD_KEY)),
                "{keys:?} on {target:?}"
            );
        }
    }
    assert_eq!(db.queries_of("idem-bad").await, 0);
    assert_eq!(db.loads_of("idem-bad").await, 1, "only the load made above");
    let (_, load) = app
        .get(ORG_HOST, &format!("{LOAD}/{load_id}"), Some(&token))
        .await;
    assert_eq!(load["LoadStatus"], "OPEN", "no commit ran");

    // The longest key, every allowed character, is a key; an error still
    // needs a token first.
    let longest = format!("{}x-_.:~+/=", "K9".repeat(123));
    assert_eq!(longest.len(), 255);
    let answer = post(&app, ORG_QUERY, &token, &[&longest], SELECT_1).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    let no_token = post(&app, ORG_QUERY, "not-a-token", &[""], SELECT_1).await;
    assert_eq!(no_token.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_and_commits_are_made_once_per_key() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-load");
    let created = post(&app, ORG_LOAD, &token, &["load-1"], LOAD_BODY).await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{created:?}");
    let reordered = r#"{"table_name":"trips","load_type":"APPEND_ONLY"}"#;
    let again = post(&app, ORG_LOAD, &token, &["load-1"], reordered).await;
    assert_eq!(again.body, created.body);
    assert!(again.replayed);
    assert_eq!(db.loads_of("idem-load").await, 1);
    let load_id = created.id("loadId");

    app.stage_file(&token, &load_id, "part_1", &trips_batch(&[1, 2], 5))
        .await;
    let commit_path = format!("{LOAD}/{load_id}/commit");
    let target = (ORG_HOST, commit_path.as_str());
    let check_sum = r#"{"check_sum": {"count(*)": 10}}"#;
    let committed = post(&app, target, &token, &["commit-1"], check_sum).await;
    assert_eq!(
        (committed.status, committed.json()),
        (StatusCode::ACCEPTED, message("Load commit initiated."))
    );
    // A retry while it runs and after it ended: the first answer, where a
    // commit without the key is refused.
    let retried = post(&app, target, &token, &["commit-1"], check_sum).await;
    assert_eq!(
        (retried.status, &retried.body, retried.replayed),
        (committed.status, &committed.body, true)
    );
    let done = app.wait_for_load(&token, &load_id).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let retried = post(&app, target, &token, &["commit-1"], check_sum).await;
    assert_eq!(
        (retried.status, &retried.body, retried.replayed),
        (committed.status, &committed.body, true)
    );
    let unkeyed = post(&app, target, &token, &[], check_sum).await;
    assert_eq!(
        (unkeyed.status, unkeyed.json()),
        (
            StatusCode::BAD_REQUEST,
            message("InvalidParameter: Load Already Committed.")
        )
    );
    // The commit ran once: one attempt, the rows once.
    let record = app.store.load(&load_id).await.unwrap().unwrap();
    assert_eq!(record.attempts, 1);
    let rows = app
        .rows_of(ORG_HOST, &token, "SELECT count(*) FROM trips")
        .await;
    assert_eq!(rows, vec![vec![Some("10".to_string())]]);

    // The commit's key is the commit's: another check_sum, or another
    // load, is another request.
    let other_sum = post(
        &app,
        target,
        &token,
        &["commit-1"],
        r#"{"check_sum": {"count(*)": 11}}"#,
    )
    .await;
    assert_eq!(
        (other_sum.status, other_sum.json()),
        (StatusCode::CONFLICT, message(OTHER_BODY))
    );
    let second_load = app
        .create_load(&token, &serde_json::from_str(LOAD_BODY).unwrap())
        .await;
    let second_path = format!("{LOAD}/{second_load}/commit");
    let elsewhere = post(
        &app,
        (ORG_HOST, &second_path),
        &token,
        &["commit-1"],
        check_sum,
    )
    .await;
    assert_eq!(
        (elsewhere.status, elsewhere.json()),
        (
            StatusCode::CONFLICT,
            message(&format!(
                "This Idempotency-Key was already used in the last 24 hours for \
                 POST /v2/load/{load_id}/commit; a new request needs a new key."
            ))
        )
    );
    let (_, second) = app
        .get(ORG_HOST, &format!("{LOAD}/{second_load}"), Some(&token))
        .await;
    assert_eq!(second["LoadStatus"], "OPEN");

    // On a Zone API too.
    let zone = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let on_zone = post(&app, (ZONE_HOST, LOAD), &zone, &["load-1"], LOAD_BODY).await;
    assert_eq!(on_zone.status, StatusCode::ACCEPTED);
    assert!(!on_zone.replayed, "another caller's key");
    let zone_again = post(&app, (ZONE_HOST, LOAD), &zone, &["load-1"], LOAD_BODY).await;
    assert_eq!(
        (zone_again.body, zone_again.replayed),
        (on_zone.body.clone(), true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_kept_24_hours_then_forgotten() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let first = post(
        &app,
        ORG_QUERY,
        &admin_of(&app, "idem-expiry"),
        &["day"],
        SELECT_1,
    )
    .await;
    assert_eq!(first.status, StatusCode::ACCEPTED);

    app.clock
        .advance(chrono::Duration::hours(24) - chrono::Duration::seconds(1));
    // Tokens expire by the same clock: a fresh one, the same caller.
    let token = admin_of(&app, "idem-expiry");
    let within = post(&app, ORG_QUERY, &token, &["day"], SELECT_1).await;
    assert_eq!(
        (within.body.as_str(), within.replayed),
        (first.body.as_str(), true)
    );
    assert_eq!(db.queries_of("idem-expiry").await, 1);

    app.clock.advance(chrono::Duration::seconds(1));
    let token = admin_of(&app, "idem-expiry");
    let after = post(&app, ORG_QUERY, &token, &["day"], SELECT_1).await;
    assert_eq!(after.status, StatusCode::ACCEPTED);
    assert!(!after.replayed, "24 hours later the key is new");
    assert_ne!(after.id("queryId"), first.id("queryId"));
    // ... and holds the new answer; another body is refused again.
    let replay = post(&app, ORG_QUERY, &token, &["day"], SELECT_1).await;
    assert_eq!(replay.body, after.body);
    let other = post(
        &app,
        ORG_QUERY,
        &token,
        &["day"],
        r#"{"query": "SELECT 2"}"#,
    )
    .await;
    assert_eq!(other.status, StatusCode::CONFLICT);
    assert_eq!(db.queries_of("idem-expiry").await, 2);

    // The sweep forgets expired rows (every replica runs it hourly).
    let scope = KeyScope {
        org: "demo".into(),
        zone: None,
        owner_sub: "idem-expiry".into(),
        key: "day".into(),
    };
    let now = || app.clock.now().timestamp_micros();
    assert_eq!(
        app.store.expire_idempotency_keys(now(), 500).await.unwrap(),
        0
    );
    assert!(app.store.idempotency_key(&scope).await.unwrap().is_some());
    app.clock.advance(chrono::Duration::hours(24));
    assert!(app.store.expire_idempotency_keys(now(), 500).await.unwrap() >= 1);
    assert_eq!(app.store.idempotency_key(&scope).await.unwrap(), None);
}

/// Sends `n` copies of one request with `key` at once, spread over the
/// replicas (each with its caller's token: issuers name the replica).
async fn at_once(
    replicas: &[(&TestApp, &str)],
    target: (&str, &str),
    key: &str,
    n: usize,
    body: &str,
) -> Vec<Answer> {
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..n {
        let (app, token) = replicas[i % replicas.len()];
        requests.spawn(send(keyed(app, target, token, &[key], body)));
    }
    requests.join_all().await
}

/// Every answer is the one first answer (or, for a request that outwaited
/// `IN_PROGRESS_WAIT`, the in-progress 409), exactly one not a replay.
fn one_first_answer(answers: &[Answer]) -> Answer {
    let firsts: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == StatusCode::ACCEPTED && !a.replayed)
        .collect();
    assert_eq!(firsts.len(), 1, "{answers:#?}");
    let first = firsts[0].clone();
    for answer in answers {
        let conflict =
            answer.status == StatusCode::CONFLICT && answer.json() == message(IN_PROGRESS);
        assert!(
            answer.body == first.body || conflict,
            "{answer:?} beside {first:?}"
        );
    }
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_make_one_job() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-together");
    let answers = at_once(&[(&app, &token)], ORG_QUERY, "q", 12, SELECT_1).await;
    one_first_answer(&answers);
    assert_eq!(db.queries_of("idem-together").await, 1);
    let answers = at_once(&[(&app, &token)], ORG_LOAD, "l", 12, LOAD_BODY).await;
    one_first_answer(&answers);
    assert_eq!(db.loads_of("idem-together").await, 1);
}

/// Claims `key` for POST /query of `body` by `sub` (ZoneAdmin, `[0]`) as
/// another replica in the middle of answering it would.
async fn claim_elsewhere(
    app: &TestApp,
    sub: &str,
    key: &str,
    body: &str,
    claim_for: chrono::Duration,
) -> KeyScope {
    let scope = KeyScope {
        org: "demo".into(),
        zone: None,
        owner_sub: sub.into(),
        key: key.into(),
    };
    let canonical = JsonBody::parse(body.as_bytes()).unwrap().canonical();
    let request = KeyedRequest {
        operation: "POST /v2/query".into(),
        request_hash: request_hash("POST /v2/query", &canonical),
        access_fingerprint: AccessGrant {
            roles: vec!["ZoneAdmin".into()],
            service_clients: vec![0],
        }
        .fingerprint(),
    };
    let now = app.clock.now().timestamp_micros();
    let claimed = app
        .store
        .claim_idempotency_key(&NewClaim {
            scope: &scope,
            request: &request,
            claim: "elsewhere",
            now,
            expires_at: now + chrono::Duration::hours(24).num_microseconds().unwrap(),
            pending_until: now + claim_for.num_microseconds().unwrap(),
        })
        .await
        .unwrap();
    assert!(claimed);
    scope
}

fn accepted_elsewhere() -> StoredAnswer {
    StoredAnswer {
        status: 202,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"queryId":"answered-elsewhere"}"#.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_waits_for_a_first_request_in_progress_then_409() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-wait");
    let minute = chrono::Duration::seconds(60);

    // Still in progress after the wait: 409, nothing run.
    let scope = claim_elsewhere(&app, "idem-wait", "busy", SELECT_1, minute).await;
    let started = Instant::now();
    let answer = post(&app, ORG_QUERY, &token, &["busy"], SELECT_1).await;
    let waited = started.elapsed();
    assert_eq!(
        (answer.status, answer.json()),
        (StatusCode::CONFLICT, message(IN_PROGRESS))
    );
    assert!(waited >= IN_PROGRESS_WAIT, "answered after {waited:?}");
    assert!(
        waited < IN_PROGRESS_WAIT + Duration::from_secs(5),
        "{waited:?}"
    );
    // Another body is refused at once, in progress or not.
    let started = Instant::now();
    let other = post(
        &app,
        ORG_QUERY,
        &token,
        &["busy"],
        r#"{"query": "SELECT 2"}"#,
    )
    .await;
    assert_eq!(
        (other.status, other.json()),
        (StatusCode::CONFLICT, message(OTHER_BODY))
    );
    assert!(started.elapsed() < IN_PROGRESS_WAIT);
    // Once the first answers, retries get its answer.
    assert!(
        app.store
            .answer_idempotency_key(&scope, "elsewhere", &accepted_elsewhere())
            .await
            .unwrap()
    );
    let answer = post(&app, ORG_QUERY, &token, &["busy"], SELECT_1).await;
    assert_eq!(
        (answer.status, answer.json(), answer.replayed),
        (
            StatusCode::ACCEPTED,
            json!({"queryId": "answered-elsewhere"}),
            true
        )
    );

    // An answer arriving while the retry waits is the retry's answer.
    let scope = claim_elsewhere(&app, "idem-wait", "soon", SELECT_1, minute).await;
    let store = app.store.clone();
    let answering = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store
            .answer_idempotency_key(&scope, "elsewhere", &accepted_elsewhere())
            .await
            .unwrap()
    });
    let answer = post(&app, ORG_QUERY, &token, &["soon"], SELECT_1).await;
    assert!(answering.await.unwrap());
    assert_eq!(
        (answer.status, answer.replayed),
        (StatusCode::ACCEPTED, true),
        "{answer:?}"
    );

    // A first request whose replica died never answers: once its claim ran
    // out, a retry runs the request itself.
    claim_elsewhere(&app, "idem-wait", "orphan", SELECT_1, minute).await;
    app.clock.advance(minute + chrono::Duration::seconds(1));
    let token = admin_of(&app, "idem-wait");
    let answer = post(&app, ORG_QUERY, &token, &["orphan"], SELECT_1).await;
    assert_eq!(
        (answer.status, answer.replayed),
        (StatusCode::ACCEPTED, false),
        "{answer:?}"
    );
    let again = post(&app, ORG_QUERY, &token, &["orphan"], SELECT_1).await;
    assert_eq!((again.body, again.replayed), (answer.body, true));
    assert_eq!(db.queries_of("idem-wait").await, 1);
}

/// Two replicas on one store: a retry on the other gets the first answer,
/// duplicates sent to both at once make one job.
async fn replicas_answer_alike(first: &TestApp, second: &TestApp, db: &Db) {
    // One caller; each replica's tokens name its own issuer.
    let token = admin_of(first, "idem-replicas");
    let token_2 = admin_of(second, "idem-replicas");
    let answer = post(first, ORG_QUERY, &token, &["r-1"], SELECT_1).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    let elsewhere = post(second, ORG_QUERY, &token_2, &["r-1"], SELECT_1_AGAIN).await;
    assert_eq!(
        (elsewhere.status, &elsewhere.body, elsewhere.replayed),
        (answer.status, &answer.body, true)
    );
    let other = post(
        second,
        ORG_QUERY,
        &token_2,
        &["r-1"],
        r#"{"query": "SELECT 2"}"#,
    )
    .await;
    assert_eq!(
        (other.status, other.json()),
        (StatusCode::CONFLICT, message(OTHER_BODY))
    );
    assert_eq!(db.queries_of("idem-replicas").await, 1);

    let created = post(second, ORG_LOAD, &token_2, &["r-2"], LOAD_BODY).await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{created:?}");
    let again = post(first, ORG_LOAD, &token, &["r-2"], LOAD_BODY).await;
    assert_eq!((again.body, again.replayed), (created.body.clone(), true));
    assert_eq!(db.loads_of("idem-replicas").await, 1);

    let replicas = [(first, token.as_str()), (second, token_2.as_str())];
    let answers = at_once(&replicas, ORG_QUERY, "r-3", 12, SELECT_1).await;
    one_first_answer(&answers);
    assert_eq!(db.queries_of("idem-replicas").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_on_one_sqlite_file_answer_a_retry_alike() {
    let dir = tempfile::tempdir().unwrap();
    let clock = lakehost::clock::ManualClock::new();
    let first = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    let second = spawn_in(dir.path().to_path_buf(), clock, |_| {}).await;
    let db = Db::sqlite_of(&first).await;
    replicas_answer_alike(&first, &second, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(lakehost_has_postgres),
    ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
)]
async fn replicas_on_one_postgres_database_answer_a_retry_alike() {
    let url = fresh_postgres_url().await;
    let first = spawn_app_with(|c| c.storage.database_url = Some(url.clone())).await;
    let second = spawn_app_with(|c| c.storage.database_url = Some(url.clone())).await;
    let db = Db::connect(&url).await;
    replicas_answer_alike(&first, &second, &db).await;
}

#[tokio::test]
async fn the_openapi_documents_describe_the_header_where_it_is_taken() {
    let app = spawn_app().await;
    for host in [ORG_HOST, ZONE_HOST] {
        let (status, doc) = app.get(host, "/v2/openapi.json", None).await;
        assert_eq!(status, StatusCode::OK, "{host}: {doc}");
        for (path, keyed) in [
            ("/v2/query", true),
            ("/v2/load", true),
            ("/v2/load/{load_id}/commit", true),
            ("/v2/load/{load_id}/file", false),
        ] {
            let operation = &doc["paths"][path]["post"];
            let parameters = operation["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let header = parameters.iter().find(|p| p["name"] == "Idempotency-Key");
            assert_eq!(header.is_some(), keyed, "{host} {path}: {parameters:?}");
            if let Some(header) = header {
                assert_eq!(header["in"], "header");
                assert_eq!(header["required"], false);
                assert_eq!(header["schema"]["maxLength"], 257);
                assert!(operation["responses"]["409"].is_object(), "{host} {path}");
            }
            // Every success answer of a keyed operation may be a replay.
            let responses = operation["responses"].as_object().unwrap();
            let successes: Vec<_> = responses
                .iter()
                .filter(|(status, _)| status.starts_with('2'))
                .collect();
            assert!(!successes.is_empty(), "{host} {path}");
            for (status, response) in successes {
                let replayed = &response["headers"]["Idempotent-Replayed"];
                assert_eq!(
                    replayed.is_object(),
                    keyed,
                    "{host} {path} {status}: {response}"
                );
                if keyed {
                    assert_eq!(replayed["schema"]["enum"], json!(["true"]));
                }
            }
            // Answers that are never replays do not claim to be.
            for (status, response) in responses.iter().filter(|(s, _)| !s.starts_with('2')) {
                assert!(
                    response["headers"]["Idempotent-Replayed"].is_null(),
                    "{host} {path} {status}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_answer_is_kept_whole_with_its_headers() {
    let app = spawn_app().await;
    let db = Db::sqlite_of(&app).await;
    let token = admin_of(&app, "idem-wait-mode");
    let send_waiting = |prefer: &'static str| {
        keyed(&app, ORG_QUERY, &token, &["w"], SELECT_1)
            .header("Prefer", prefer)
            .send()
    };
    let first = send_waiting("wait=10").await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let applied = first.headers()["preference-applied"].clone();
    assert!(first.headers().get("idempotent-replayed").is_none());
    let content_type = first.headers()["content-type"].clone();
    let first_body = first.text().await.unwrap();
    let page: Value = serde_json::from_str(&first_body).unwrap();
    assert_eq!(page["status"]["state"], "SUCCEEDED", "{page}");
    assert_eq!(page_rows(&page)[1], vec![Some("1".to_string())]);

    // The retry, whatever it prefers now: the first answer as it was.
    for prefer in ["wait=10", "wait=0"] {
        let again = send_waiting(prefer).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.headers()["preference-applied"], applied);
        assert_eq!(again.headers()["content-type"], content_type);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.text().await.unwrap(), first_body);
    }
    assert_eq!(db.queries_of("idem-wait-mode").await, 1);
}
