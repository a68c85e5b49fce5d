//! S3's signatures, computed as boto3 and S3's documentation compute them,
//! over a [`RawRequest`] whose target stays as written: SigV4 in headers and
//! in the query (a presigned URL), SigV2 in headers, the signature of a POST
//! policy, and the multipart body of a form POST. The corpus signs what it
//! sends with these, so that a refusal is the server's decision on the
//! request's content and never a signature it could not check.
//!
//! Signing times are the wall clock's (S3 checks request times against its
//! own clock, as s3s does), never the test server's injected clock.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use crate::raw_http::{RawRequest, percent_decode};

/// The region and service every signature is scoped to.
const REGION: &str = "us-east-1";
const SERVICE: &str = "s3";

/// The credentials a request is signed with; an empty session token is left
/// out of the request.
#[derive(Debug, Clone)]
pub struct SigningCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
}

fn hmac_sha256(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// S3's URI encoding: unreserved bytes stay, `/` stays unless `encode_slash`.
fn uri_encode(text: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'~' | b'.' => {
                out.push(byte as char)
            }
            b'/' if !encode_slash => out.push('/'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The canonical query string of `query` (decoded, re-encoded, sorted),
/// `X-Amz-Signature` left out.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                uri_encode(&percent_decode(name), true),
                uri_encode(&percent_decode(value), true),
            )
        })
        .filter(|(name, _)| name != "X-Amz-Signature")
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The headers a SigV4 signature covers: all but the transport's.
fn signed_header_names(request: &RawRequest) -> Vec<String> {
    let mut names: Vec<String> = request
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .filter(|n| {
            !matches!(
                n.as_str(),
                "authorization" | "content-length" | "connection"
            )
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn canonical_request(request: &RawRequest, names: &[String], payload_hash: &str) -> String {
    let headers: String = names
        .iter()
        .map(|name| {
            format!(
                "{name}:{}\n",
                request.header(name).unwrap_or_default().trim()
            )
        })
        .collect();
    format!(
        "{}\n{}\n{}\n{headers}\n{}\n{payload_hash}",
        request.method,
        uri_encode(&percent_decode(request.path()), false),
        canonical_query(request.query()),
        names.join(";"),
    )
}

fn scope(now: DateTime<Utc>) -> String {
    format!("{}/{REGION}/{SERVICE}/aws4_request", now.format("%Y%m%d"))
}

fn sigv4_signature(secret: &str, now: DateTime<Utc>, canonical: &str) -> String {
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{}\n{}",
        now.format("%Y%m%dT%H%M%SZ"),
        scope(now),
        sha256_hex(canonical.as_bytes())
    );
    let date_key = hmac_sha256(
        format!("AWS4{secret}").as_bytes(),
        &now.format("%Y%m%d").to_string(),
    );
    let region_key = hmac_sha256(&date_key, REGION);
    let service_key = hmac_sha256(&region_key, SERVICE);
    let signing_key = hmac_sha256(&service_key, "aws4_request");
    hex::encode(hmac_sha256(&signing_key, &string_to_sign))
}

/// Signs `request` with SigV4 in its headers (as boto3 does: the payload's
/// SHA-256, the date and the session token signed with every other header).
pub fn sign_v4(request: &mut RawRequest, credentials: &SigningCredentials, now: DateTime<Utc>) {
    let payload_hash = sha256_hex(&request.body);
    request.set_header("x-amz-content-sha256", &payload_hash);
    request.set_header("x-amz-date", &now.format("%Y%m%dT%H%M%SZ").to_string());
    if !credentials.session_token.is_empty() {
        request.set_header("x-amz-security-token", &credentials.session_token);
    }
    let names = signed_header_names(request);
    let canonical = canonical_request(request, &names, &payload_hash);
    let signature = sigv4_signature(&credentials.secret_access_key, now, &canonical);
    request.set_header(
        "Authorization",
        &format!(
            "AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={signature}",
            credentials.access_key_id,
            scope(now),
            names.join(";")
        ),
    );
}

/// Presigns `request` with SigV4 in its query (an unsigned payload, the host
/// header signed, valid for `expires_s`), as `generate_presigned_url` does.
pub fn presign_v4(
    request: &mut RawRequest,
    credentials: &SigningCredentials,
    now: DateTime<Utc>,
    expires_s: u32,
) {
    let mut params = vec![
        (
            "X-Amz-Algorithm".to_string(),
            "AWS4-HMAC-SHA256".to_string(),
        ),
        (
            "X-Amz-Credential".into(),
            format!("{}/{}", credentials.access_key_id, scope(now)),
        ),
        (
            "X-Amz-Date".into(),
            now.format("%Y%m%dT%H%M%SZ").to_string(),
        ),
        ("X-Amz-Expires".into(), expires_s.to_string()),
        ("X-Amz-SignedHeaders".into(), "host".into()),
    ];
    if !credentials.session_token.is_empty() {
        params.push((
            "X-Amz-Security-Token".into(),
            credentials.session_token.clone(),
        ));
    }
    let added: Vec<String> = params
        .iter()
        .map(|(n, v)| format!("{n}={}", uri_encode(v, true)))
        .collect();
    let separator = if request.query().is_empty() && !request.target.contains('?') {
        "?"
    } else {
        "&"
    };
    request.target = format!("{}{separator}{}", request.target, added.join("&"));
    let names = vec!["host".to_string()];
    let canonical = canonical_request(request, &names, "UNSIGNED-PAYLOAD");
    let signature = sigv4_signature(&credentials.secret_access_key, now, &canonical);
    request.target = format!("{}&X-Amz-Signature={signature}", request.target);
}

/// The sub-resources SigV2 signs, in its order (a subset of S3's list).
const SIGV2_SUBRESOURCES: &[&str] = &["partNumber", "uploadId", "uploads"];

/// Signs `request` with SigV2 in its headers (`Authorization: AWS id:sig`):
/// method, Content-MD5, Content-Type, Date, the `x-amz-*` headers, the path.
pub fn sign_v2(request: &mut RawRequest, credentials: &SigningCredentials, now: DateTime<Utc>) {
    request.set_header("Date", &now.format("%a, %d %b %Y %H:%M:%S GMT").to_string());
    if !credentials.session_token.is_empty() {
        request.set_header("x-amz-security-token", &credentials.session_token);
    }
    let mut amz: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(n, _)| n.starts_with("x-amz-"))
        .collect();
    amz.sort();
    let amz_headers: String = amz.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let query: Vec<(String, String)> = request
        .query()
        .split('&')
        .filter_map(|p| {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            SIGV2_SUBRESOURCES
                .contains(&name)
                .then(|| (name.to_string(), value.to_string()))
        })
        .collect();
    let mut resource = request.path().to_string();
    for (i, (name, value)) in query.iter().enumerate() {
        resource.push(if i == 0 { '?' } else { '&' });
        resource.push_str(name);
        if !value.is_empty() {
            resource.push('=');
            resource.push_str(value);
        }
    }
    let string_to_sign = format!(
        "{}\n{}\n{}\n{}\n{amz_headers}{resource}",
        request.method,
        request.header("Content-MD5").unwrap_or_default(),
        request.header("Content-Type").unwrap_or_default(),
        request.header("Date").unwrap_or_default(),
    );
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(credentials.secret_access_key.as_bytes())
        .expect("any key length");
    mac.update(string_to_sign.as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    request.set_header(
        "Authorization",
        &format!("AWS {}:{signature}", credentials.access_key_id),
    );
}

/// The signature of a POST policy (signature version 2): base64 of
/// HMAC-SHA1(secret, base64 policy).
pub fn policy_signature(secret: &str, policy_base64: &str) -> String {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(policy_base64.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// A `multipart/form-data` body of `fields` in their order, then the file:
/// the Content-Type header's value and the body.
pub fn form_body(fields: &[(String, String)], filename: &str, file: &[u8]) -> (String, Vec<u8>) {
    let boundary = "lakehost-corpus-boundary-7d1f";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published example (GET Object, "Signature Calculations for the
    /// Authorization Header"): the same canonical request and signature.
    #[test]
    fn sigv4_matches_aws_example() {
        let now = DateTime::parse_from_rfc3339("2013-05-24T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut request = RawRequest::new("GET", "/test.txt", "examplebucket.s3.amazonaws.com");
        request.set_header("Range", "bytes=0-9");
        let credentials = SigningCredentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: String::new(),
        };
        sign_v4(&mut request, &credentials, now);
        assert!(
            request.header("Authorization").unwrap().ends_with(
                "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
            ),
            "{request:?}"
        );
    }

    #[test]
    fn canonical_queries_are_decoded_encoded_and_sorted() {
        assert_eq!(
            canonical_query("uploadId=a%2Fb&partNumber=1&uploads"),
            "partNumber=1&uploadId=a%2Fb&uploads="
        );
    }
}
