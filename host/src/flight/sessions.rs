//! Flight SQL sessions opened with a client id and secret (ADBC's
//! `username` and `password` through `Handshake`), so that a session
//! outlives the realm token its handshake got, as a Postgres session does.
//!
//! - The handshake answers a lakehost session token, `lakehost-session.`
//!   and 32 random bytes (base64url), instead of the realm's access token.
//!   It is opaque, never a JWT: nothing in it is parsed or trusted but the
//!   table entry its hash names, so no algorithm, issuer or claim of it can
//!   be forged (RFC 8725's concerns do not arise); realm tokens are still
//!   validated as every front end validates them.
//! - This replica keeps, by the SHA-256 of the session token, the org, zone,
//!   client id, the current realm token, and the secret sealed under a key
//!   derived from the session token (HMAC-SHA256 in counter mode as a
//!   keystream). The session token is not kept, so the table alone (a
//!   memory dump, a log) yields no secret; a call presenting the session
//!   token unseals it only while its realm token is renewed.
//! - A call with a session token is authenticated with its current realm
//!   token; one that expired is renewed through the realm's
//!   client-credentials flow with the unsealed secret, as `pg/startup.rs`
//!   renews. A refused renewal (the secret rotated, the client removed)
//!   ends the session.
//! - Bounded: at most [`MAX_SESSIONS`] per replica (a handshake past it is
//!   refused `RESOURCE_EXHAUSTED`), each ended after [`SESSION_IDLE`]
//!   without a call and [`SESSION_LIFETIME`] after it opened.
//! - In memory, per replica: a Flight SQL client keeps its HTTP/2
//!   connection, so its calls reach the replica that handshook; on another
//!   replica (a reconnect through a balancer) the session token is
//!   unknown, `UNAUTHENTICATED`, and the client handshakes again.
//! - A bearer token a caller brought is handed back by the handshake as
//!   before and expires as it does.

use std::{collections::HashMap, sync::Mutex};

use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use crate::clock::SharedClock;

/// How a session token starts.
pub const SESSION_PREFIX: &str = "lakehost-session.";
/// Sessions a replica holds at most.
pub const MAX_SESSIONS: usize = 10_000;
/// A session ends after this long without a call.
pub const SESSION_IDLE: Duration = Duration::hours(1);
/// A session ends this long after its handshake, however busy.
pub const SESSION_LIFETIME: Duration = Duration::hours(24);

/// Why a handshake opens no session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error(
        "this server holds its {MAX_SESSIONS} Flight SQL sessions: retry later, or send a bearer token"
    )]
    Full,
}

/// A session's credentials for one call: its realm token and what renews it.
pub struct SessionCredentials {
    pub org: String,
    pub zone: Option<String>,
    pub client_id: String,
    /// The realm token the session last got.
    pub token: String,
    /// The client secret, unsealed for this call only.
    pub secret: String,
}

impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCredentials")
            .field("org", &self.org)
            .field("zone", &self.zone)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

struct Entry {
    org: String,
    zone: Option<String>,
    client_id: String,
    sealed_secret: Vec<u8>,
    token: String,
    opened: DateTime<Utc>,
    last_used: DateTime<Utc>,
}

/// The sessions of this replica's Flight SQL listener.
pub struct FlightSessions {
    clock: SharedClock,
    open: Mutex<HashMap<[u8; 32], Entry>>,
}

/// The random part of a session token.
type SessionKey = [u8; 32];

impl FlightSessions {
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Opens a session for `client_id` of `org` (and `zone`) whose secret
    /// got `token`: the session token to hand the client.
    pub fn open(
        &self,
        (org, zone): (&str, Option<&str>),
        client_id: &str,
        secret: &str,
        token: String,
    ) -> Result<String, SessionError> {
        let key: SessionKey = rand::random();
        let now = self.clock.now();
        let mut open = self.open.lock().expect("sessions lock");
        open.retain(|_, entry| alive(entry, now));
        if open.len() >= MAX_SESSIONS {
            return Err(SessionError::Full);
        }
        open.insert(
            id_of(&key),
            Entry {
                org: org.to_string(),
                zone: zone.map(str::to_string),
                client_id: client_id.to_string(),
                sealed_secret: sealed(&key, secret.as_bytes()),
                token,
                opened: now,
                last_used: now,
            },
        );
        Ok(format!(
            "{SESSION_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
        ))
    }

    /// The credentials of the session `session_token` names, if it is one
    /// of this replica's that has not ended (the call counts as its use).
    pub fn credentials(&self, session_token: &str) -> Option<SessionCredentials> {
        let key = key_of(session_token)?;
        let now = self.clock.now();
        let mut open = self.open.lock().expect("sessions lock");
        let id = id_of(&key);
        let entry = open.get_mut(&id)?;
        if !alive(entry, now) {
            open.remove(&id);
            return None;
        }
        entry.last_used = now;
        let secret = String::from_utf8(sealed(&key, &entry.sealed_secret)).ok()?;
        Some(SessionCredentials {
            org: entry.org.clone(),
            zone: entry.zone.clone(),
            client_id: entry.client_id.clone(),
            token: entry.token.clone(),
            secret,
        })
    }

