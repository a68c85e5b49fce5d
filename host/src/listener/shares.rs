//! Each org's share of one listener's connection cap: the wire listeners
//! (Flight SQL, the Postgres wire) serve long-lived connections, so one org
//! (or one caller's script) holding many of them must not lock every other
//! org out. A connection counts against its org once it has authenticated
//! (before that, the header deadline bounds it); past the org's share the
//! front end refuses it in its own protocol and closes it.
//!
//! It owns only the counting: which org a connection belongs to is the
//! front end's to say, after its authentication.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use crate::locks::locked;

/// How many connections each org holds on one listener, and how many it
/// may (`server.max_connections_per_org`, at most the listener's cap).
#[derive(Debug)]
pub struct OrgShares {
    share: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One connection's place in its org's share; dropping it gives the place
/// back.
#[derive(Debug)]
pub struct OrgShare {
    shares: Arc<OrgShares>,
    org: String,
}

/// Why a connection could not be counted against an org.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareRefused {
    /// The org already holds its share of this listener's connections.
    #[error("org {org} already holds its {share} connections to this listener")]
    Full { org: String, share: usize },
    /// The connection already belongs to another org (a Flight connection
    /// whose calls carry another org's token).
    #[error("this connection belongs to another org")]
    OtherOrg,
}

impl OrgShares {
    /// Shares of `share` connections per org.
    pub fn new(share: usize) -> Arc<Self> {
        Arc::new(Self {
            share: share.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Each org's share.
    pub fn share(&self) -> usize {
        self.share
    }

    fn open(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        // Counting never panics while holding the lock; a poisoned map is
        // still a consistent map.
        locked(&self.open)
    }

    /// A place in `org`'s share, or why there is none.
    pub fn claim(self: &Arc<Self>, org: &str) -> Result<OrgShare, ShareRefused> {
        let mut open = self.open();
        let held = open.entry(org.to_string()).or_insert(0);
        if *held >= self.share {
            return Err(ShareRefused::Full {
                org: org.to_string(),
                share: self.share,
            });
        }
        *held += 1;
        Ok(OrgShare {
            shares: self.clone(),
            org: org.to_string(),
        })
    }
}

impl OrgShare {
    /// The org this place belongs to.
    pub fn org(&self) -> &str {
        &self.org
    }
}

impl Drop for OrgShare {
    fn drop(&mut self) {
        let mut open = self.shares.open();
        if let Some(held) = open.get_mut(&self.org) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.remove(&self.org);
            }
        }
    }
}

/// The org an HTTP connection (a Flight SQL client's) belongs to: a request
/// extension the listener gives every request of one connection, which the
/// front end binds at the connection's first authenticated call.
#[derive(Debug, Clone)]
pub struct ConnectionOrg {
    shares: Arc<OrgShares>,
    bound: Arc<Mutex<Option<OrgShare>>>,
}

impl ConnectionOrg {
    pub(crate) fn new(shares: Arc<OrgShares>) -> Self {
        Self {
            shares,
            bound: Arc::new(Mutex::new(None)),
        }
    }

    /// Counts the connection against `org` (once; later calls for the same
    /// org pass): refused past the org's share, or when the connection
    /// already belongs to another org.
    pub fn bind(&self, org: &str) -> Result<(), ShareRefused> {
        let mut bound = locked(&self.bound);
        match &*bound {
            Some(share) if share.org() == org => Ok(()),
            Some(_) => Err(ShareRefused::OtherOrg),
            None => {
                *bound = Some(self.shares.claim(org)?);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_org_past_its_share_is_refused_and_others_are_not() {
        let shares = OrgShares::new(2);
        let a1 = shares.claim("a").unwrap();
        let _a2 = shares.claim("a").unwrap();
        assert_eq!(
            shares.claim("a").unwrap_err(),
            ShareRefused::Full {
                org: "a".into(),
                share: 2
            }
        );
        let _b = shares.claim("b").unwrap();
        drop(a1);
        assert!(shares.claim("a").is_ok());
    }

    #[test]
    fn a_connection_binds_to_one_org() {
        let shares = OrgShares::new(1);
        let connection = ConnectionOrg::new(shares.clone());
        connection.bind("a").unwrap();
        connection.bind("a").unwrap();
        assert_eq!(connection.bind("b"), Err(ShareRefused::OtherOrg));
        let other = ConnectionOrg::new(shares.clone());
        assert!(matches!(other.bind("a"), Err(ShareRefused::Full { .. })));
        drop(connection);
        other.bind("a").unwrap();
    }
}
