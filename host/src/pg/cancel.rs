//! Cancel requests. Each session gets a backend key when it authenticates:
//! a random pid (not a counter, so one key tells nothing of the others) and
//! a random secret, 32 bits under protocol 3.0 (all its message holds) and
//! 256 bits under 3.2. A client cancels a running statement by sending that
//! key on a new connection (psycopg's `cancel_safe`, psql's Ctrl-C). The
//! statement's query job is then cancelled for the session's own caller, as
//! `DELETE /v2/query/{id}` cancels it, and the statement ends with 57014. A
//! key names nothing once its session has ended. A key that names no
//! session counts against the sender's failure budget
//! (`auth::failure_budget`), so keys cannot be guessed at line rate.
//!
//! Keys live in this replica's memory: behind a load balancer, a cancel
//! request that reaches another replica does nothing (`DELETE
//! /v2/query/{id}`, the id from `SHOW lakehost.last_query_id`, always works).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use bytes::Bytes;
use pgwire::{
    api::{ClientInfo, cancel::CancelHandler},
    messages::{ProtocolVersion, cancel::CancelRequest, startup::SecretKey},
};

use crate::{auth::LakeCaller, query::service::QueryService};

/// A session's pid and secret, the secret as bytes: a cancel connection
/// decodes a 4-byte secret as bytes whatever the session negotiated.
type BackendKey = (i32, Bytes);

/// The query job a session's statement runs now, if any.
#[derive(Default)]
pub struct Running(Mutex<Option<(LakeCaller, String)>>);

/// Marks `id` as the session's running job until dropped (a streamed
/// statement's guard goes with its rows).
pub struct RunningJob(Arc<Running>);

impl Running {
    pub fn start(self: Arc<Self>, caller: &LakeCaller, id: &str) -> RunningJob {
        *self.0.lock().expect("running lock") = Some((caller.clone(), id.to_string()));
        RunningJob(self)
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        *self.0.0.lock().expect("running lock") = None;
    }
}

/// The sessions of this listener, by backend key.
pub struct Cancels {
    queries: Arc<QueryService>,
    sessions: Mutex<HashMap<BackendKey, Arc<Running>>>,
}

/// A session's entry, removed when the session (its connection) ends.
struct Registered {
    cancels: Arc<Cancels>,
    key: BackendKey,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.cancels
            .sessions
            .lock()
            .expect("sessions lock")
            .remove(&self.key);
    }
}

impl Cancels {
    pub fn new(queries: Arc<QueryService>) -> Self {
        Self {
            queries,
            sessions: Mutex::default(),
        }
    }

    /// Gives the authenticated session of `client` its backend key (sent to
    /// the client with the startup's end) and its `Running` slot.
    pub fn register<C: ClientInfo>(self: &Arc<Self>, client: &mut C) {
        let running = Arc::new(Running::default());
        let (key, secret) = {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            loop {
                let (pid, secret) = random_key(client.protocol_version());
                let key = (pid, secret.to_bytes());
                if !sessions.contains_key(&key) {
                    sessions.insert(key.clone(), running.clone());
                    break (key, secret);
                }
            }
        };
        client.set_pid_and_secret_key(key.0, secret);
        let extensions = client.session_extensions();
        extensions.insert(running);
        extensions.insert(Registered {
            cancels: self.clone(),
            key,
        });
    }
}

/// A backend key: a random positive pid and a random secret as long as the
/// protocol allows.
fn random_key(protocol: ProtocolVersion) -> (i32, SecretKey) {
    let pid = (rand::random::<u32>() >> 1).max(1) as i32;
    let secret = match protocol {
        ProtocolVersion::PROTOCOL3_0 => SecretKey::I32(rand::random::<i32>()),
        _ => SecretKey::Bytes(Bytes::from(rand::random::<[u8; 32]>().to_vec())),
    };
    (pid, secret)
}

impl Cancels {
    /// Cancels the running statement of the session `request` names;
    /// `false` when it names no session.
    pub async fn cancel(&self, request: CancelRequest) -> bool {
        let key = (request.pid, request.secret_key.to_bytes());
        let running = self
            .sessions
            .lock()
            .expect("sessions lock")
            .get(&key)
            .cloned();
        let Some(running) = running else {
            tracing::debug!("a cancel request named no session");
            return false;
        };
        let job = running.0.lock().expect("running lock").clone();
        if let Some((caller, id)) = job
            && let Err(e) = self.queries.cancel(&caller, &id).await
        {
            tracing::warn!(error = %e, query = %id, "cancelling a postgres statement failed");
        }
        true
    }
}

#[async_trait]
impl CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.cancel(request).await;
    }
}
