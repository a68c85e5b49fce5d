//! A realm's RSA signing keys as key material: making one, reading its PEM,
//! its public JWK, and the key file of older versions.
//!
//! The keys themselves live in the shared store (`realm.rs` says how they
//! rotate across replicas). `data_dir/idp/<org>/signing-keys.json` is an
//! import path and a mirror:
//! - **import**: at start, a realm with no key in the store takes the keys of
//!   its file, if there is one (an older version's keys, or a key pinned by a
//!   test or an operator), so tokens they signed stay good. It is read only
//!   then: once the store holds a realm's keys the file is never read again
//!   (to pin a key on an existing store, delete the realm's rows of
//!   `idp_signing_keys` first).
//! - **mirror**: each replica rewrites its file when the keys it sees change
//!   (written atomically, readable by the owner only), so a rollback to an
//!   older version, or a copy made the old way, finds the current keys.
//!
//! File format (stable; tests write it to pin keys):
//! `{"keys":[{"kid":"...","created_at":"<RFC 3339>","private_key_pem":"<PKCS#8>"}]}`,
//! oldest first.

use std::path::{Path, PathBuf};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use jsonwebtoken::{DecodingKey, EncodingKey};
use rsa::{
    RsaPrivateKey, RsaPublicKey,
    pkcs1::EncodeRsaPrivateKey as _,
    pkcs8::{DecodePrivateKey, EncodePrivateKey, LineEnding},
    traits::PublicKeyParts,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const RSA_BITS: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    #[error("signing key file {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("signing key file {path}: not a key file: {source}")]
    NotKeyFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("signing key file {path}: {source}")]
    Key {
        path: PathBuf,
        #[source]
        source: KeyError,
    },
    #[error("generating an RSA key failed: {0}")]
    Generate(#[source] rsa::Error),
    #[error("generating an RSA key failed: {0}")]
    Pem(#[source] rsa::pkcs8::Error),
    #[error("generating an RSA key failed: {0}")]
    NewKey(#[source] KeyError),
    #[error("generating an RSA key failed: the task ended: {0}")]
    GenerateTask(#[source] tokio::task::JoinError),
    #[error("signing failed: {0}")]
    Sign(#[source] jsonwebtoken::errors::Error),
    /// A key in the store that cannot be used (the error names its kid).
    #[error("realm {org}: stored {source}")]
    StoredKey {
        org: String,
        #[source]
        source: KeyError,
    },
    #[error("realm {org} has no signing key in the store")]
    NoKey { org: String },
    /// Boxed: the store's errors are large, and this one is rare.
    #[error("the identity provider's store failed: {0}")]
    Store(#[source] Box<crate::store::Error>),
}

impl From<crate::store::Error> for KeyStoreError {
    fn from(error: crate::store::Error) -> Self {
        KeyStoreError::Store(Box::new(error))
    }
}

/// Why a stored key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("key {kid}: not a PKCS#8 RSA key: {source}")]
    NotPkcs8 {
        kid: String,
        #[source]
        source: rsa::pkcs8::Error,
    },
    #[error("key {kid}: {source}")]
    DerEncoding {
        kid: String,
        #[source]
        source: rsa::pkcs1::Error,
    },
}

#[derive(Serialize, Deserialize)]
pub struct KeyFile {
    pub keys: Vec<StoredKey>,
}

#[derive(Serialize, Deserialize, Clone)]
pub struct StoredKey {
    pub kid: String,
    pub created_at: DateTime<Utc>,
    pub private_key_pem: String,
}

/// One usable key.
pub struct SigningKey {
    pub kid: String,
    pub encoding: EncodingKey,
    pub decoding: DecodingKey,
    public_jwk: Value,
}

impl SigningKey {
    pub fn from_stored(stored: &StoredKey) -> Result<Self, KeyError> {
        let private = RsaPrivateKey::from_pkcs8_pem(&stored.private_key_pem).map_err(|source| {
            KeyError::NotPkcs8 {
                kid: stored.kid.clone(),
                source,
            }
        })?;
        let der = private
            .to_pkcs1_der()
            .map_err(|source| KeyError::DerEncoding {
                kid: stored.kid.clone(),
                source,
            })?;
        let public = RsaPublicKey::from(&private);
        let n = public.n().to_bytes_be();
        let e = public.e().to_bytes_be();
        Ok(Self {
            kid: stored.kid.clone(),
            encoding: EncodingKey::from_rsa_der(der.as_bytes()),
            decoding: DecodingKey::from_rsa_raw_components(&n, &e),
            public_jwk: json!({
                "kid": stored.kid,
                "kty": "RSA",
                "alg": "RS256",
                "use": "sig",
                "n": URL_SAFE_NO_PAD.encode(&n),
                "e": URL_SAFE_NO_PAD.encode(&e),
            }),
        })
    }

    /// The public half, as a JWK of the realm's JWKS.
    pub fn public_jwk(&self) -> &Value {
        &self.public_jwk
    }
}

/// Makes a new stored key (2048-bit RSA, random kid).
pub fn generate_key(created_at: DateTime<Utc>) -> Result<StoredKey, KeyStoreError> {
    let mut rng = rand::thread_rng();
    let private = RsaPrivateKey::new(&mut rng, RSA_BITS).map_err(KeyStoreError::Generate)?;
    let pem = private
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(KeyStoreError::Pem)?;
    Ok(StoredKey {
        kid: uuid::Uuid::new_v4().simple().to_string(),
        created_at,
        private_key_pem: pem.to_string(),
    })
}

/// Reads a key file: its keys, oldest first, or `None` when there is none.
pub fn read_key_file(path: &Path) -> Result<Option<Vec<StoredKey>>, KeyStoreError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let file: KeyFile =
                serde_json::from_slice(&bytes).map_err(|source| KeyStoreError::NotKeyFile {
                    path: path.to_path_buf(),
                    source,
                })?;
            Ok(Some(file.keys))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(KeyStoreError::File {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes a key file (the mirror of a realm's keys, and what tests write to
/// pin a known key before the first start).
pub fn write_key_file(path: &Path, keys: &[StoredKey]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let body = serde_json::to_vec_pretty(&KeyFile {
        keys: keys.to_vec(),
    })
    .map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    {
        use std::io::Write as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Where a realm's key file lives under `data_dir`.
pub fn key_file_path(data_dir: &Path, org: &str) -> PathBuf {
    data_dir.join("idp").join(org).join("signing-keys.json")
}
