//! The `[idp]` section: the embedded identity provider's switch, token
//! lifetimes, key rotation and principals (application clients and users),
//! the embedded default's demo principals, and the checks of the section:
//! each principal's shape, org, roles and scopes, and that secrets served
//! beyond loopback are not guessable.
//!
//! It holds settings only; the provider itself is `idp/`.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
};

use serde::{Deserialize, Serialize};

use super::{AuthConfig, ConfigError, OrgConfig};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdpConfig {
    pub enabled: bool,
    pub access_token_lifetime_s: u64,
    pub refresh_token_lifetime_s: u64,
    /// A realm's signing key is replaced by a new one after this many hours; the
    /// old key stays in the JWKS until tokens it signed have expired.
    pub key_rotation_hours: u64,
    /// A new signing key is published (in every replica's JWKS) this long
    /// before it signs, so validators that cache a JWKS have it before a
    /// token names it; less than `key_rotation_hours`.
    pub key_publish_lead_s: u64,
    pub clients: Vec<IdpPrincipal>,
    pub users: Vec<IdpPrincipal>,
    /// Serve client secrets shorter than 32 bytes and passwords shorter than
    /// 12 (the demo principals' well-known ones among them) on a listener
    /// beyond loopback. Off: such a server refuses to start.
    pub allow_weak_secrets: bool,
}

impl Default for IdpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            access_token_lifetime_s: 300,
            refresh_token_lifetime_s: 30 * 24 * 3600,
            key_rotation_hours: 30 * 24,
            key_publish_lead_s: 3600,
            clients: demo_clients(&AuthConfig::default()),
            users: demo_users(&AuthConfig::default()),
            allow_weak_secrets: false,
        }
    }
}

/// An application client (`client_id` + `client_secret`) or a user (`username` +
/// `password`) of the embedded identity provider, with the claims its tokens carry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdpPrincipal {
    pub org: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    pub service_clients: Vec<u32>,
    /// Roles per API client, e.g. `{ svc_api = ["ZoneAdmin"], svc_api_lab = [...] }`.
    pub roles: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl IdpPrincipal {
    /// The login name: `client_id` for clients, `username` for users.
    pub fn login(&self) -> &str {
        self.client_id
            .as_deref()
            .or(self.username.as_deref())
            .unwrap_or_default()
    }
}

/// The demo principals' roles: on the Org API's client and the `lab` zone's,
/// whatever `auth.api_client` names them.
fn demo_roles(auth: &AuthConfig, role: &str) -> BTreeMap<String, Vec<String>> {
    BTreeMap::from([
        (auth.api_client.clone(), vec![role.to_string()]),
        (auth.zone_client("lab"), vec![role.to_string()]),
    ])
}

/// Every scope of the demo org and its `lab` zone.
fn all_demo_scopes() -> Vec<String> {
    [
        "query:read",
        "query:write",
        "load:read",
        "load:write",
        "lab:query:read",
        "lab:query:write",
        "lab:load:read",
        "lab:load:write",
        "pipeline:read",
        "pipeline:write",
        "lab:pipeline:read",
        "lab:pipeline:write",
        "dailyrun:enabled:read",
        "dailyrun:enabled:write",
        "dailyrun:execution:read",
        "dailyrun:execution:write",
    ]
    .map(String::from)
    .to_vec()
}

/// The embedded default's application clients: one per role, fixed development
/// secrets (`<client_id>-secret`). Never use these outside a laptop.
pub(super) fn demo_clients(auth: &AuthConfig) -> Vec<IdpPrincipal> {
    let client = |id: &str, role: &str, service_clients: Vec<u32>| IdpPrincipal {
        org: "demo".into(),
        client_id: Some(id.into()),
        client_secret: Some(format!("{id}-secret")),
        username: None,
        password: None,
        service_clients,
        roles: demo_roles(auth, role),
        scopes: all_demo_scopes(),
    };
    vec![
        client("demo-admin", "ZoneAdmin", vec![0]),
        client("demo-all-analyst", "AllServiceClientAnalyst", vec![0]),
        client("demo-own-analyst", "OwnServiceClientAnalyst", vec![1, 2]),
        client("demo-own-consumer", "OwnServiceClientConsumer", vec![1]),
        client("demo-public", "PublicConsumer", vec![3]),
    ]
}

/// The embedded default's one user for the PKCE login flow.
pub(super) fn demo_users(auth: &AuthConfig) -> Vec<IdpPrincipal> {
    vec![IdpPrincipal {
        org: "demo".into(),
        client_id: None,
        client_secret: None,
        username: Some("demo".into()),
        password: Some("demo".into()),
        service_clients: vec![1, 2],
        roles: demo_roles(auth, "OwnServiceClientAnalyst"),
        scopes: all_demo_scopes(),
    }]
}

