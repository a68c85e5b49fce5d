//! The shapes of names in the configuration: DNS labels (orgs, zones), host
//! names (`server.region_domain`) and client names (`auth`), each check
//! naming the key it was given.

use super::ConfigError;

pub(super) fn check_label(key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!("`{value}` is not a DNS label (lowercase letters, digits, inner hyphens)"),
        ))
    }
}

pub(super) fn check_hostname(key: &str, value: &str) -> Result<(), ConfigError> {
    if value.is_empty() {
        return Err(ConfigError::new(key, "must not be empty"));
    }
    for label in value.split('.') {
        check_label(key, label).map_err(|_| {
            ConfigError::new(key, format!("`{value}` is not a lowercase host name"))
        })?;
    }
    Ok(())
}

pub(super) fn check_client_name(key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(key, "must be letters, digits, `_` or `-`"))
    }
}
