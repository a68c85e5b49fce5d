//! The spec's roles and its capability table ("Roles", "Service clients"), as one
//! module that the identity endpoint, the query engine and the load pipeline all
//! ask. Capabilities of several roles add up.
//!
//! This module decides; it never reads tokens or HTTP. Choices where the spec is
//! silent are named on the functions (data-input databases, sandbox rows).

use std::collections::BTreeSet;

pub use crate::store::database_kind::DatabaseKind;

/// Service client 901: public rows, readable by every role, added to every list.
pub const PUBLIC_SERVICE_CLIENT: u32 = 901;
/// Service client 0 in a claim: all service clients (for roles above PublicConsumer).
pub const ALL_SERVICE_CLIENTS: u32 = 0;

/// The five roles, lowest first (the order is the "highest role" of the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    PublicConsumer,
    OwnServiceClientConsumer,
    OwnServiceClientAnalyst,
    AllServiceClientAnalyst,
    ZoneAdmin,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::PublicConsumer,
        Role::OwnServiceClientConsumer,
        Role::OwnServiceClientAnalyst,
        Role::AllServiceClientAnalyst,
        Role::ZoneAdmin,
    ];

    /// The role for a name in `resource_access.<client>.roles`; other names
    /// (Keycloak's `offline_access`, say) are not roles of this service.
    pub fn from_name(name: &str) -> Option<Role> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::PublicConsumer => "PublicConsumer",
            Role::OwnServiceClientConsumer => "OwnServiceClientConsumer",
            Role::OwnServiceClientAnalyst => "OwnServiceClientAnalyst",
            Role::AllServiceClientAnalyst => "AllServiceClientAnalyst",
            Role::ZoneAdmin => "ZoneAdmin",
        }
    }
}

/// Which service clients' rows a caller may touch in some database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceClientScope {
    Nothing,
    Only(BTreeSet<u32>),
    All,
}

impl ServiceClientScope {
    pub fn allows(&self, service_client: u32) -> bool {
        match self {
            ServiceClientScope::Nothing => false,
            ServiceClientScope::Only(ids) => ids.contains(&service_client),
            ServiceClientScope::All => true,
        }
    }

    /// The union of two scopes (capabilities add up).
    fn union(self, other: ServiceClientScope) -> ServiceClientScope {
        use ServiceClientScope::*;
        match (self, other) {
            (All, _) | (_, All) => All,
            (Nothing, x) | (x, Nothing) => x,
            (Only(mut a), Only(b)) => {
                a.extend(b);
                Only(a)
            }
        }
    }
}

/// A caller's roles on one API client plus their service clients: everything
/// the capability table needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    roles: BTreeSet<Role>,
    service_clients: BTreeSet<u32>,
}

