//! A realm's signing keys as every replica sees them: the rows of the shared
//! store (`store::idp`), parsed once per replica, rotated and pruned by
//! whichever replica looks first.
//!
//! The rules, all read from the rows and the injected clock, so replicas
//! agree without talking to each other:
//! - **signing**: the key that signs is the newest whose `active_from` has
//!   passed. The realm's first key (made on the first start, or imported
//!   from its key file, see `keys.rs`) signs at once: no validator can hold
//!   an older copy of an empty JWKS.
//! - **rotation**: when the signing key has signed for `key_rotation_hours`
//!   less `key_publish_lead_s`, the next look makes key number n + 1, which
//!   is published (every replica's JWKS lists every row) at once and signs
//!   from `key_publish_lead_s` later. So a validator that caches a JWKS for
//!   up to that lead has the key before any token names it: the default
//!   lead (an hour) covers lakehost's own validators (`auth.jwks_max_age_s`,
//!   900 s, besides their refetch on an unknown kid, at most every
//!   `auth.jwks_refetch_cooldown_s`) and validators that keep a JWKS an
//!   hour. Replicas that race insert one key: the number is the primary key.
//! - **retention**: a key stops signing when a newer key's `active_from`
//!   passes; it stays published until every token it signed has expired
//!   (the longer of the access and refresh token lifetimes), then the next
//!   look deletes it (a bounded delete).
//!
//! Replicas' clocks are assumed in step (NTP): a clock behind signs with
//! the old key a little longer, which its publication outlives only by the
//! token lifetime's margin of the others.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::keys::{
    KeyStoreError, SigningKey, StoredKey, generate_key, read_key_file, write_key_file,
};
use crate::{
    config::IdpConfig,
    store::{Store, idp::IdpKeyRow},
};

/// At most this many keys past their retention are deleted per look.
const MAX_PRUNED_PER_LOOK: usize = 16;

/// The timings of a realm's keys, in microseconds (the store's unit).
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyPolicy {
    /// How long a key signs before its successor takes over.
    pub rotate_after: i64,
    /// How long a new key is published before it signs.
    pub publish_lead: i64,
    /// How long a key stays published after it stopped signing.
    pub retain: i64,
}

impl KeyPolicy {
    pub fn of(config: &IdpConfig) -> Self {
        let retain_s = config
            .refresh_token_lifetime_s
            .max(config.access_token_lifetime_s);
        Self {
            rotate_after: seconds_to_micros(config.key_rotation_hours.saturating_mul(3600)),
            publish_lead: seconds_to_micros(config.key_publish_lead_s),
            retain: seconds_to_micros(retain_s),
        }
    }
}

fn seconds_to_micros(seconds: u64) -> i64 {
    i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000)
}

fn micros_to_time(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// What the rows say to do now.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    /// The index of the key that signs.
    signer: usize,
    /// The number of the key to make now, when a rotation is due.
    next_generation: Option<i64>,
    /// The numbers of keys past their retention (at most `MAX_PRUNED_PER_LOOK`).
    expired: Vec<i64>,
}

/// `rows`: a realm's keys, oldest first, at least one.
fn plan(rows: &[IdpKeyRow], now: i64, policy: &KeyPolicy) -> Plan {
    let signer = rows.iter().rposition(|r| r.active_from <= now).unwrap_or(0);
    let newest = rows.last().expect("a realm's rows are never empty here");
    let signs_for = (policy.rotate_after - policy.publish_lead).max(0);
    // A successor not yet signing is pending: nothing to make.
    let next_generation = (newest.active_from <= now
        && now.saturating_sub(newest.active_from) >= signs_for)
        .then_some(newest.generation + 1);
    let mut expired = Vec::new();
    // When key i stopped signing: the first active_from of a newer key.
    let mut retired_at = i64::MAX;
    for row in rows.iter().rev() {
        if retired_at <= now && now.saturating_sub(retired_at) >= policy.retain {
            expired.push(row.generation);
        }
        retired_at = retired_at.min(row.active_from);
    }
    expired.reverse();
    expired.truncate(MAX_PRUNED_PER_LOOK);
    Plan {
        signer,
        next_generation,
        expired,
    }
}

