//! Upload grants: the temporary credentials and the presigned POST policy of an
//! upload descriptor (spec "Upload descriptor"), and the one check of an
//! upload against its grant (`LoadService::check_upload`), which both routes
//! of the upload endpoint (`s3/form.rs`, `s3/staging.rs`) call.
//!
//! Nothing per grant is stored. The session token carries the grant (access
//! key id, load, file, bucket, object key, expiry) signed with the server's
//! shared key; the secret access key is derived from the access key id with
//! that key. So any replica verifies any grant, and a grant cannot be widened:
//! changing a byte of the token breaks its signature, and a caller who signs
//! their own POST policy with the secret still only reaches the token's key
//! until the token's expiry.

use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac as _};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha1::Sha1;
use subtle::ConstantTimeEq as _;

use super::{LoadError, LoadService};
use crate::lake::signing::LinkSigner;

/// How long upload credentials and POST policies last (spec "Limits": 1 hour).
pub const UPLOAD_GRANT_LIFETIME_S: i64 = 3600;

const TOKEN_PREFIX: &str = "LKH1";
const GRANT_PURPOSE: &str = "upload-grant";
const SECRET_PURPOSE: &str = "upload-secret";

/// What one upload descriptor allows: writing one object of one load, until
/// `expires_at` (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadGrant {
    #[serde(rename = "a")]
    pub access_key_id: String,
    #[serde(rename = "l")]
    pub load_id: String,
    #[serde(rename = "f")]
    pub file_key: String,
    #[serde(rename = "b")]
    pub bucket: String,
    #[serde(rename = "k")]
    pub object_key: String,
    #[serde(rename = "e")]
    pub expires_at: i64,
}

/// Why a grant or a form was refused; the S3 endpoint turns these into S3's
/// error codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("the security token is not valid")]
    BadToken,
    #[error("the security token has expired")]
    Expired,
    #[error("the security token belongs to another access key")]
    WrongAccessKey,
    #[error("the credentials do not allow access to this bucket or key")]
    OutsideGrant,
}

/// The temporary credentials of a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemporaryCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expires_at: i64,
}

/// Mints and checks grants with the server's shared signing key.
#[derive(Clone, Debug)]
pub struct GrantSigner {
    signer: LinkSigner,
}

impl GrantSigner {
    pub fn new(signer: LinkSigner) -> Self {
        Self { signer }
    }

    /// A fresh access key id, shaped like S3's temporary ones (`ASIA` + 16).
    pub fn new_access_key_id() -> String {
        use rand::Rng as _;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        let mut rng = rand::thread_rng();
        let tail: String = (0..16)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        format!("ASIA{tail}")
    }

    /// The secret access key belonging to `access_key_id`.
    pub fn secret_for(&self, access_key_id: &str) -> String {
        let mac = self.signer.sign(SECRET_PURPOSE, &[access_key_id]);
        let bytes = hex::decode(&mac).expect("sign returns hex");
        STANDARD.encode(&bytes[..30])
    }

    /// Credentials for `grant` (whose access key id they carry).
    pub fn credentials(&self, grant: &UploadGrant) -> TemporaryCredentials {
        let payload = serde_json::to_string(grant).expect("grant serialises");
        let signature = self.signer.sign(GRANT_PURPOSE, &[&payload]);
        TemporaryCredentials {
            access_key_id: grant.access_key_id.clone(),
            secret_access_key: self.secret_for(&grant.access_key_id),
            session_token: format!(
                "{TOKEN_PREFIX}.{}.{signature}",
                URL_SAFE_NO_PAD.encode(payload)
            ),
            expires_at: grant.expires_at,
        }
    }

    /// The grant a session token carries, if the token is ours, unexpired at
    /// `now` and presented with its own access key. Uploads are checked by
    /// `LoadService::check_upload`, which asks this first.
    pub fn verify(
        &self,
        session_token: &str,
        access_key_id: &str,
        now: i64,
    ) -> Result<UploadGrant, GrantError> {
        let mut parts = session_token.split('.');
        let (Some(TOKEN_PREFIX), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(GrantError::BadToken);
        };
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or(GrantError::BadToken)?;
        if !self.signer.verify(GRANT_PURPOSE, &[&payload], signature) {
            return Err(GrantError::BadToken);
        }
        let grant: UploadGrant =
            serde_json::from_str(&payload).map_err(|_| GrantError::BadToken)?;
        if grant.access_key_id != access_key_id {
            return Err(GrantError::WrongAccessKey);
        }
        if now >= grant.expires_at {
            return Err(GrantError::Expired);
        }
        Ok(grant)
    }

    /// The presigned POST of a descriptor: the base64 policy (exact bucket,
    /// key and security token, a size range, the grant's expiry) and its
    /// signature (S3's form signature: base64 HMAC-SHA1 of the policy).
    pub fn post_policy(
        &self,
        grant: &UploadGrant,
        credentials: &TemporaryCredentials,
        max_file_bytes: u64,
    ) -> (String, String) {
        let expiration = DateTime::<Utc>::from_timestamp(grant.expires_at, 0)
            .unwrap_or_default()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let policy = json!({
            "expiration": expiration,
            "conditions": [
                { "bucket": grant.bucket },
                { "key": grant.object_key },
                { "x-amz-security-token": credentials.session_token },
                ["content-length-range", 1, max_file_bytes],
            ],
        });
        let policy = STANDARD.encode(policy.to_string());
        let signature = form_signature(&credentials.secret_access_key, &policy);
        (policy, signature)
    }
}

