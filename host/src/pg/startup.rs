//! A Postgres connection's startup: who connects, to which API.
//!
//! - The database names the API: `demo` is org `demo`'s Org API, `lab.demo`
//!   its zone `lab` (orgs and zones are DNS labels, so the dot is free).
//!   An unknown one is FATAL 3D000, before any password is asked for.
//! - `user` is a client id of the org's realm and the password its secret,
//!   authenticated as every front end authenticates (`auth::authenticate`:
//!   exchanged for an access token with the realm's client-credentials flow,
//!   validated, its claims made a caller); `sqlstate::refused` maps its
//!   refusals: a refused secret is FATAL 28P01, a token or claims this API
//!   does not accept FATAL 28000, an identity provider out of reach 08006.
//! - Passwords cross TLS only: a plain connection is refused (FATAL 28000)
//!   before the server asks for one, except on a listener without a
//!   certificate (which `Config::validate` keeps on loopback) from a
//!   loopback peer: there the secret never leaves the machine. No SCRAM: lakehost holds no secrets to
//!   salt, it can only check one by exchanging it.
//! - A refused secret counts against the client address's failure budget
//!   (`auth::failure_budget`); past it, FATAL 53400 without asking the
//!   identity provider until the budget's window ends.
//! - An accepted session takes a place in its org's share of the
//!   listener's connections (`server.max_connections_per_org`), held until
//!   the connection ends; past the share, FATAL 53300.
//!
//! The session keeps the token and, to renew it when it expires, the
//! secret (in memory only, never logged).

use std::{fmt::Debug, net::IpAddr, sync::Arc};

use async_trait::async_trait;
use futures::{Sink, SinkExt as _};
use pgwire::{
    api::{
        ClientInfo, METADATA_DATABASE, METADATA_USER, PgWireConnectionState,
        auth::{
            DefaultServerParameterProvider, StartupHandler, finish_authentication,
            protocol_negotiation, save_startup_parameters_to_metadata,
        },
    },
    error::{PgWireError, PgWireResult},
    messages::{PgWireBackendMessage, PgWireFrontendMessage, startup::Authentication},
};

use super::{
    PgState,
    cancel::Cancels,
    sqlstate::{fatal, refused},
};
use crate::{
    auth::{Api, Credentials, LakeCaller, authenticate},
    listener::OrgShares,
};

/// The Postgres version lakehost answers as: psql and drivers pick their
/// catalog queries by it.
pub const SERVER_VERSION: &str = "15.0";

/// Who a connection is for, once its password was accepted.
pub struct Session {
    pub org: String,
    pub zone: Option<String>,
    pub client_id: String,
    secret: String,
    /// The access token the secret was last exchanged for.
    pub token: String,
}

impl Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("org", &self.org)
            .field("zone", &self.zone)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The database the session connected to: `demo`, or `lab.demo` for
    /// zone `lab`.
    pub fn database(&self) -> String {
        crate::engine::session::api_database(&self.org, self.zone.as_deref())
    }

    /// The same session with a fresh token for its secret.
    pub async fn renewed(&self, state: &PgState) -> PgWireResult<Session> {
        let token = token_for(
            state,
            None,
            (&self.org, self.zone.as_deref()),
            &self.client_id,
            &self.secret,
        )
        .await?;
        Ok(Session {
            org: self.org.clone(),
            zone: self.zone.clone(),
            client_id: self.client_id.clone(),
            secret: self.secret.clone(),
            token,
        })
    }
}

/// The org and zone a database name names, both configured.
pub fn api_of(state: &PgState, database: &str) -> Option<(String, Option<String>)> {
    let database = database.to_ascii_lowercase();
    let (org, zone) = match database.split_once('.') {
        Some((zone, org)) => (org.to_string(), Some(zone.to_string())),
        None => (database, None),
    };
    state.config.org(&org)?;
    if let Some(zone) = &zone
        && !state.config.has_zone(&org, zone)
    {
        return None;
    }
    Some((org, zone))
}