/// The keys of a realm at one moment: all published, one signing.
pub(super) struct RealmView {
    keys: Vec<Arc<SigningKey>>,
    signer: usize,
}

impl RealmView {
    /// The key that signs now.
    pub fn signer(&self) -> &SigningKey {
        &self.keys[self.signer]
    }

    /// Every published key, for verifying this realm's own refresh tokens.
    pub fn all(&self) -> &[Arc<SigningKey>] {
        &self.keys
    }

    /// The public JWKS document, newest key first.
    pub fn jwks(&self) -> Value {
        let keys: Vec<&Value> = self.keys.iter().rev().map(|k| k.public_jwk()).collect();
        json!({ "keys": keys })
    }
}

/// One realm's keys on this replica.
pub(super) struct RealmKeys {
    org: String,
    store: Store,
    /// The realm's key file: imported into an empty realm, then a mirror.
    file: PathBuf,
    policy: KeyPolicy,
    /// Parsed keys by kid (parsing a PEM is the slow part).
    parsed: Mutex<HashMap<String, Arc<SigningKey>>>,
    /// The kids last written to `file`.
    mirrored: Mutex<Vec<String>>,
    /// One rotation at a time on this replica (making an RSA key is slow).
    rotating: tokio::sync::Mutex<()>,
}

impl RealmKeys {
    /// Opens a realm's keys, making (or importing) its first key when the
    /// store holds none.
    pub async fn open(
        org: &str,
        store: Store,
        file: PathBuf,
        policy: KeyPolicy,
        now: DateTime<Utc>,
    ) -> Result<Self, KeyStoreError> {
        let realm = Self {
            org: org.to_string(),
            store,
            file,
            policy,
            parsed: Mutex::default(),
            mirrored: Mutex::default(),
            rotating: tokio::sync::Mutex::default(),
        };
        // Read before the first look, which may rewrite it as the mirror (a
        // file that cannot be read fails the start only when it is imported).
        let in_file = read_key_file(&realm.file)
            .ok()
            .flatten()
            .unwrap_or_default();
        let view = realm.view(now).await?;
        let ignored: Vec<&str> = in_file
            .iter()
            .filter(|k| view.all().iter().all(|held| held.kid != k.kid))
            .map(|k| k.kid.as_str())
            .collect();
        if !ignored.is_empty() {
            tracing::warn!(
                realm = %org,
                file = %realm.file.display(),
                kids = ?ignored,
                "the key file holds keys the store does not: the store already had the \
                 realm's keys, so the file was not imported (expired keys of a replica \
                 that was down are normal); it now mirrors the store's keys"
            );
        }
        Ok(realm)
    }

    /// The realm's keys now, after the rotation and the pruning now calls for.
    pub async fn view(&self, now: DateTime<Utc>) -> Result<RealmView, KeyStoreError> {
        let at = now.timestamp_micros();
        let mut rows = self.store.idp_keys(&self.org).await?;
        if rows.is_empty() {
            self.first_keys(now).await?;
            rows = self.store.idp_keys(&self.org).await?;
        }
        if rows.is_empty() {
            return Err(KeyStoreError::NoKey {
                org: self.org.clone(),
            });
        }
        let todo = plan(&rows, at, &self.policy);
        let mut changed = false;
        if let Some(generation) = todo.next_generation {
            self.rotate(generation, now).await?;
            changed = true;
        }
        if !todo.expired.is_empty() {
            let deleted = self.store.delete_idp_keys(&self.org, &todo.expired).await?;
            if deleted > 0 {
                tracing::info!(
                    realm = %self.org,
                    keys = deleted,
                    "deleted signing keys whose tokens have all expired"
                );
            }
            changed = true;
        }
        if changed {
            rows = self.store.idp_keys(&self.org).await?;
            if rows.is_empty() {
                return Err(KeyStoreError::NoKey {
                    org: self.org.clone(),
                });
            }
        }
        let signer = plan(&rows, at, &self.policy).signer;
        let keys = self.parse(&rows)?;
        self.mirror(&rows);
        Ok(RealmView { keys, signer })
    }

