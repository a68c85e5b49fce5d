//! The Postgres wire protocol on `server.pg_listen`: psql, psycopg and the
//! other Postgres clients reach the lake as they reach a Postgres server,
//! through the same `QueryService` as REST and Flight SQL. Every statement
//! goes through the same classification, role rules, access decision in
//! `scan()` and spec refusal texts, and runs as a query job that
//! `GET /v2/query/{id}` shows; its rows are sent from the job's typed result.
//!
//! - `listener.rs`: the accept loop: the connection cap, SSLRequest and the
//!   TLS handshake under the header deadline, the idle timeout, the drain,
//!   and each connection's message loop.
//! - `startup.rs`: the startup message and password: the database names the
//!   org (and zone), `user` is a client id and the password its secret,
//!   exchanged for a token with the org realm's client-credentials flow.
//! - `statements.rs`: the simple and extended query protocols: session commands (BEGIN,
//!   SET, SHOW, ...) answered here, every other statement run as a job.
//! - `reads.rs`: reads a client takes its own way: `COPY ... TO STDOUT`
//!   (`copy.rs` parses and encodes it), cursors (`cursors.rs`: DECLARE,
//!   FETCH, MOVE, CLOSE, as psql's `FETCH_COUNT` and psycopg's named
//!   cursors send them) and an Execute with a row limit; a client that
//!   stops at a pause it asked for ends its job SUCCEEDED.
//! - `frames.rs`: each message read within its phase's size limit and
//!   checked against its type's layout before pgwire decodes it.
//! - `cancel.rs`: cancel requests: a session's backend key cancels its
//!   running statement's job.
//! - `catalog/`: the `pg_catalog` and `information_schema` queries of
//!   psql, SQLAlchemy and other tools, run by DataFusion over placeholders
//!   of what the caller may read; `functions.rs`: the Postgres functions
//!   they call that DataFusion lacks.
//! - `settings.rs`: the server settings `SHOW` and `pg_settings` answer.
//! - `params.rs`: extended-protocol parameters, text and binary, read as
//!   typed values and inlined as the exact literals of those values
//!   (`query::parameters`).
//! - `sqlstate.rs`: query outcomes as Postgres errors (SQLSTATE and text).
//!
//! pgwire supplies the message codec and the per-message dispatch; the
//! listener, TLS and the handlers are lakehost's.

mod cancel;
mod catalog;
mod copy;
mod cursors;
pub(crate) mod frames;
mod functions;
mod listener;
mod params;
mod reads;
mod session;
mod settings;
mod sqlstate;
mod startup;
mod statements;

use std::sync::Arc;

pub use listener::serve;

use crate::{
    auth::TokenValidator,
    config::Config,
    query::{parameters::code_tokens, service::QueryService},
};

/// What the Postgres listener needs of the application.
#[derive(Clone)]
pub struct PgState {
    pub config: Arc<Config>,
    pub validator: Arc<TokenValidator>,
    pub queries: Arc<QueryService>,
    /// The catalog statements running on this replica: under the jobs'
    /// per-org and per-caller caps, in at most `query.workers` slots (they
    /// run on the engine runtime, beside jobs).
    catalog_admission: Arc<catalog::CatalogAdmission>,
}

impl PgState {
    /// The listener's state for `queries`, its catalog statements admitted
    /// under `config`'s query caps.
    pub fn new(
        config: Arc<Config>,
        validator: Arc<TokenValidator>,
        queries: Arc<QueryService>,
    ) -> Self {
        let catalog_admission = Arc::new(catalog::CatalogAdmission::new(
            config.query.workers,
            config.query.caps(),
        ));
        Self {
            config,
            validator,
            queries,
            catalog_admission,
        }
    }
}