/// Off loopback, the shortest client secret and password the embedded
/// provider serves (unless `idp.allow_weak_secrets`).
const MIN_EXPOSED_CLIENT_SECRET: usize = 32;
const MIN_EXPOSED_PASSWORD: usize = 12;

/// The five roles of the spec, as they appear in `resource_access.<client>.roles`.
pub const ROLE_NAMES: &[&str] = &[
    "PublicConsumer",
    "OwnServiceClientConsumer",
    "OwnServiceClientAnalyst",
    "AllServiceClientAnalyst",
    "ZoneAdmin",
];

impl IdpConfig {
    /// Checks the section: its lifetimes, its principals (against `orgs` and
    /// the API clients of `auth`), and their secrets when `listen` is not
    /// loopback.
    pub(super) fn validate(
        &self,
        orgs: &[OrgConfig],
        auth: &AuthConfig,
        listen: SocketAddr,
    ) -> Result<(), ConfigError> {
        for (key, value) in [
            ("idp.access_token_lifetime_s", self.access_token_lifetime_s),
            (
                "idp.refresh_token_lifetime_s",
                self.refresh_token_lifetime_s,
            ),
            ("idp.key_rotation_hours", self.key_rotation_hours),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.key_publish_lead_s >= self.key_rotation_hours.saturating_mul(3600) {
            return Err(ConfigError::new(
                "idp.key_publish_lead_s",
                "must be less than idp.key_rotation_hours (in seconds): a key is published \
                 this long before it signs",
            ));
        }
        validate_principals("idp.clients", &self.clients, true, orgs, auth)?;
        validate_principals("idp.users", &self.users, false, orgs, auth)?;
        self.validate_exposed_secrets(listen)
    }

    /// Beyond loopback, the embedded provider's secrets must not be
    /// guessable: the demo principals' well-known ones are for a laptop.
    fn validate_exposed_secrets(&self, listen: SocketAddr) -> Result<(), ConfigError> {
        if !self.enabled || self.allow_weak_secrets || listen.ip().is_loopback() {
            return Ok(());
        }
        let sections = [
            (
                "idp.clients",
                &self.clients,
                "client_secret",
                MIN_EXPOSED_CLIENT_SECRET,
            ),
            ("idp.users", &self.users, "password", MIN_EXPOSED_PASSWORD),
        ];
        for (section, principals, key, min) in sections {
            for (i, p) in principals.iter().enumerate() {
                let secret = p.client_secret.as_deref().or(p.password.as_deref());
                if secret.unwrap_or_default().len() < min {
                    return Err(ConfigError::new(
                        format!("{section}[{i}].{key}"),
                        format!(
                            "must be at least {min} bytes when server.listen ({}) is not a loopback \
                             address (the demo principals' secrets are well known); \
                             set idp.allow_weak_secrets = true to serve it anyway",
                            listen
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks the principals of `section` (`idp.clients` when `are_clients`, else
/// `idp.users`): each one's keys, org, login, roles and scopes.
fn validate_principals(
    section: &str,
    principals: &[IdpPrincipal],
    are_clients: bool,
    orgs: &[OrgConfig],
    auth: &AuthConfig,
) -> Result<(), ConfigError> {
    let mut logins = BTreeSet::new();
    for (i, p) in principals.iter().enumerate() {
        let at = |key: &str| format!("{section}[{i}].{key}");
        let Some(org) = orgs.iter().find(|o| o.name == p.org) else {
            return Err(ConfigError::new(
                at("org"),
                format!("`{}` is not one of the configured orgs", p.org),
            ));
        };
        let (id_key, secret_key, id, secret, wrong) = if are_clients {
            (
                "client_id",
                "client_secret",
                &p.client_id,
                &p.client_secret,
                [
                    ("username", p.username.is_some()),
                    ("password", p.password.is_some()),
                ],
            )
        } else {
            (
                "username",
                "password",
                &p.username,
                &p.password,
                [
                    ("client_id", p.client_id.is_some()),
                    ("client_secret", p.client_secret.is_some()),
                ],
            )
        };
        if let Some((key, _)) = wrong.iter().find(|(_, present)| *present) {
            return Err(ConfigError::new(
                at(key),
                format!("not a key of {section} (use {id_key} and {secret_key})"),
            ));
        }
        let id = id
            .as_deref()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ConfigError::new(at(id_key), "is required"))?;
        if secret.as_deref().is_none_or(str::is_empty) {
            return Err(ConfigError::new(at(secret_key), "is required"));
        }
        if !logins.insert((p.org.as_str(), id)) {
            return Err(ConfigError::new(
                at(id_key),
                format!("`{id}` is configured twice in org `{}`", p.org),
            ));
        }
        for (client, roles) in &p.roles {
            let known_client = *client == auth.api_client
                || org.zones.iter().any(|z| *client == auth.zone_client(z));
            if !known_client {
                return Err(ConfigError::new(
                    format!("{section}[{i}].roles.{client}"),
                    format!(
                        "`{client}` is neither `{}` nor a zone client of org `{}`",
                        auth.api_client, org.name
                    ),
                ));
            }
            for (j, role) in roles.iter().enumerate() {
                if !ROLE_NAMES.contains(&role.as_str()) {
                    return Err(ConfigError::new(
                        format!("{section}[{i}].roles.{client}[{j}]"),
                        format!("unknown role `{role}`; roles are {}", ROLE_NAMES.join(", ")),
                    ));
                }
            }
        }
        for (j, scope) in p.scopes.iter().enumerate() {
            if scope.is_empty() || scope.chars().any(|c| c.is_whitespace()) {
                return Err(ConfigError::new(
                    at(&format!("scopes[{j}]")),
                    "a scope is one word without spaces",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{
        Config,
        tests::{assert_refused_at, env},
    };

    #[test]
    fn demo_principals_hold_their_roles_on_the_configured_api_client() {
        let config = Config::load(None, env(&[("LAKEHOST_AUTH_API_CLIENT", "dash_api")])).unwrap();
        for principal in config.idp.clients.iter().chain(&config.idp.users) {
            let clients: Vec<&String> = principal.roles.keys().collect();
            assert_eq!(clients, ["dash_api", "dash_api_lab"], "{principal:?}");
        }
        assert_eq!(config.auth.cli_clients, ["svc_cli", "comotion_cli"]);
        let refused = Config::from_toml("[auth]\ncli_clients = []").unwrap_err();
        assert_eq!(refused.key, "auth.cli_clients");
    }

    #[test]
    fn weak_secrets_serve_only_loopback_unless_allowed() {
        let on = |listen: &str, extra: &[(&str, &str)]| {
            let mut vars = vec![("LAKEHOST_SERVER_LISTEN", listen)];
            vars.extend_from_slice(extra);
            Config::load(None, env(&vars))
        };
        assert!(on("127.0.0.1:8080", &[]).is_ok());
        assert!(on("[::1]:8080", &[]).is_ok());
        let refused = on("0.0.0.0:8080", &[]).unwrap_err();
        assert_eq!(refused.key, "idp.clients[0].client_secret");
        assert!(refused.problem.contains("at least 32 bytes"), "{refused:?}");
        assert!(
            on(
                "0.0.0.0:8080",
                &[("LAKEHOST_IDP_ALLOW_WEAK_SECRETS", "true")]
            )
            .is_ok()
        );
        assert!(on("0.0.0.0:8080", &[("LAKEHOST_IDP_ENABLED", "false")]).is_ok());
        let strong = "[server]\nlisten = \"10.0.0.1:8080\"\ndefault_org = \"acme\"\n[[orgs]]\nname = \"acme\"\n\
                      [[idp.clients]]\norg = \"acme\"\nclient_id = \"etl\"\n\
                      client_secret = \"0123456789abcdef0123456789abcdef\"\nservice_clients = [0]\n\
                      roles = { svc_api = [\"ZoneAdmin\"] }\n";
        assert!(Config::from_toml(strong).is_ok());
        let weak_user = format!(
            "{strong}[[idp.users]]\norg = \"acme\"\nusername = \"ann\"\npassword = \"short\"\n\
             service_clients = [0]\nroles = {{ svc_api = [\"ZoneAdmin\"] }}\n"
        );
        assert_eq!(
            Config::from_toml(&weak_user).unwrap_err().key,
            "idp.users[0].password"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        assert_refused_at(&[
            (
                "[[orgs]]\nname = \"demo\"\n[[idp.clients]]\norg = \"demo\"\nclient_id = \"a\"\nclient_secret = \"b\"\nservice_clients = [1]\nroles = { svc_api = [\"King\"] }",
                "idp.clients[0].roles.svc_api[0]",
            ),
            (
                "[[orgs]]\nname = \"demo\"\n[[idp.clients]]\norg = \"demo\"\nclient_id = \"a\"\nclient_secret = \"b\"\nservice_clients = [1]\nroles = { svc_api_moon = [\"ZoneAdmin\"] }",
                "idp.clients[0].roles.svc_api_moon",
            ),
            (
                "[idp]\nkey_rotation_hours = 1\nkey_publish_lead_s = 3600",
                "idp.key_publish_lead_s",
            ),
        ]);
    }
}