/// Why an upload may not write, found before a byte of it is taken.
#[derive(Debug, thiserror::Error)]
pub enum UploadRefusal {
    /// The session token is not a grant of these credentials, has expired,
    /// or grants another bucket or key.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The grant's load is no longer OPEN, or its file was not requested.
    #[error("the load of these credentials no longer takes files")]
    LoadClosed,
    /// The grant's load could not be read: ours, not the uploader's.
    #[error("the upload's load could not be read")]
    Load(#[source] LoadError),
}

/// What an upload presents: its credentials' session token and access key,
/// and the object it writes.
#[derive(Debug, Clone, Copy)]
pub struct UploadAttempt<'a> {
    pub session_token: &'a str,
    pub access_key_id: &'a str,
    pub bucket: &'a str,
    pub object_key: &'a str,
}

impl LoadService {
    /// The grant an upload writes under: its session token a grant of its
    /// access key, unexpired on the injected clock, for exactly this bucket
    /// and key, of a load that still takes this file. The one check of both
    /// upload routes; whatever else a route checks (its signature, its
    /// policy, its operation) is its own.
    pub async fn check_upload(
        &self,
        attempt: UploadAttempt<'_>,
    ) -> Result<UploadGrant, UploadRefusal> {
        let grant = self.grants().verify(
            attempt.session_token,
            attempt.access_key_id,
            self.now_seconds(),
        )?;
        if grant.bucket != attempt.bucket || grant.object_key != attempt.object_key {
            return Err(GrantError::OutsideGrant.into());
        }
        match self.accepts_upload(&grant).await {
            Ok(true) => Ok(grant),
            Ok(false) => Err(UploadRefusal::LoadClosed),
            Err(e) => Err(UploadRefusal::Load(e)),
        }
    }
}

/// S3's signature of a POST form (signature version 2): base64 of
/// HMAC-SHA1(secret, base64 policy).
pub fn form_signature(secret: &str, policy_base64: &str) -> String {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(policy_base64.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Constant-time comparison of a form signature with the expected one.
pub fn form_signature_matches(secret: &str, policy_base64: &str, signature: &str) -> bool {
    let expected = form_signature(secret, policy_base64);
    expected.len() == signature.len() && bool::from(expected.as_bytes().ct_eq(signature.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> GrantSigner {
        GrantSigner::new(LinkSigner::new(b"test-key"))
    }

    fn grant() -> UploadGrant {
        UploadGrant {
            access_key_id: GrantSigner::new_access_key_id(),
            load_id: "l1".into(),
            file_key: "part_1".into(),
            bucket: "lakehost-uploads".into(),
            object_key: "demo/-/l1/part_1.parquet".into(),
            expires_at: 1_000,
        }
    }

    #[test]
    fn a_grant_round_trips_until_it_expires() {
        let signer = signer();
        let grant = grant();
        let credentials = signer.credentials(&grant);
        assert_eq!(credentials.access_key_id.len(), 20);
        let back = signer
            .verify(&credentials.session_token, &grant.access_key_id, 999)
            .unwrap();
        assert_eq!(back, grant);
        assert_eq!(
            signer.verify(&credentials.session_token, &grant.access_key_id, 1_000),
            Err(GrantError::Expired)
        );
        assert_eq!(
            signer.verify(&credentials.session_token, "ASIAOTHER", 10),
            Err(GrantError::WrongAccessKey)
        );
    }

    #[test]
    fn a_changed_or_foreign_token_is_refused() {
        let signer = signer();
        let grant = grant();
        let token = signer.credentials(&grant).session_token;
        let mut widened = grant.clone();
        widened.object_key = "demo/-/l2/other.parquet".into();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_string(&widened).unwrap());
        let signature = token.rsplit('.').next().unwrap();
        let forged = format!("{TOKEN_PREFIX}.{payload}.{signature}");
        assert_eq!(
            signer.verify(&forged, &grant.access_key_id, 10),
            Err(GrantError::BadToken)
        );
        let other = GrantSigner::new(LinkSigner::new(b"other-key"));
        assert_eq!(
            other.verify(&token, &grant.access_key_id, 10),
            Err(GrantError::BadToken)
        );
        for junk in ["", "LKH1", "LKH1.x.y", "LKH2.a.b", "LKH1.a.b.c"] {
            assert_eq!(
                signer.verify(junk, &grant.access_key_id, 10),
                Err(GrantError::BadToken)
            );
        }
    }

    #[test]
    fn secrets_depend_on_the_access_key_and_the_server_key() {
        let signer = signer();
        assert_eq!(signer.secret_for("ASIAA"), signer.secret_for("ASIAA"));
        assert_ne!(signer.secret_for("ASIAA"), signer.secret_for("ASIAB"));
        assert_ne!(
            signer.secret_for("ASIAA"),
            GrantSigner::new(LinkSigner::new(b"other")).secret_for("ASIAA")
        );
    }

    #[test]
    fn form_signatures_bind_secret_and_policy() {
        let sig = form_signature("secret", "eyJhIjoxfQ==");
        assert!(form_signature_matches("secret", "eyJhIjoxfQ==", &sig));
        assert!(!form_signature_matches("secret2", "eyJhIjoxfQ==", &sig));
        assert!(!form_signature_matches("secret", "eyJhIjoyfQ==", &sig));
    }
}