    /// The session `session_token` names goes on with `token`.
    pub fn renewed(&self, session_token: &str, token: String) {
        let Some(key) = key_of(session_token) else {
            return;
        };
        if let Some(entry) = self
            .open
            .lock()
            .expect("sessions lock")
            .get_mut(&id_of(&key))
        {
            entry.token = token;
        }
    }

    /// Ends the session `session_token` names (its renewal was refused).
    pub fn end(&self, session_token: &str) {
        if let Some(key) = key_of(session_token) {
            self.open
                .lock()
                .expect("sessions lock")
                .remove(&id_of(&key));
        }
    }
}

/// Whether `token` is a session token (not a realm token).
pub fn is_session_token(token: &str) -> bool {
    token.starts_with(SESSION_PREFIX)
}

fn alive(entry: &Entry, now: DateTime<Utc>) -> bool {
    now - entry.last_used < SESSION_IDLE && now - entry.opened < SESSION_LIFETIME
}

fn key_of(session_token: &str) -> Option<SessionKey> {
    let encoded = session_token.strip_prefix(SESSION_PREFIX)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    bytes.try_into().ok()
}

/// The table's key of a session: the hash of its random part.
fn id_of(key: &SessionKey) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"lakehost flight session id\0");
    hash.update(key);
    hash.finalize().into()
}

/// `bytes` XORed with the keystream of `key` (HMAC-SHA256 of a counter):
/// seals and unseals. Each key is random and seals one secret, so no
/// keystream is used twice.
fn sealed(key: &SessionKey, bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks(32)
        .enumerate()
        .flat_map(|(block, chunk)| {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
            mac.update(b"lakehost flight session secret\0");
            mac.update(&(block as u64).to_be_bytes());
            let stream = mac.finalize().into_bytes();
            chunk
                .iter()
                .zip(stream)
                .map(|(b, s)| b ^ s)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    fn sessions() -> (FlightSessions, ManualClock) {
        let clock = ManualClock::default();
        (FlightSessions::new(Arc::new(clock.clone())), clock)
    }

    #[test]
    fn a_session_token_gives_back_its_credentials_and_the_table_holds_no_secret() {
        let (sessions, _) = sessions();
        let secret = "demo-admin-secret-that-is-longer-than-one-block-of-32";
        let token = sessions
            .open(("demo", Some("lab")), "demo-admin", secret, "jwt-1".into())
            .unwrap();
        assert!(is_session_token(&token));
        let credentials = sessions.credentials(&token).expect("open");
        assert_eq!(
            (credentials.org.as_str(), credentials.zone.as_deref()),
            ("demo", Some("lab"))
        );
        assert_eq!(credentials.client_id, "demo-admin");
        assert_eq!(credentials.secret, secret);
        assert_eq!(credentials.token, "jwt-1");
        assert!(!format!("{credentials:?}").contains(secret));
        let open = sessions.open.lock().unwrap();
        let entry = open.values().next().unwrap();
        assert_ne!(entry.sealed_secret, secret.as_bytes());
        assert_eq!(entry.sealed_secret.len(), secret.len());
        drop(open);

        sessions.renewed(&token, "jwt-2".into());
        assert_eq!(sessions.credentials(&token).unwrap().token, "jwt-2");
        // Another random part, a changed one, or none name no session.
        let other = sessions
            .open(("demo", None), "demo-admin", secret, "jwt-3".into())
            .unwrap();
        assert_ne!(other, token);
        let mut forged = token.clone();
        forged.replace_range(SESSION_PREFIX.len()..SESSION_PREFIX.len() + 2, "AA");
        assert!(sessions.credentials(&forged).is_none());
        assert!(sessions.credentials("lakehost-session.").is_none());
        assert!(sessions.credentials("eyJhbGciOiJub25lIn0.e30.").is_none());
        sessions.end(&token);
        assert!(sessions.credentials(&token).is_none());
    }

    #[test]
    fn sessions_end_when_idle_or_old() {
        let (sessions, clock) = sessions();
        let token = sessions
            .open(("demo", None), "demo-admin", "s", "jwt".into())
            .unwrap();
        clock.advance(SESSION_IDLE - Duration::minutes(1));
        assert!(sessions.credentials(&token).is_some());
        clock.advance(SESSION_IDLE - Duration::minutes(1));
        assert!(sessions.credentials(&token).is_some(), "used: not idle");
        clock.advance(SESSION_IDLE);
        assert!(sessions.credentials(&token).is_none(), "idle");
        let token = sessions
            .open(("demo", None), "demo-admin", "s", "jwt".into())
            .unwrap();
        for _ in 0..30 {
            clock.advance(SESSION_IDLE - Duration::minutes(1));
            let _ = sessions.credentials(&token);
        }
        assert!(sessions.credentials(&token).is_none(), "past its lifetime");
    }
}
