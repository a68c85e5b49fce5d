//! Parameters from psycopg 3 (binary) and pgjdbc (`setDate`, `setBigDecimal`)
//! bound as values (issue 48).
//!
//! Each value is read in its format and type (text or binary: dates,
//! timestamps, numerics, arrays) and inlined as its exact literal, so the
//! rows written and read are the values the tool bound, and an own-client
//! analyst binding values is still refused rows not theirs (42501).

use lakehost_tests::*;
use serde_json::{Value, json};

use super::{
    LAB_TRIPS, admin,
    jdbc::{jdbc, jdbc_jar},
    pg_app,
};

/// A sandbox table of typed columns, as a tool's user makes one.
const CREATE_TYPED: &str = "CREATE TABLE demo_sandbox.typed (service_client_id BIGINT, \
                            day DATE, at TIMESTAMP, amount DECIMAL(10, 2), name VARCHAR)";
/// Its rows as REST reads them.
const TYPED_ROWS: &str = "SELECT service_client_id, CAST(day AS VARCHAR), \
                          CAST(at AS VARCHAR), CAST(amount AS VARCHAR), name \
                          FROM demo_sandbox.typed ORDER BY service_client_id";

fn rows(result: &Value) -> &Value {
    assert!(result.get("rows").is_some(), "no rows: {result}");
    &result["rows"]
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn psycopg_binds_dates_timestamps_numerics_and_lists_in_binary_as_values() {
    let python = test_python();
    let pg = pg_app().await;
    let day = json!({ "date": "2026-01-10" });
    let at = json!({ "timestamp": "2026-01-10T12:30:00.25" });
    let amount = json!({ "decimal": "123.45" });
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                { "sql": CREATE_TYPED },
                // %b: psycopg sends these in binary.
                { "sql": "INSERT INTO demo_sandbox.typed (service_client_id, day, at, amount, name) VALUES (%b, %b, %b, %b, %b)",
                  "params": [1, day, at, amount, "it's"] },
                // %s: as psycopg chooses (text for these).
                { "sql": "INSERT INTO demo_sandbox.typed (service_client_id, day, at, amount, name) VALUES (%s, %s, %s, %s, %s)",
                  "params": [2, { "date": "2026-01-11" }, { "timestamp": "2026-01-11T00:00:00" },
                             { "decimal": "-0.50" }, "a''b"] },
                { "sql": "SELECT name FROM demo_sandbox.typed \
                          WHERE day = %b AND amount = %b AND at = %b",
                  "params": [day, amount, at] },
                // An aware timestamp (timestamptz in binary).
                { "sql": "SELECT name FROM demo_sandbox.typed WHERE at >= %b",
                  "params": [{ "timestamp": "2026-01-10T13:00:00+00:00" }] },
                // = ANY with a list: an array parameter, text and binary.
                { "sql": "SELECT trip_id FROM demo_lake_v2.trips \
                          WHERE trip_id = ANY(%s) ORDER BY trip_id", "params": [[100, 101, 7]] },
                { "sql": "SELECT trip_id FROM demo_lake_v2.trips \
                          WHERE trip_id IN (100, 101, 7) ORDER BY trip_id" },
                { "sql": "SELECT name FROM demo_sandbox.typed \
                          WHERE name = ANY(%b) AND day = ANY(%b) ORDER BY name",
                  "params": [["it's", "a''b", "x"], [day, { "date": "2026-01-11" }]] },
                // Non-finite values and quotes arrive as they were bound.
                { "sql": "SELECT CAST(%b AS VARCHAR) AS n, CAST(%b AS VARCHAR) AS f, %b AS s",
                  "params": [{ "decimal": "NaN" }, { "float": "-inf" }, "''"] },
                { "sql": "SELECT %b AS d, %b AS n", "params": [day, { "decimal": "1.50" }] },
            ]),
        )
        .await;
    for (i, result) in results.iter().enumerate().take(3) {
        assert!(result.get("error").is_none(), "{i}: {result}");
    }
    assert_eq!(rows(&results[3]), &json!([["it's"]]), "{results:?}");
    assert_eq!(rows(&results[4]), &json!([["a''b"]]));
    assert_eq!(rows(&results[5]), rows(&results[6]));
    assert_eq!(rows(&results[5]), &json!([[100], [101]]));
    assert_eq!(rows(&results[7]), &json!([["a''b"], ["it's"]]));
    assert_eq!(rows(&results[8]), &json!([["NaN", "-inf", "''"]]));
    assert_eq!(rows(&results[9]), &json!([["2026-01-10", 1.5]]));

    // The rows written are the values bound, as REST reads them.
    let token = pg.app.client_token("demo", "demo-admin").await;
    let written = pg.app.rows_of(ORG_HOST, &token, TYPED_ROWS).await;
    let text = |row: &[&str]| row.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(
        written,
        vec![
            text(&[
                "1",
                "2026-01-10",
                "2026-01-10T12:30:00.250",
                "123.45",
                "it's"
            ]),
            text(&["2", "2026-01-11", "2026-01-11T00:00:00", "-0.50", "a''b"]),
        ]
    );

    // An own-client analyst binding values: refused rows not theirs.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let results = pg
        .run(
            &python,
            analyst,
            json!([
                { "sql": "SELECT trip_id FROM lab_lake.trips WHERE trip_id = ANY(%b)",
                  "params": [[100, 101]] },
                { "sql": "SELECT trip_id FROM lab_lake.trips WHERE service_client_id = %b \
                          AND trip_id = ANY(%b) ORDER BY trip_id", "params": [1, [100, 101, 102]] },
                { "sql": "SELECT %b AS d", "params": [{ "timestamp": "2026-01-10T00:00:00+00:00" }] },
            ]),
        )
        .await;
    assert_eq!(results[0]["error"], DATA_DENIED, "{}", results[0]);
    assert_eq!(results[0]["sqlstate"], "42501");
    assert_eq!(rows(&results[1]), &json!([[100], [101]]));
    assert!(rows(&results[2])[0][0].as_str().is_some(), "{}", results[2]);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn parameters_lakehost_cannot_read_are_refused_naming_their_type() {
    let python = test_python();
    let pg = pg_app().await;
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                // A two-dimensional array.
                { "sql": "SELECT %s AS a", "params": [[[1, 2], [3, 4]]] },
                // An interval (a Python timedelta), in text and binary.
                { "sql": "SELECT %s AS i", "params": [{ "interval": "5" }] },
                { "sql": "SELECT %b AS i", "params": [{ "interval": "5" }] },
                // The session goes on.
                { "sql": "SELECT %b AS n", "params": [1] },
            ]),
        )
        .await;
    for result in &results[1..3] {
        assert_eq!(result["sqlstate"], "0A000", "{result}");
        assert!(
            result["error"]
                .as_str()
                .unwrap()
                .starts_with("lakehost does not read parameters of type interval"),
            "{result}"
        );
    }
    assert_eq!(rows(&results[3]), &json!([[1]]));
    assert_eq!(results[0]["sqlstate"], "0A000", "{}", results[0]);
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap()
            .contains("one-dimensional arrays only"),
        "{}",
        results[0]
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_jdbc),
    ignore = "needs java and pgjdbc: eval \"$(.ci/jdbc)\" first (README, Tests)"
)]
async fn pgjdbc_set_date_timestamp_and_big_decimal_bind_as_values() {
    let jar = jdbc_jar();
    let pg = pg_app().await;
    let day = json!({ "date": "2026-01-10" });
    let at = json!({ "timestamp": "2026-01-10 12:30:00.25" });
    let amount = json!({ "decimal": "123.45" });
    let by_values = "SELECT name FROM demo_sandbox.typed \
                     WHERE day = ? AND at = ? AND amount = ?";
    let answer = jdbc(
        &jar,
        &pg,
        ("demo-admin", "demo-admin-secret", "demo"),
        json!({ "statements": [
            { "sql": CREATE_TYPED },
            { "sql": "INSERT INTO demo_sandbox.typed (service_client_id, day, at, amount, name) VALUES (?, ?, ?, ?, ?)",
              "params": [1, day, at, amount, "it's"] },
            // setDate and setTimestamp send untyped text with a zone.
            // Described with NULLs once pgjdbc prepares it on the server.
            { "sql": by_values, "params": [day, at, amount], "repeat": 6 },
            { "sql": "SELECT ? AS d, ? AS t", "params": [day, at] },
            // From the 5th run on, prepared on the server: BigDecimal in binary.
            { "sql": "SELECT ? AS n", "params": [{ "decimal": "-12345678.9001" }], "repeat": 6 },
        ] }),
    )
    .await;
    let results = &answer["results"];
    assert_eq!(rows(&results[1]), &json!([[1]]), "{answer}");
    assert_eq!(rows(&results[2]), &json!([["it's"]]), "{answer}");
    assert_eq!(
        rows(&results[3]),
        &json!([["2026-01-10", "2026-01-10 12:30:00.25"]]),
        "{answer}"
    );
    assert_eq!(rows(&results[4]), &json!([["-12345678.9001"]]), "{answer}");
    let token = pg.app.client_token("demo", "demo-admin").await;
    let written = pg.app.rows_of(ORG_HOST, &token, TYPED_ROWS).await;
    assert_eq!(written[0][1].as_deref(), Some("2026-01-10"), "{written:?}");
    assert_eq!(written[0][3].as_deref(), Some("123.45"), "{written:?}");

    // An own-client analyst's setDate: still refused rows not theirs.
    let answer = jdbc(
        &jar,
        &pg,
        ("demo-own-analyst", "demo-own-analyst-secret", "lab.demo"),
        json!({ "statements": [
            { "sql": LAB_TRIPS.replace("ORDER BY", "WHERE ? IS NOT NULL ORDER BY"),
              "params": [day] },
        ] }),
    )
    .await;
    let refused = &answer["results"][0];
    assert_eq!(refused["error"], DATA_DENIED, "{answer}");
    assert_eq!(refused["sqlstate"], "42501", "{answer}");
}
