//! The families of databases (lake, insights, data input, sandbox) and the
//! names the catalog stores them under. What each family lets a role do is
//! `auth::roles`; this is only the vocabulary both floors share.

use super::{Error, Result};

/// The families of databases an org or zone has; each has its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatabaseKind {
    /// `<org>_lake_v2` / `<zone>_lake`: loaded data.
    Lake,
    /// Derived, curated tables (the daily run refreshes them).
    Insights,
    /// Raw inputs; read like the lake. For writes the spec names only lake and
    /// insights: we treat data-input like the lake there too.
    DataInput,
    /// The analysts' scratch space.
    Sandbox,
}

pub fn kind_name(kind: DatabaseKind) -> &'static str {
    match kind {
        DatabaseKind::Lake => "lake",
        DatabaseKind::Insights => "insights",
        DatabaseKind::DataInput => "data_input",
        DatabaseKind::Sandbox => "sandbox",
    }
}

pub(super) fn parse_kind(name: &str) -> Result<DatabaseKind> {
    Ok(match name {
        "lake" => DatabaseKind::Lake,
        "insights" => DatabaseKind::Insights,
        "data_input" => DatabaseKind::DataInput,
        "sandbox" => DatabaseKind::Sandbox,
        other => return Err(Error::Corrupt(format!("database kind {other:?}"))),
    })
}
