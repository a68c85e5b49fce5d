//! S3-style presigned GETs (AWS Signature Version 4, query authentication)
//! for result files that the storage endpoint (`storage.s3_listen`) serves
//! itself when the lake is on local disk. The links look and verify like
//! S3's own, so every S3 tool understands them, and they live on the storage
//! endpoint's origin, not the API's: an HTTP client that follows the 302 of
//! `GET /query/{id}/csv` drops its `Authorization` header by itself, as it
//! does for a redirect to real object storage.
//!
//! The SigV4 secret is derived from the link key every replica shares through
//! the metadata store, so any replica verifies any replica's links. Signing
//! and verifying read the injected clock. Only keys under `_results/` are
//! ever signed or served.

use chrono::{DateTime, NaiveDateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;
use url::Url;

use super::signing::LinkSigner;

type HmacSha256 = Hmac<Sha256>;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SERVICE: &str = "s3";
const REGION: &str = "us-east-1";
/// The access key id in the links' credential scope: names no user, only
/// that the storage endpoint itself signed the link.
const ACCESS_KEY: &str = "LAKEHOSTRESULTLINK";
/// The only keys links are made for and served from.
pub const RESULTS_PREFIX: &str = "_results/";
/// S3 tolerates a request dated this far in the future (clock skew).
const MAX_SKEW_S: i64 = 15 * 60;

/// Why a presigned request is refused; each maps to S3's own error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresignError {
    /// A parameter missing or malformed (S3: AuthorizationQueryParametersError).
    #[error("{0}")]
    Malformed(String),
    /// S3: AccessDenied "Request has expired".
    #[error("Request has expired")]
    Expired,
    /// S3: SignatureDoesNotMatch.
    #[error("The request signature we calculated does not match the signature you provided.")]
    SignatureMismatch,
    /// A key this endpoint never signs (S3: AccessDenied).
    #[error("Access Denied")]
    NotAResult,
}

/// Makes and checks the storage endpoint's presigned result links.
#[derive(Clone)]
pub struct ResultLinks {
    /// The storage endpoint as callers reach it (`uploads.public_url`, else
    /// the address of `storage.s3_listen`).
    endpoint: Url,
    bucket: String,
    secret: String,
    max_lifetime_s: u64,
}