impl Access {
    /// `role_names` as found in the token (unknown names are ignored), and the
    /// parsed `service_client_id` claim.
    pub fn new<'a>(
        role_names: impl IntoIterator<Item = &'a str>,
        service_clients: impl IntoIterator<Item = u32>,
    ) -> Self {
        Self {
            roles: role_names.into_iter().filter_map(Role::from_name).collect(),
            service_clients: service_clients.into_iter().collect(),
        }
    }

    pub fn roles(&self) -> &BTreeSet<Role> {
        &self.roles
    }

    pub fn highest_role(&self) -> Option<Role> {
        self.roles.iter().next_back().copied()
    }

    fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    fn has_any(&self, roles: &[Role]) -> bool {
        roles.iter().any(|r| self.has(*r))
    }

    fn claims_all(&self) -> bool {
        self.service_clients.contains(&ALL_SERVICE_CLIENTS)
    }

    /// The caller's own service clients plus 901.
    fn own(&self) -> ServiceClientScope {
        let mut ids = self.service_clients.clone();
        ids.remove(&ALL_SERVICE_CLIENTS);
        ids.insert(PUBLIC_SERVICE_CLIENT);
        ServiceClientScope::Only(ids)
    }

    fn public_only() -> ServiceClientScope {
        ServiceClientScope::Only(BTreeSet::from([PUBLIC_SERVICE_CLIENT]))
    }

    /// Whose rows the caller may read in a database of this kind.
    ///
    /// Sandbox tables follow the lake rules for rows that carry a service client,
    /// so a table copied into the sandbox does not widen anyone's access.
    pub fn read_scope(&self, kind: DatabaseKind) -> ServiceClientScope {
        use Role::*;
        let mut scope = ServiceClientScope::Nothing;
        match kind {
            DatabaseKind::Insights => {
                if !self.roles.is_empty() {
                    scope = scope.union(Self::public_only());
                }
                if self.has_any(&[
                    OwnServiceClientConsumer,
                    OwnServiceClientAnalyst,
                    AllServiceClientAnalyst,
                    ZoneAdmin,
                ]) {
                    scope = scope.union(self.own());
                }
                if self.has_any(&[AllServiceClientAnalyst, ZoneAdmin])
                    || (self.claims_all()
                        && self.has_any(&[OwnServiceClientConsumer, OwnServiceClientAnalyst]))
                {
                    scope = ServiceClientScope::All;
                }
            }
            DatabaseKind::Lake | DatabaseKind::DataInput | DatabaseKind::Sandbox => {
                if self.has_any(&[OwnServiceClientAnalyst, AllServiceClientAnalyst, ZoneAdmin]) {
                    scope = scope.union(self.own());
                }
                if self.has_any(&[AllServiceClientAnalyst, ZoneAdmin])
                    || (self.claims_all() && self.has(OwnServiceClientAnalyst))
                {
                    scope = ServiceClientScope::All;
                }
            }
        }
        scope
    }

    /// May the caller read a database of this kind at all (some rows of it)?
    pub fn can_read_database(&self, kind: DatabaseKind) -> bool {
        self.read_scope(kind) != ServiceClientScope::Nothing
    }

    /// CREATE TABLE / CREATE TABLE AS.
    pub fn can_create_table(&self, kind: DatabaseKind) -> bool {
        self.can_write(kind)
    }

    /// INSERT and other data writes with SQL, adding and removing partitions.
    pub fn can_write_data(&self, kind: DatabaseKind) -> bool {
        self.can_write(kind)
    }

    fn can_write(&self, kind: DatabaseKind) -> bool {
        use Role::*;
        match kind {
            DatabaseKind::Sandbox => {
                self.has_any(&[OwnServiceClientAnalyst, AllServiceClientAnalyst, ZoneAdmin])
            }
            DatabaseKind::Lake | DatabaseKind::Insights | DatabaseKind::DataInput => {
                self.has_any(&[AllServiceClientAnalyst, ZoneAdmin])
            }
        }
    }

    /// DROP TABLE and ALTER TABLE: anyone who may write the sandbox there; only
    /// ZoneAdmin elsewhere.
    pub fn can_drop_or_alter(&self, kind: DatabaseKind) -> bool {
        match kind {
            DatabaseKind::Sandbox => self.can_write(kind),
            _ => self.has(Role::ZoneAdmin),
        }
    }

    /// Whose rows the caller may add through the load API.
    pub fn load_scope(&self) -> ServiceClientScope {
        use Role::*;
        if self.has_any(&[AllServiceClientAnalyst, ZoneAdmin]) {
            ServiceClientScope::All
        } else if self.has(OwnServiceClientAnalyst) {
            if self.claims_all() {
                ServiceClientScope::All
            } else {
                self.own()
            }
        } else if self.has_any(&[PublicConsumer, OwnServiceClientConsumer]) {
            Self::public_only()
        } else {
            ServiceClientScope::Nothing
        }
    }

    /// The row filter of `GET /identity/security_metadata`: `1=1` for a claim
    /// with 0 or a highest role of AllServiceClientAnalyst or ZoneAdmin; `1=0`
    /// for a caller with no role of this service; else the claim's ids plus 901
    /// (not narrowed to what the role can read, as the spec says).
    pub fn where_clause(&self, claim_order: &[u32]) -> String {
        let Some(highest) = self.highest_role() else {
            return "1=0".into();
        };
        if self.claims_all() || highest >= Role::AllServiceClientAnalyst {
            return "1=1".into();
        }
        let mut ids: Vec<u32> = Vec::new();
        for id in claim_order.iter().copied().chain([PUBLIC_SERVICE_CLIENT]) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        format!("service_client_id IN ({})", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseKind::*;
    use super::*;

    fn access(role: &str, clients: &[u32]) -> Access {
        Access::new([role], clients.iter().copied())
    }

    fn only(ids: &[u32]) -> ServiceClientScope {
        ServiceClientScope::Only(ids.iter().copied().collect())
    }

    #[test]
    fn read_public_insights_all_five_roles() {
        for role in Role::ALL {
            let a = access(role.name(), &[12]);
            assert!(a.read_scope(Insights).allows(901), "{role:?}");
        }
        assert_eq!(
            access("PublicConsumer", &[12]).read_scope(Insights),
            only(&[901])
        );
    }

    #[test]
    fn read_own_insights() {
        assert_eq!(
            access("OwnServiceClientConsumer", &[12, 13]).read_scope(Insights),
            only(&[12, 13, 901])
        );
        assert!(
            !access("PublicConsumer", &[12])
                .read_scope(Insights)
                .allows(12)
        );
    }

    #[test]
    fn read_all_insights() {
        for role in ["AllServiceClientAnalyst", "ZoneAdmin"] {
            assert_eq!(
                access(role, &[12]).read_scope(Insights),
                ServiceClientScope::All
            );
        }
        for role in ["OwnServiceClientConsumer", "OwnServiceClientAnalyst"] {
            assert_eq!(
                access(role, &[0]).read_scope(Insights),
                ServiceClientScope::All
            );
            assert_eq!(access(role, &[5]).read_scope(Insights), only(&[5, 901]));
        }
        // PublicConsumer gains nothing from 0.
        assert_eq!(
            access("PublicConsumer", &[0]).read_scope(Insights),
            only(&[901])
        );
    }

    #[test]
    fn read_lake_and_data_input() {
        for kind in [Lake, DataInput] {
            assert_eq!(
                access("PublicConsumer", &[0]).read_scope(kind),
                ServiceClientScope::Nothing
            );
            assert_eq!(
                access("OwnServiceClientConsumer", &[0]).read_scope(kind),
                ServiceClientScope::Nothing
            );
            assert_eq!(
                access("OwnServiceClientAnalyst", &[12]).read_scope(kind),
                only(&[12, 901])
            );
            assert_eq!(
                access("OwnServiceClientAnalyst", &[0]).read_scope(kind),
                ServiceClientScope::All
            );
            assert_eq!(
                access("AllServiceClientAnalyst", &[12]).read_scope(kind),
                ServiceClientScope::All
            );
            assert_eq!(
                access("ZoneAdmin", &[12]).read_scope(kind),
                ServiceClientScope::All
            );
        }
    }

    #[test]
    fn no_recognised_role_reads_nothing() {
        let a = Access::new(["offline_access"], [0]);
        for kind in [Lake, Insights, DataInput, Sandbox] {
            assert!(!a.can_read_database(kind));
            assert!(!a.can_create_table(kind));
        }
        assert_eq!(a.load_scope(), ServiceClientScope::Nothing);
    }

    #[test]
    fn capabilities_add_up() {
        let a = Access::new(["PublicConsumer", "OwnServiceClientAnalyst"], [7]);
        assert_eq!(a.read_scope(Lake), only(&[7, 901]));
        assert!(a.can_create_table(Sandbox));
    }

    #[test]
    fn table_writes_by_role() {
        let cases = [
            ("PublicConsumer", [false, false, false]),
            ("OwnServiceClientConsumer", [false, false, false]),
            ("OwnServiceClientAnalyst", [true, false, false]),
            ("AllServiceClientAnalyst", [true, true, true]),
            ("ZoneAdmin", [true, true, true]),
        ];
        for (role, [sandbox, lake, insights]) in cases {
            let a = access(role, &[1]);
            assert_eq!(a.can_create_table(Sandbox), sandbox, "{role}");
            assert_eq!(a.can_create_table(Lake), lake, "{role}");
            assert_eq!(a.can_create_table(Insights), insights, "{role}");
            assert_eq!(a.can_write_data(Lake), lake, "{role}");
            assert_eq!(a.can_drop_or_alter(Sandbox), sandbox, "{role}");
        }
    }

    #[test]
    fn drop_and_modify_lake_only_zone_admin() {
        for role in Role::ALL {
            let a = access(role.name(), &[0]);
            assert_eq!(a.can_drop_or_alter(Lake), role == Role::ZoneAdmin);
            assert_eq!(a.can_drop_or_alter(Insights), role == Role::ZoneAdmin);
        }
    }

    #[test]
    fn load_scope_by_role() {
        assert_eq!(access("PublicConsumer", &[0, 5]).load_scope(), only(&[901]));
        assert_eq!(
            access("OwnServiceClientConsumer", &[0, 5]).load_scope(),
            only(&[901])
        );
        assert_eq!(
            access("OwnServiceClientAnalyst", &[5]).load_scope(),
            only(&[5, 901])
        );
        assert_eq!(
            access("OwnServiceClientAnalyst", &[0]).load_scope(),
            ServiceClientScope::All
        );
        assert_eq!(
            access("AllServiceClientAnalyst", &[5]).load_scope(),
            ServiceClientScope::All
        );
        assert_eq!(
            access("ZoneAdmin", &[5]).load_scope(),
            ServiceClientScope::All
        );
    }

    #[test]
    fn where_clause_rules() {
        assert_eq!(
            access("PublicConsumer", &[12, 13]).where_clause(&[12, 13]),
            "service_client_id IN (12, 13, 901)"
        );
        assert_eq!(
            access("OwnServiceClientAnalyst", &[901, 4]).where_clause(&[901, 4]),
            "service_client_id IN (901, 4)"
        );
        assert_eq!(access("PublicConsumer", &[0]).where_clause(&[0]), "1=1");
        assert_eq!(
            access("AllServiceClientAnalyst", &[12]).where_clause(&[12]),
            "1=1"
        );
        assert_eq!(access("ZoneAdmin", &[12]).where_clause(&[12]), "1=1");
        assert_eq!(
            Access::new(["offline_access"], [12]).where_clause(&[12]),
            "1=0"
        );
    }
}
