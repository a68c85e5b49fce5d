//! The Flight SQL listener against the probes of issue 45, driven as the
//! attacker drove it: raw HTTP/2 connections carrying gRPC calls, each
//! protobuf message written by hand (the suite has no gRPC client of its
//! own; the real clients' tests are in `flight_sql.rs`).
//!
//! - every call but `Handshake` needs a valid token, and a refused call
//!   closes its connection, so idle clients without credentials cannot hold
//!   the listener's connections;
//! - each org holds at most its share of the listener's connections, so one
//!   org's connections leave room for the others';
//! - wrong secrets in the handshake spend the client address's failure
//!   budget, past which even the right one waits;
//! - a status never echoes caller input whole (a 3 MB ticket came back in
//!   the message, and gRPC clients dropped the answer).

pub(crate) mod grpc;

use std::time::Duration;

use grpc::*;
use lakehost::auth::failure_budget::{FAILURES_PER_WINDOW, WINDOW_S};
use lakehost_tests::*;

async fn flight_app(adjust: impl FnOnce(&mut lakehost::Config)) -> TestApp {
    spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(config);
    })
    .await
}

/// `sql` planned on `connection`: its ticket and query id.
async fn planned(
    connection: &Connection,
    metadata: &[(&str, String)],
    sql: &str,
) -> (Vec<u8>, String) {
    let statement = any("CommandStatementQuery", &field(1, sql.as_bytes()));
    let info = connection
        .call("GetFlightInfo", metadata, &command_descriptor(&statement))
        .await;
    assert_eq!(info.code, OK, "{info:?}");
    let info = &info.messages[0];
    let endpoint = &fields_of(info, 3)[0];
    let ticket = fields_of(endpoint, 1).remove(0);
    let app_metadata: serde_json::Value = serde_json::from_slice(&fields_of(info, 7)[0]).unwrap();
    let id = app_metadata["queryId"].as_str().unwrap().to_string();
    (ticket, id)
}

/// `sql` planned and its rows fetched on `connection`: the status of
/// `DoGet` and the number of messages it sent.
async fn query(connection: &Connection, metadata: &[(&str, String)], sql: &str) -> (u32, usize) {
    let (ticket, _) = planned(connection, metadata, sql).await;
    let rows = connection.call("DoGet", metadata, &ticket).await;
    (rows.code, rows.messages.len())
}

#[tokio::test]
async fn every_call_but_the_handshake_needs_a_token_and_a_refused_one_closes_its_connection() {
    let app = flight_app(|_| {}).await;
    let addr = app.flight_addr.unwrap();
    let catalogs = any("CommandGetCatalogs", &[]);
    let calls: [(&str, Vec<u8>); 6] = [
        ("ListActions", vec![]),
        ("ListFlights", vec![]),
        ("GetSchema", command_descriptor(&catalogs)),
        ("GetFlightInfo", command_descriptor(&catalogs)),
        ("DoGet", field(1, &catalogs)),
        ("DoAction", field(1, b"CloseSession")),
    ];
    let wrong_key = app.sign_with(
        &attacker_key(),
        jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &app.valid_claims("demo"),
    );
    for (method, message) in &calls {
        for metadata in [vec![], vec![bearer(&wrong_key)], vec![bearer("garbage")]] {
            let mut connection = Connection::open(addr).await;
            let answer = connection.call(method, &metadata, message).await;
            assert_eq!(
                (answer.code, answer.message.as_str()),
                (UNAUTHENTICATED, "Unauthorized"),
                "{method} with {metadata:?}"
            );
            assert!(
                connection.closed_by_server().await,
                "{method} refused and its connection still open"
            );
        }
    }
    // A call naming no org of this server cannot authenticate either.
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let mut connection = Connection::open(addr).await;
    let answer = connection
        .call("ListActions", &[bearer(&token), org("nosuch")], &[])
        .await;
    assert_eq!(answer.code, NOT_FOUND, "{answer:?}");
    assert!(connection.closed_by_server().await);
    // Nor does a handshake with the wrong secret; and it closes too.
    let mut connection = Connection::open(addr).await;
    let answer = connection
        .call("Handshake", &[basic("demo-admin", "not-the-secret")], &[])
        .await;
    assert_eq!(answer.code, UNAUTHENTICATED, "{answer:?}");
    assert!(connection.closed_by_server().await);

    // With a token every call is answered on one connection, which stays
    // open; a call lacking only the scope is refused and keeps it.
    let connection = Connection::open(addr).await;
    let listed = connection.call("ListActions", &[bearer(&token)], &[]).await;
    assert_eq!(listed.code, OK, "{listed:?}");
    assert!(!listed.messages.is_empty());
    let unimplemented = connection.call("ListFlights", &[bearer(&token)], &[]).await;
    assert_eq!(unimplemented.code, UNIMPLEMENTED, "{unimplemented:?}");
    let closed = connection
        .call("DoAction", &[bearer(&token)], &field(1, b"CloseSession"))
        .await;
    assert_eq!(closed.code, OK, "{closed:?}");
    let mut claims = app.valid_claims("demo");
    claims["scope"] = serde_json::json!("query:read");
    let read_only = app.sign("demo", &claims);
    let statement = any("CommandStatementQuery", &field(1, b"SELECT 1"));
    let forbidden = connection
        .call(
            "GetFlightInfo",
            &[bearer(&read_only)],
            &command_descriptor(&statement),
        )
        .await;
    assert_eq!(
        (forbidden.code, forbidden.message.as_str()),
        (PERMISSION_DENIED, "Forbidden")
    );
    let again = connection.call("ListActions", &[bearer(&token)], &[]).await;
    assert_eq!(again.code, OK, "{again:?}");
    assert!(!connection.driver.is_finished());
}