impl std::fmt::Debug for ResultLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultLinks")
            .field("endpoint", &self.endpoint.as_str())
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl ResultLinks {
    /// Links of at most `max_lifetime_s` on `endpoint`'s `bucket`, signed with
    /// a secret derived from the shared link key.
    pub fn new(signer: &LinkSigner, endpoint: Url, bucket: String, max_lifetime_s: u64) -> Self {
        Self {
            endpoint,
            bucket,
            secret: signer.sign("presigned-result-links", &[]),
            max_lifetime_s,
        }
    }

    /// A presigned GET of the result file `key`, valid `lifetime_s` from `now`.
    pub fn sign(
        &self,
        key: &str,
        lifetime_s: u64,
        now: DateTime<Utc>,
    ) -> Result<Url, PresignError> {
        if !key.starts_with(RESULTS_PREFIX) {
            return Err(PresignError::NotAResult);
        }
        let lifetime_s = lifetime_s.min(self.max_lifetime_s);
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let scope = format!("{}/{REGION}/{SERVICE}/aws4_request", &amz_date[..8]);
        let mut url = self.endpoint.clone();
        url.set_path(&format!("{}/{}", self.bucket, key));
        let host = host_of(&url);
        let params = vec![
            ("X-Amz-Algorithm".to_string(), ALGORITHM.to_string()),
            (
                "X-Amz-Credential".to_string(),
                format!("{ACCESS_KEY}/{scope}"),
            ),
            ("X-Amz-Date".to_string(), amz_date.clone()),
            ("X-Amz-Expires".to_string(), lifetime_s.to_string()),
            ("X-Amz-SignedHeaders".to_string(), "host".to_string()),
        ];
        let canonical_query = canonical_query(&params);
        let signature = self.signature(
            "GET",
            &canonical_uri(url.path()),
            &canonical_query,
            &host,
            &amz_date,
            &scope,
        );
        url.set_query(Some(&format!(
            "{canonical_query}&X-Amz-Signature={signature}"
        )));
        Ok(url)
    }

    /// Checks a presigned request (`method` GET or HEAD; `path` and `query` as
    /// received; `host` its Host header) at `now`; returns the object key.
    pub fn verify(
        &self,
        method: &str,
        host: &str,
        path: &str,
        query: &str,
        now: DateTime<Utc>,
    ) -> Result<String, PresignError> {
        let malformed = |what: &str| PresignError::Malformed(what.to_string());
        let mut params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    PresignError::Malformed(format!(
                        "Query-string authentication requires the {name} parameter"
                    ))
                })
        };
        let signature = param("X-Amz-Signature")?;
        if param("X-Amz-Algorithm")? != ALGORITHM {
            return Err(malformed(
                "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"",
            ));
        }
        let amz_date = param("X-Amz-Date")?;
        let signed_at = NaiveDateTime::parse_from_str(&amz_date, "%Y%m%dT%H%M%SZ")
            .map_err(|_| {
                malformed("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
            })?
            .and_utc();
        let expires: i64 = param("X-Amz-Expires")?
            .parse()
            .ok()
            .filter(|s| (1..=self.max_lifetime_s as i64).contains(s))
            .ok_or_else(|| {
                PresignError::Malformed(format!(
                    "X-Amz-Expires must be between 1 and {} seconds",
                    self.max_lifetime_s
                ))
            })?;
        if param("X-Amz-SignedHeaders")? != "host" {
            return Err(malformed("X-Amz-SignedHeaders must be \"host\""));
        }
        let scope = format!("{}/{REGION}/{SERVICE}/aws4_request", &amz_date[..8]);
        if param("X-Amz-Credential")? != format!("{ACCESS_KEY}/{scope}") {
            return Err(PresignError::SignatureMismatch);
        }
        params.retain(|(k, _)| k != "X-Amz-Signature");
        // A HEAD of a GET link tells only what the GET would: its headers.
        let signed_method = if method == "HEAD" { "GET" } else { method };
        let expected = self.signature(
            signed_method,
            &canonical_uri(path),
            &canonical_query(&params),
            host,
            &amz_date,
            &scope,
        );
        if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
            return Err(PresignError::SignatureMismatch);
        }
        let now_s = now.timestamp();
        if now_s > signed_at.timestamp() + expires || now_s + MAX_SKEW_S < signed_at.timestamp() {
            return Err(PresignError::Expired);
        }
        let decoded = percent_decode(path);
        let key = decoded
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(self.bucket.as_str()))
            .and_then(|p| p.strip_prefix('/'))
            .ok_or(PresignError::NotAResult)?;
        if !key.starts_with(RESULTS_PREFIX) || key.split('/').any(|s| s == ".." || s == ".") {
            return Err(PresignError::NotAResult);
        }
        Ok(key.to_string())
    }

    /// The hex signature of one request (SigV4, payload unsigned).
    fn signature(
        &self,
        method: &str,
        canonical_uri: &str,
        canonical_query: &str,
        host: &str,
        amz_date: &str,
        scope: &str,
    ) -> String {
        let canonical_request = format!(
            "{method}\n{canonical_uri}\n{canonical_query}\nhost:{}\n\nhost\nUNSIGNED-PAYLOAD",
            host.trim()
        );
        let string_to_sign = format!(
            "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical_request.as_bytes()))
        );
        let key = signing_key(&self.secret, &amz_date[..8]);
        hex::encode(hmac(&key, string_to_sign.as_bytes()))
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// SigV4's derived key: date, region, service, "aws4_request".
fn signing_key(secret: &str, date: &str) -> Vec<u8> {
    let key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let key = hmac(&key, REGION.as_bytes());
    let key = hmac(&key, SERVICE.as_bytes());
    hmac(&key, b"aws4_request")
}

/// `host[:port]` as a client sends it in the Host header (default ports
/// omitted).
fn host_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// S3's URI encoding: everything but unreserved characters, `/` kept in paths.
fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            b'/' if keep_slash => out.push('/'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `%XX` escapes decoded once; anything else (a `+` included) kept as is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path as received, decoded once and encoded the S3 way.
fn canonical_uri(path: &str) -> String {
    uri_encode(&percent_decode(path), true)
}

/// Parameters encoded and sorted by name, then value.
fn canonical_query(params: &[(String, String)]) -> String {
    let mut encoded: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    encoded.sort();
    encoded
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn links() -> ResultLinks {
        ResultLinks::new(
            &LinkSigner::new(b"a shared link key of 32 bytes...."),
            Url::parse("http://127.0.0.1:9000").unwrap(),
            "lakehost-uploads".into(),
            900,
        )
    }

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn parts(url: &Url) -> (String, String, String) {
        (
            host_of(url),
            url.path().to_string(),
            url.query().unwrap().to_string(),
        )
    }

    /// The example of AWS's "Authenticating Requests: Using Query Parameters"
    /// page, signed by this code's SigV4 steps.
    #[test]
    fn the_signature_is_aws_sigv4() {
        let date = "20130524T000000Z";
        let scope = "20130524/us-east-1/s3/aws4_request";
        let params: Vec<(String, String)> = [
            ("X-Amz-Algorithm", ALGORITHM),
            (
                "X-Amz-Credential",
                "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request",
            ),
            ("X-Amz-Date", date),
            ("X-Amz-Expires", "86400"),
            ("X-Amz-SignedHeaders", "host"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let aws = ResultLinks {
            endpoint: Url::parse("https://examplebucket.s3.amazonaws.com").unwrap(),
            bucket: String::new(),
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            max_lifetime_s: 86400,
        };
        assert_eq!(
            aws.signature(
                "GET",
                "/test.txt",
                &canonical_query(&params),
                "examplebucket.s3.amazonaws.com",
                date,
                scope
            ),
            "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn a_link_verifies_until_it_expires_and_only_for_its_object_and_host() {
        let links = links();
        let url = links.sign("_results/demo/x/q-1.csv", 900, at(0)).unwrap();
        assert!(url.as_str().starts_with(
            "http://127.0.0.1:9000/lakehost-uploads/_results/demo/x/q-1.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        ));
        let (host, path, query) = parts(&url);
        for method in ["GET", "HEAD"] {
            assert_eq!(
                links.verify(method, &host, &path, &query, at(900)),
                Ok("_results/demo/x/q-1.csv".to_string())
            );
        }
        assert_eq!(
            links.verify("GET", &host, &path, &query, at(901)),
            Err(PresignError::Expired)
        );
        let other = path.replace("q-1", "q-2");
        assert_eq!(
            links.verify("GET", &host, &other, &query, at(1)),
            Err(PresignError::SignatureMismatch)
        );
        assert_eq!(
            links.verify("GET", "evil.example", &path, &query, at(1)),
            Err(PresignError::SignatureMismatch)
        );
        assert_eq!(
            links.verify("PUT", &host, &path, &query, at(1)),
            Err(PresignError::SignatureMismatch)
        );
        let longer = query.replace("X-Amz-Expires=900", "X-Amz-Expires=899");
        assert_eq!(
            links.verify("GET", &host, &path, &longer, at(1)),
            Err(PresignError::SignatureMismatch)
        );
    }

    #[test]
    fn lifetimes_are_capped_and_only_results_are_signed() {
        let links = links();
        let url = links.sign("_results/a.csv", 3600, at(0)).unwrap();
        assert!(url.query().unwrap().contains("X-Amz-Expires=900"));
        assert_eq!(
            links.sign("_staging/a.parquet", 60, at(0)),
            Err(PresignError::NotAResult)
        );
        let (host, path, query) = parts(&url);
        let too_long = query.replace("X-Amz-Expires=900", "X-Amz-Expires=901");
        assert!(matches!(
            links.verify("GET", &host, &path, &too_long, at(1)),
            Err(PresignError::Malformed(_))
        ));
        let unsigned = query.split("&X-Amz-Signature").next().unwrap().to_string();
        assert!(matches!(
            links.verify("GET", &host, &path, &unsigned, at(1)),
            Err(PresignError::Malformed(_))
        ));
    }
}
