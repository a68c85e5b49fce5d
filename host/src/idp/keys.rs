//! A realm's RSA signing keys, kept under `data_dir/idp/<org>/signing-keys.json`
//! so tokens survive a restart.
//!
//! The newest key signs. After `key_rotation_hours` a new key is made on the next
//! signature; older keys stay published in the JWKS, for verification only, until
//! every token they signed (refresh tokens live longest) has expired.
//!
//! File format (stable; tests write it to pin keys):
//! `{"keys":[{"kid":"...","created_at":"<RFC 3339>","private_key_pem":"<PKCS#8>"}]}`,
//! oldest first.

use std::path::{Path, PathBuf};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
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
    #[error("generating an RSA key failed: signing failed: {0}")]
    Sign(#[source] jsonwebtoken::errors::Error),
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
    pub created_at: DateTime<Utc>,
    pub encoding: EncodingKey,
    pub decoding: DecodingKey,
    public_jwk: Value,
}

impl SigningKey {
    fn from_stored(stored: &StoredKey) -> Result<Self, KeyError> {
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
            created_at: stored.created_at,
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

pub struct RealmKeyStore {
    path: PathBuf,
    stored: Vec<StoredKey>,
    keys: Vec<SigningKey>,
    rotate_after: Duration,
    retain_after_retirement: Duration,
}

impl RealmKeyStore {
    /// Opens the realm's key file, creating it with one new key when absent.
    pub fn open(
        path: &Path,
        now: DateTime<Utc>,
        rotate_after: Duration,
        retain_after_retirement: Duration,
    ) -> Result<Self, KeyStoreError> {
        let stored = match std::fs::read(path) {
            Ok(bytes) => {
                let file: KeyFile =
                    serde_json::from_slice(&bytes).map_err(|source| KeyStoreError::NotKeyFile {
                        path: path.to_path_buf(),
                        source,
                    })?;
                file.keys
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(KeyStoreError::File {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let keys = stored
            .iter()
            .map(SigningKey::from_stored)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| KeyStoreError::Key {
                path: path.to_path_buf(),
                source,
            })?;
        let mut store = Self {
            path: path.to_path_buf(),
            stored,
            keys,
            rotate_after,
            retain_after_retirement,
        };
        if store.keys.is_empty() {
            store.add_key(now)?;
        }
        Ok(store)
    }

    /// The key that signs now, rotating first when the newest is too old.
    pub fn active(&mut self, now: DateTime<Utc>) -> Result<&SigningKey, KeyStoreError> {
        let newest = self.keys.last().expect("a store always holds a key");
        if now - newest.created_at >= self.rotate_after {
            self.add_key(now)?;
            self.prune(now)?;
        }
        Ok(self.keys.last().expect("a store always holds a key"))
    }

    /// Every published key, for verifying this realm's own refresh tokens.
    pub fn all(&self) -> &[SigningKey] {
        &self.keys
    }

    /// The public JWKS document.
    pub fn jwks(&self) -> Value {
        let keys: Vec<&Value> = self.keys.iter().rev().map(|k| &k.public_jwk).collect();
        json!({ "keys": keys })
    }

    fn add_key(&mut self, now: DateTime<Utc>) -> Result<(), KeyStoreError> {
        let stored = generate_key(now)?;
        let key = SigningKey::from_stored(&stored).map_err(KeyStoreError::NewKey)?;
        self.stored.push(stored);
        self.keys.push(key);
        self.save()
    }

    /// Drops keys retired (superseded) longer ago than any token they signed lives.
    fn prune(&mut self, now: DateTime<Utc>) -> Result<(), KeyStoreError> {
        let retired_at: Vec<DateTime<Utc>> =
            self.stored.iter().skip(1).map(|k| k.created_at).collect();
        let keep: Vec<bool> = (0..self.stored.len())
            .map(|i| match retired_at.get(i) {
                Some(at) => now - *at < self.retain_after_retirement,
                None => true,
            })
            .collect();
        if keep.iter().all(|k| *k) {
            return Ok(());
        }
        let mut i = 0;
        self.stored.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        let mut i = 0;
        self.keys.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        self.save()
    }

    /// Writes the file atomically (temp file + rename), readable by the owner only.
    fn save(&self) -> Result<(), KeyStoreError> {
        write_key_file(&self.path, &self.stored).map_err(|source| KeyStoreError::File {
            path: self.path.clone(),
            source,
        })
    }
}

/// Writes a key file (used by the store, and by tests to pin a known key).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_persist_rotate_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.json");
        let t0 = Utc::now();
        let mut store =
            RealmKeyStore::open(&path, t0, Duration::hours(1), Duration::hours(2)).unwrap();
        let first = store.active(t0).unwrap().kid.clone();

        let reopened =
            RealmKeyStore::open(&path, t0, Duration::hours(1), Duration::hours(2)).unwrap();
        assert_eq!(reopened.all()[0].kid, first, "the key survives a restart");

        let t1 = t0 + Duration::hours(1);
        let second = store.active(t1).unwrap().kid.clone();
        assert_ne!(first, second);
        let published: Vec<String> = store.jwks()["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(published, vec![second.clone(), first.clone()]);

        // Two hours after the first key was retired it is gone.
        let t2 = t1 + Duration::hours(2);
        let third = store.active(t2).unwrap().kid.clone();
        let kids: Vec<&str> = store.all().iter().map(|k| k.kid.as_str()).collect();
        assert_eq!(kids, vec![second.as_str(), third.as_str()]);
    }
}