    /// An empty realm's first keys: its key file's when there is one (an
    /// older version's, or a pinned key), else a new key. Either signs at
    /// once. When replicas start together one of them fills the realm.
    async fn first_keys(&self, now: DateTime<Utc>) -> Result<(), KeyStoreError> {
        let from_file = read_key_file(&self.file)?.filter(|keys| !keys.is_empty());
        let Some(keys) = from_file else {
            let stored = generate(now).await?;
            let at = stored.created_at.timestamp_micros();
            let first = IdpKeyRow {
                generation: 1,
                kid: stored.kid,
                private_key_pem: stored.private_key_pem,
                created_at: at,
                active_from: at,
            };
            if self.store.insert_idp_key(&self.org, &first).await? {
                tracing::info!(realm = %self.org, kid = %first.kid, "made the realm's first signing key");
            }
            return Ok(());
        };
        for key in &keys {
            SigningKey::from_stored(key).map_err(|source| KeyStoreError::Key {
                path: self.file.clone(),
                source,
            })?;
        }
        let rows: Vec<IdpKeyRow> = (1..)
            .zip(&keys)
            .map(|(generation, key)| IdpKeyRow {
                generation,
                kid: key.kid.clone(),
                private_key_pem: key.private_key_pem.clone(),
                created_at: key.created_at.timestamp_micros(),
                active_from: key.created_at.timestamp_micros(),
            })
            .collect();
        if self.store.import_idp_keys(&self.org, &rows).await? {
            tracing::info!(
                realm = %self.org,
                keys = rows.len(),
                file = %self.file.display(),
                "imported the realm's signing keys from its key file into the store"
            );
        }
        Ok(())
    }

    /// Makes key number `generation` unless this replica or another one
    /// already did.
    async fn rotate(&self, generation: i64, now: DateTime<Utc>) -> Result<(), KeyStoreError> {
        let _one_at_a_time = self.rotating.lock().await;
        let rows = self.store.idp_keys(&self.org).await?;
        if rows.last().map(|r| r.generation + 1) != Some(generation) {
            return Ok(());
        }
        let stored = generate(now).await?;
        let at = stored.created_at.timestamp_micros();
        let next = IdpKeyRow {
            generation,
            kid: stored.kid,
            private_key_pem: stored.private_key_pem,
            created_at: at,
            active_from: at.saturating_add(self.policy.publish_lead),
        };
        if self.store.insert_idp_key(&self.org, &next).await? {
            tracing::info!(
                realm = %self.org,
                kid = %next.kid,
                signs_from = %micros_to_time(next.active_from),
                "made the realm's next signing key: published now, it signs from then"
            );
        }
        Ok(())
    }

    /// The rows' keys, parsed (each kid once per replica).
    fn parse(&self, rows: &[IdpKeyRow]) -> Result<Vec<Arc<SigningKey>>, KeyStoreError> {
        let mut parsed = self.parsed.lock().expect("parsed keys lock poisoned");
        parsed.retain(|kid, _| rows.iter().any(|r| &r.kid == kid));
        rows.iter()
            .map(|row| {
                if let Some(key) = parsed.get(&row.kid) {
                    return Ok(key.clone());
                }
                let key = SigningKey::from_stored(&stored_key(row)).map_err(|source| {
                    KeyStoreError::StoredKey {
                        org: self.org.clone(),
                        source,
                    }
                })?;
                let key = Arc::new(key);
                parsed.insert(row.kid.clone(), key.clone());
                Ok(key)
            })
            .collect()
    }