/// `client_id`'s secret authenticated for the API of `org` (and `zone`)
/// as every front end authenticates (`auth::authenticate`: exchanged for a
/// token of the org's realm within the failure budget of the client's
/// address `peer`, none for a session renewing the token of a secret
/// accepted before; the token validated; its claims made a caller): the
/// token, or the refusal as a Postgres error.
async fn token_for(
    state: &PgState,
    peer: Option<IpAddr>,
    (org, zone): (&str, Option<&str>),
    client_id: &str,
    secret: &str,
) -> PgWireResult<String> {
    let credentials = Credentials::ClientSecret {
        client_id,
        secret,
        peer,
    };
    authenticate(&state.validator, Some(credentials), Api { org, zone }, None)
        .await
        .map(|authenticated| authenticated.token)
        .map_err(|refusal| refused(refusal, client_id))
}

/// `session`'s token authenticated again for its API and `scope` (when
/// given), made its caller: a refused token (expired, say: the session renews it) is `Err(None)`,
/// other refusals `Err(Some(..))`, mapped by `sqlstate::refused`.
pub async fn validated(
    state: &PgState,
    session: &Session,
    scope: Option<&str>,
) -> Result<LakeCaller, Option<PgWireError>> {
    let api = Api {
        org: &session.org,
        zone: session.zone.as_deref(),
    };
    let credentials = Some(Credentials::Bearer(&session.token));
    match authenticate(&state.validator, credentials, api, scope).await {
        Ok(authenticated) => Ok(authenticated.caller),
        Err(refusal) => {
            Err((!refusal.is_token_refused()).then(|| refused(refusal, &session.client_id)))
        }
    }
}

/// The startup handler: database, TLS, password.
pub struct LakeStartup {
    state: PgState,
    cancels: Arc<Cancels>,
    shares: Arc<OrgShares>,
    parameters: DefaultServerParameterProvider,
}

impl LakeStartup {
    pub fn new(state: PgState, cancels: Arc<Cancels>, shares: Arc<OrgShares>) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = SERVER_VERSION.to_string();
        parameters.is_superuser = false;
        parameters.time_zone = "UTC".to_string();
        Self {
            state,
            cancels,
            shares,
            parameters,
        }
    }
}

impl LakeStartup {
    /// Whether a plain connection from `peer` may send its password: only
    /// on a listener without a certificate, and only from loopback.
    fn plain_allowed(&self, peer: IpAddr) -> bool {
        self.state.config.server.tls_cert.is_none() && peer.to_canonical().is_loopback()
    }
}

#[async_trait]
impl StartupHandler for LakeStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                if !client.is_secure() && !self.plain_allowed(client.socket_addr().ip()) {
                    return Err(fatal(
                        "28000",
                        "lakehost requires SSL (sslmode=require): the password is a client secret",
                    ));
                }
                let metadata = client.metadata();
                let database = metadata
                    .get(METADATA_DATABASE)
                    .or_else(|| metadata.get(METADATA_USER))
                    .cloned()
                    .unwrap_or_default();
                if api_of(&self.state, &database).is_none() {
                    return Err(fatal(
                        "3D000",
                        format!(
                            "database \"{database}\" does not exist (name an org, or <zone>.<org>)"
                        ),
                    ));
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::CleartextPassword,
                    ))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let secret = password.into_password()?.password;
                let metadata = client.metadata();
                let client_id = metadata.get(METADATA_USER).cloned().unwrap_or_default();
                let database = metadata
                    .get(METADATA_DATABASE)
                    .cloned()
                    .unwrap_or_else(|| client_id.clone());
                let Some((org, zone)) = api_of(&self.state, &database) else {
                    return Err(fatal(
                        "3D000",
                        format!("database \"{database}\" does not exist"),
                    ));
                };
                let peer = client.socket_addr().ip();
                let token = token_for(
                    &self.state,
                    Some(peer),
                    (&org, zone.as_deref()),
                    &client_id,
                    &secret,
                )
                .await?;
                let session = Session {
                    org,
                    zone,
                    client_id,
                    secret,
                    token,
                };
                let share = self.shares.claim(&session.org).map_err(|refused| {
                    fatal(
                        "53300",
                        format!("too many connections for database \"{database}\": {refused}"),
                    )
                })?;
                client.session_extensions().insert(share);
                client.session_extensions().insert(session);
                self.cancels.register(client);
                finish_authentication(client, &self.parameters).await?;
            }
            _ => {}
        }
        Ok(())
    }
}
