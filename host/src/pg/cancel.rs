//! Cancel requests. Each session gets a backend key (a pid and a random
//! secret) when it authenticates; a client cancels a running statement by
//! sending that key on a new connection (psycopg's `cancel_safe`, psql's
//! Ctrl-C). The statement's query job is then cancelled for the session's
//! own caller, as `DELETE /v2/query/{id}` cancels it, and the statement ends
//! with 57014. A key names nothing once its session has ended.
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
    api::{
        ClientInfo, PidSecretKeyGenerator as _, RandomPidSecretKeyGenerator, cancel::CancelHandler,
    },
    messages::cancel::CancelRequest,
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
    keys: RandomPidSecretKeyGenerator,
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
            keys: RandomPidSecretKeyGenerator::default(),
            sessions: Mutex::default(),
        }
    }

    /// Gives the authenticated session of `client` its backend key (sent to
    /// the client with the startup's end) and its `Running` slot.
    pub fn register<C: ClientInfo>(self: &Arc<Self>, client: &mut C) {
        let (pid, secret) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let running = Arc::new(Running::default());
        let key = (pid, secret.to_bytes());
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(key.clone(), running.clone());
        let extensions = client.session_extensions();
        extensions.insert(running);
        extensions.insert(Registered {
            cancels: self.clone(),
            key,
        });
    }
}

#[async_trait]
impl CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let running = self
            .sessions
            .lock()
            .expect("sessions lock")
            .get(&key)
            .cloned();
        let Some(running) = running else {
            tracing::debug!("a cancel request named no session");
            return;
        };
        let job = running.0.lock().expect("running lock").clone();
        if let Some((caller, id)) = job
            && let Err(e) = self.queries.cancel(&caller, &id).await
        {
            tracing::warn!(error = %e, query = %id, "cancelling a postgres statement failed");
        }
    }
}
