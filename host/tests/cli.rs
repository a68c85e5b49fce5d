//! The `lakehost` binary as a newcomer runs it: `serve` with the embedded default
//! (on a free port), and startup refused with a message naming a bad key.

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
};

fn lakehost() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lakehost"));
    // Only the variables each test sets.
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

#[test]
fn bad_keys_stop_startup_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("LAKEHOST_SERVER_LISTN", "127.0.0.1:0")], "server.listn"),
        (
            &[("LAKEHOST_SERVER_REQUEST_TIMEOUT_S", "soon")],
            "server.request_timeout_s",
        ),
        (&[("LAKEHOST_AUTH_LEEWAY_S", "300")], "auth.leeway_s"),
    ];
    for (vars, key) in cases {
        let output = lakehost()
            .arg("serve")
            .current_dir(dir.path())
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{key}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("`{key}`")), "{key}: {stderr}");
    }
    // A config file with an unknown key names the key too.
    let file = dir.path().join("lakehost.toml");
    std::fs::write(&file, "[storage]\ndata_dri = \"x\"\n").unwrap();
    let output = lakehost()
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("`storage.data_dri`"));
}

#[test]
fn serve_starts_with_the_embedded_default_and_prints_how_to_get_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = lakehost()
        .arg("serve")
        .current_dir(dir.path())
        .env("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0")
        .env("LAKEHOST_STORAGE_S3_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("lakehost listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    let rest: Vec<String> = lines.by_ref().take(5).map(|l| l.unwrap()).collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("grant_type=client_credentials")),
        "{rest:?}"
    );
    // The embedded default keeps its data under ./lakehost-data.
    assert!(
        dir.path()
            .join("lakehost-data/idp/demo/signing-keys.json")
            .exists()
    );
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read as _, Write as _};
    write!(
        stream,
        "GET /v2/openapi.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"openapi\":\"3.1.0\""));
}