#[tokio::test]
async fn one_orgs_connections_leave_room_for_the_other_orgs() {
    // Three connections in all, two per org.
    let app = flight_app(|config| {
        config.server.max_connections = 3;
        config.server.max_connections_per_org = Some(2);
    })
    .await;
    let addr = app.flight_addr.unwrap();
    let demo = [bearer(&app.token_for(&["ZoneAdmin"], "[0]"))];
    let other = [
        bearer(&app.org_token_for("other", &["ZoneAdmin"], "[0]")),
        org("other"),
    ];
    let mut held = Vec::new();
    for _ in 0..2 {
        let connection = Connection::open(addr).await;
        let answer = connection.call("ListActions", &demo, &[]).await;
        assert_eq!(answer.code, OK, "{answer:?}");
        held.push(connection);
    }
    // The org's third is refused and closed, whatever it asks.
    let mut third = Connection::open(addr).await;
    let refused = third.call("ListActions", &demo, &[]).await;
    assert_eq!(refused.code, RESOURCE_EXHAUSTED, "{refused:?}");
    assert!(
        refused.message.contains("already holds its 2 connections"),
        "{refused:?}"
    );
    assert!(third.closed_by_server().await, "the third is still open");

    // Its place under the cap goes to the other org, which queries. (The
    // server lets the place go just after it closed the connection: a
    // connection opened in between is closed at the cap, so try again.)
    let mut answered = None;
    for _ in 0..100 {
        let connection = Connection::open(addr).await;
        match connection.try_call("ListActions", &other, &[]).await {
            Ok(answer) if answer.code == OK => {
                answered = Some(connection);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let connection = answered.expect("the other org never got a connection");
    let (code, messages) = query(&connection, &other, "SELECT 1 AS one").await;
    assert_eq!(code, OK);
    assert!(messages >= 2, "a schema and a batch: {messages}");

    // A connection serves one org: a call of the other org's on the first
    // org's connection is refused and closes it, which gives its place back.
    let mut first = held.remove(0);
    let moved = first.call("ListActions", &other, &[]).await;
    assert_eq!(moved.code, PERMISSION_DENIED, "{moved:?}");
    assert!(first.closed_by_server().await);
    let mut reopened = false;
    for _ in 0..100 {
        let connection = Connection::open(addr).await;
        if let Ok(answer) = connection.try_call("ListActions", &demo, &[]).await
            && answer.code == OK
        {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened, "the org's freed place was never given back");
}

#[tokio::test]
async fn wrong_secrets_from_one_address_spend_its_budget_and_then_even_the_right_one_waits() {
    let app = flight_app(|_| {}).await;
    let addr = app.flight_addr.unwrap();
    let right = [basic("demo-admin", "demo-admin-secret")];
    let wrong = [basic("demo-admin", "not-the-secret")];
    for guess in 0..FAILURES_PER_WINDOW {
        let mut connection = Connection::open(addr).await;
        let answer = connection.call("Handshake", &wrong, &[]).await;
        assert_eq!(answer.code, UNAUTHENTICATED, "guess {guess}: {answer:?}");
        assert!(connection.closed_by_server().await);
    }
    let mut connection = Connection::open(addr).await;
    let throttled = connection.call("Handshake", &right, &[]).await;
    assert_eq!(throttled.code, RESOURCE_EXHAUSTED, "{throttled:?}");
    assert_eq!(
        throttled.message,
        format!("too many failed attempts from this address; retry in {WINDOW_S} s")
    );
    assert!(connection.closed_by_server().await);

    // Once the window has passed, the right secret gets its token.
    app.clock.advance(chrono::Duration::seconds(WINDOW_S));
    let connection = Connection::open(addr).await;
    let answer = connection.call("Handshake", &right, &[]).await;
    assert_eq!(answer.code, OK, "{answer:?}");
    let token = answer.headers["authorization"].to_str().unwrap();
    assert!(token.starts_with("Bearer "), "{token}");
    let listed = connection
        .call("ListActions", &[("authorization", token.to_string())], &[])
        .await;
    assert_eq!(listed.code, OK, "{listed:?}");
}

#[tokio::test]
async fn statuses_quote_caller_input_cut_short() {
    let app = flight_app(|_| {}).await;
    let addr = app.flight_addr.unwrap();
    let token = [bearer(&app.token_for(&["ZoneAdmin"], "[0]"))];
    let connection = Connection::open(addr).await;

    // A 3 MB ticket handle, as the attacker sent.
    let handle = "x".repeat(3_000_000);
    let ticket = any("TicketStatementQuery", &field(1, handle.as_bytes()));
    let answer = connection.call("DoGet", &token, &field(1, &ticket)).await;
    assert_eq!(answer.code, NOT_FOUND, "{}", head(&answer.message));
    assert_eq!(
        answer.message,
        format!("query {}… not found", "x".repeat(200))
    );

    // A 1 MB action name, and a command of a type nobody serves.
    let action = "a".repeat(1_000_000);
    let answer = connection
        .call("DoAction", &token, &field(1, action.as_bytes()))
        .await;
    assert_eq!(answer.code, INVALID_ARGUMENT, "{}", head(&answer.message));
    assert_eq!(
        answer.message,
        format!("lakehost has no action \"{}…\"", "a".repeat(200))
    );
    let name = "b".repeat(1_000_000);
    let command = [field(1, name.as_bytes()), field(2, b"")].concat();
    let answer = connection
        .call("GetFlightInfo", &token, &command_descriptor(&command))
        .await;
    assert_eq!(answer.code, UNIMPLEMENTED, "{}", head(&answer.message));
    assert_eq!(
        answer.message,
        format!("lakehost does not serve {}… commands", "b".repeat(200))
    );

    // SQL the engine quotes in its error is cut at the message bound.
    let column = "c".repeat(1_000_000);
    let statement = any(
        "CommandStatementQuery",
        &field(1, format!("SELECT {column}").as_bytes()),
    );
    let answer = connection
        .call("GetFlightInfo", &token, &command_descriptor(&statement))
        .await;
    assert_eq!(answer.code, INVALID_ARGUMENT, "{}", head(&answer.message));
    assert_eq!(
        answer.message.chars().count(),
        1_001,
        "{}",
        head(&answer.message)
    );
    assert!(answer.message.ends_with('…'));
    assert!(!connection.driver.is_finished());
}

#[tokio::test]
async fn a_client_that_stops_reading_its_rows_loses_its_connection_and_its_query_stops() {
    // The short idle timeout; the long one (wire_idle_timeout_s, more than
    // the query's time limit) holds only while rows are being read.
    let app = flight_app(|config| {
        config.server.request_timeout_s = 1;
        config.server.idle_timeout_s = 2;
    })
    .await;
    let addr = app.flight_addr.unwrap();
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let metadata = [bearer(&token)];
    let mut connection = Connection::open(addr).await;
    let endless = "SELECT value FROM generate_series(1, 1000000000000)";
    let (ticket, id) = planned(&connection, &metadata, endless).await;
    let rows = connection
        .start("DoGet", &metadata, &ticket)
        .await
        .expect("DoGet answered");
    assert!(rows.headers().get("grpc-status").is_none(), "{rows:?}");
    // Its body is never read: the client's HTTP/2 window stays shut.
    let _unread = rows.into_body();
    assert!(
        connection.closed_by_server().await,
        "a connection whose client stopped reading is still open"
    );
    let job = app.wait_for(ORG_HOST, &token, &id, Some("FAILED")).await;
    let reason = job["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.contains("went away"), "{job}");
}