    /// Rewrites the key file when the keys changed since it was written. A
    /// failure is logged, never the request's: the store holds the keys.
    fn mirror(&self, rows: &[IdpKeyRow]) {
        let kids: Vec<String> = rows.iter().map(|r| r.kid.clone()).collect();
        // Held while writing: two writes of one file must not interleave.
        let mut mirrored = self.mirrored.lock().expect("mirror lock poisoned");
        if *mirrored == kids {
            return;
        }
        let stored: Vec<StoredKey> = rows.iter().map(stored_key).collect();
        if let Err(error) = write_key_file(&self.file, &stored) {
            tracing::warn!(
                realm = %self.org,
                file = %self.file.display(),
                %error,
                "cannot write the mirror of the realm's signing keys (they are in the store)"
            );
        }
        *mirrored = kids;
    }
}

fn stored_key(row: &IdpKeyRow) -> StoredKey {
    StoredKey {
        kid: row.kid.clone(),
        created_at: micros_to_time(row.created_at),
        private_key_pem: row.private_key_pem.clone(),
    }
}

/// A new key, made off the async threads (2048-bit RSA takes a while).
async fn generate(now: DateTime<Utc>) -> Result<StoredKey, KeyStoreError> {
    tokio::task::spawn_blocking(move || generate_key(now))
        .await
        .map_err(KeyStoreError::GenerateTask)?
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000;

    fn row(generation: i64, created_at: i64, active_from: i64) -> IdpKeyRow {
        IdpKeyRow {
            generation,
            kid: format!("k{generation}"),
            private_key_pem: String::new(),
            created_at,
            active_from,
        }
    }

    /// Rotation every 24 h, published 1 h ahead, tokens live 2 h.
    const POLICY: KeyPolicy = KeyPolicy {
        rotate_after: 24 * HOUR,
        publish_lead: HOUR,
        retain: 2 * HOUR,
    };

    #[test]
    fn the_next_key_is_made_a_lead_before_it_signs() {
        let first = [row(1, 0, 0)];
        let early = plan(&first, 23 * HOUR - 1, &POLICY);
        assert_eq!((early.signer, early.next_generation), (0, None));
        let due = plan(&first, 23 * HOUR, &POLICY);
        assert_eq!((due.signer, due.next_generation), (0, Some(2)));

        // Published at 23 h, signing from 24 h: the old key signs till then.
        let both = [row(1, 0, 0), row(2, 23 * HOUR, 24 * HOUR)];
        let pending = plan(&both, 24 * HOUR - 1, &POLICY);
        assert_eq!((pending.signer, pending.next_generation), (0, None));
        let switched = plan(&both, 24 * HOUR, &POLICY);
        assert_eq!((switched.signer, switched.next_generation), (1, None));
        assert!(switched.expired.is_empty());
    }

    #[test]
    fn a_key_goes_once_every_token_it_signed_has_expired() {
        let both = [row(1, 0, 0), row(2, 23 * HOUR, 24 * HOUR)];
        assert!(plan(&both, 26 * HOUR - 1, &POLICY).expired.is_empty());
        assert_eq!(plan(&both, 26 * HOUR, &POLICY).expired, vec![1]);
        // The key that signs is never expired, however old.
        assert!(
            plan(&[row(1, 0, 0)], 1000 * HOUR, &POLICY)
                .expired
                .is_empty()
        );
    }

    #[test]
    fn imported_keys_sign_at_once_the_newest_first() {
        let imported = [row(1, -50 * HOUR, -50 * HOUR), row(2, -HOUR, -HOUR)];
        let now = plan(&imported, 0, &POLICY);
        assert_eq!(now.signer, 1);
        assert!(
            now.expired.is_empty(),
            "retired 1 h ago, its tokens live 2 h"
        );
        assert_eq!(plan(&imported, HOUR, &POLICY).expired, vec![1]);
    }
}
