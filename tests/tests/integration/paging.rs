//! Paging a whole large result (issue 19, must-have 5): 2.5 million rows
//! through `nextToken`, 2,500 pages in the spec's JSON shape, each row equal
//! to the same row of the result's CSV link, with quotes, commas and NULLs.

use lakehost_tests::{ORG_HOST, QUERY, page_rows, spawn_app};
use reqwest::StatusCode;

const ROWS: u64 = 2_500_000;

/// The fields of one CSV line as the result CSV writes them: every value
/// quoted (`""` inside), NULL an empty unquoted field.
fn csv_fields(line: &str) -> Vec<Option<String>> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        match chars.peek() {
            Some('"') => {
                chars.next();
                let mut value = String::new();
                while let Some(c) = chars.next() {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            value.push('"');
                        } else {
                            break;
                        }
                    } else {
                        value.push(c);
                    }
                }
                fields.push(Some(value));
            }
            _ => fields.push(None),
        }
        match chars.next() {
            Some(',') => continue,
            None => return fields,
            Some(other) => panic!("unexpected {other:?} in {line}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_a_half_million_rows_page_to_the_end_equal_to_the_csv() {
    let app = spawn_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let sql = format!(
        "SELECT value AS n, CASE WHEN value % 7 = 0 THEN NULL \
         ELSE concat('say \"', CAST(value AS VARCHAR), '\", ok') END AS note \
         FROM generate_series(1, {ROWS}) ORDER BY value"
    );
    let (id, done) = app.run_sql(ORG_HOST, &token, &sql).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");

    let link = app
        .request(reqwest::Method::GET, ORG_HOST, &format!("{QUERY}/{id}/csv"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(link.status(), StatusCode::FOUND);
    let location = link.headers()["location"].to_str().unwrap().to_string();
    let csv = app
        .http
        .get(&location)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut csv_rows = csv.lines();
    assert_eq!(
        csv_fields(csv_rows.next().unwrap()),
        [Some("n".into()), Some("note".into())]
    );

    let mut next_token: Option<String> = None;
    let (mut pages, mut rows) = (0u64, 0u64);
    loop {
        let (status, page) = app
            .result_page(ORG_HOST, &token, &id, next_token.as_deref())
            .await;
        assert_eq!(status, StatusCode::OK, "page {pages}: {page}");
        let mut page_rows = page_rows(&page);
        if pages == 0 {
            assert_eq!(page_rows.remove(0), [Some("n".into()), Some("note".into())]);
        }
        assert!(page_rows.len() <= 1000);
        for row in page_rows {
            rows += 1;
            let line = csv_rows
                .next()
                .unwrap_or_else(|| panic!("CSV ends before row {rows}"));
            assert_eq!(row, csv_fields(line), "row {rows}");
        }
        pages += 1;
        match page.get("nextToken").and_then(|t| t.as_str()) {
            Some(token) => next_token = Some(token.to_string()),
            None => break,
        }
    }
    assert_eq!((pages, rows), (ROWS / 1000, ROWS));
    assert!(
        csv_rows.next().is_none(),
        "the CSV has rows the pages did not"
    );
    assert_eq!(
        csv_fields(csv.lines().nth(7).unwrap()),
        [Some("7".into()), None]
    );
    assert_eq!(
        csv_fields(csv.lines().nth(ROWS as usize).unwrap()),
        [Some(ROWS.to_string()), Some(format!("say \"{ROWS}\", ok"))]
    );
}
