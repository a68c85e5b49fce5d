//! The `[[orgs]]` list: each org's name, zones, daily-run schedule and
//! `ErrorMessages` shape, the embedded default's one org, and the checks of
//! the list (names, zones, schedules, and that `server.default_org` is one of
//! them).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ErrorMessagesShape, names::check_label};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgConfig {
    pub name: String,
    #[serde(default)]
    pub zones: Vec<String>,
    #[serde(default = "default_daily_run_schedule")]
    pub daily_run_schedule: String,
    /// This org's `pipeline.error_messages`, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_messages: Option<ErrorMessagesShape>,
}

fn default_daily_run_schedule() -> String {
    "0 2 * * *".into()
}

pub(super) fn default_orgs() -> Vec<OrgConfig> {
    vec![OrgConfig {
        name: "demo".into(),
        zones: vec!["lab".into()],
        daily_run_schedule: default_daily_run_schedule(),
        error_messages: None,
    }]
}

/// Checks the list and each org in it, then that `default_org` (the value of
/// `server.default_org`) is one of them.
pub(super) fn validate_orgs(orgs: &[OrgConfig], default_org: &str) -> Result<(), ConfigError> {
    if orgs.is_empty() {
        return Err(ConfigError::new("orgs", "at least one org is required"));
    }
    let mut org_names = BTreeSet::new();
    for (i, org) in orgs.iter().enumerate() {
        check_label(&format!("orgs[{i}].name"), &org.name)?;
        if !org_names.insert(org.name.as_str()) {
            return Err(ConfigError::new(
                format!("orgs[{i}].name"),
                format!("org `{}` is configured twice", org.name),
            ));
        }
        org.validate(i)?;
    }
    if !org_names.contains(default_org) {
        return Err(ConfigError::new(
            "server.default_org",
            format!("`{default_org}` is not one of the configured orgs"),
        ));
    }
    Ok(())
}

impl OrgConfig {
    /// Checks the zones and the schedule of the org at `orgs[i]`.
    fn validate(&self, i: usize) -> Result<(), ConfigError> {
        let mut zones = BTreeSet::new();
        for (j, zone) in self.zones.iter().enumerate() {
            check_label(&format!("orgs[{i}].zones[{j}]"), zone)?;
            if !zones.insert(zone.as_str()) {
                return Err(ConfigError::new(
                    format!("orgs[{i}].zones[{j}]"),
                    format!("zone `{zone}` is listed twice"),
                ));
            }
        }
        self.daily_run_schedule
            .parse::<croner::Cron>()
            .map_err(|e| {
                ConfigError::new(
                    format!("orgs[{i}].daily_run_schedule"),
                    format!("not a valid cron expression: {e}"),
                )
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_refused_at;

    #[test]
    fn bad_values_name_the_key() {
        assert_refused_at(&[
            ("[server]\ndefault_org = \"acme\"", "server.default_org"),
            (
                "[[orgs]]\nname = \"demo\"\ncolor = \"red\"",
                "orgs[0].color",
            ),
            ("[[orgs]]\nname = \"Bad_Org\"", "orgs[0].name"),
            (
                "[[orgs]]\nname = \"demo\"\ndaily_run_schedule = \"every day\"",
                "orgs[0].daily_run_schedule",
            ),
        ]);
    }
}
