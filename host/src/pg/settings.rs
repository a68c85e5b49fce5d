//! The server settings a Postgres client may ask for, in one list: `SHOW
//! name` answers from it (`statements.rs`), and so does the catalog's
//! `pg_catalog.pg_settings` (`catalog/`), so the two never disagree.
//! Nothing here can be changed: `SET` is accepted and does nothing.

use super::startup::SERVER_VERSION;

/// The isolation level lakehost reports (each statement is its own query).
pub const TRANSACTION_ISOLATION: &str = "read committed";

/// One setting as `pg_settings` shows it.
pub struct Setting {
    pub name: &'static str,
    pub value: &'static str,
    /// `bool`, `integer`, `string` or `enum`, as Postgres' `vartype`.
    pub vartype: &'static str,
    pub description: &'static str,
}

/// The settings, in name order.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "client_encoding",
        value: "UTF8",
        vartype: "string",
        description: "Sets the client's character set encoding.",
    },
    Setting {
        name: "DateStyle",
        value: "ISO, YMD",
        vartype: "string",
        description: "Sets the display format for date and time values.",
    },
    // SQLAlchemy's reflection compares each table's access method with it.
    Setting {
        name: "default_table_access_method",
        value: "heap",
        vartype: "string",
        description: "Sets the default table access method for new tables.",
    },
    Setting {
        name: "integer_datetimes",
        value: "on",
        vartype: "bool",
        description: "Shows whether datetimes are integer based.",
    },
    Setting {
        name: "max_identifier_length",
        value: "63",
        vartype: "integer",
        description: "Shows the maximum identifier length.",
    },
    // pgjdbc reads it before it lists foreign keys (the most columns a key
    // has); a lake has no keys, Postgres' value is the honest bound.
    Setting {
        name: "max_index_keys",
        value: "32",
        vartype: "integer",
        description: "Shows the maximum number of index keys.",
    },
    Setting {
        name: "search_path",
        value: "public",
        vartype: "string",
        description: "Sets the schema search order for names that are not schema-qualified.",
    },
    Setting {
        name: "server_encoding",
        value: "UTF8",
        vartype: "string",
        description: "Shows the server (database) character set encoding.",
    },
    Setting {
        name: "server_version",
        value: SERVER_VERSION,
        vartype: "string",
        description: "Shows the server version.",
    },
    Setting {
        name: "server_version_num",
        value: "150000",
        vartype: "integer",
        description: "Shows the server version as an integer.",
    },
    Setting {
        name: "standard_conforming_strings",
        value: "on",
        vartype: "bool",
        description: "Causes '...' strings to treat backslashes literally.",
    },
    Setting {
        name: "TimeZone",
        value: "UTC",
        vartype: "string",
        description: "Sets the time zone for displaying and interpreting time stamps.",
    },
    Setting {
        name: "transaction_isolation",
        value: TRANSACTION_ISOLATION,
        vartype: "enum",
        description: "Sets the current transaction's isolation level.",
    },
];

/// The setting called `name` (any case, as Postgres' names are).
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|setting| setting.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_found_in_any_case_and_listed_in_name_order() {
        assert_eq!(setting("timezone").map(|s| s.value), Some("UTC"));
        assert_eq!(setting("MAX_INDEX_KEYS").map(|s| s.value), Some("32"));
        assert!(setting("no_such_setting").is_none());
        let names: Vec<String> = SETTINGS.iter().map(|s| s.name.to_lowercase()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }
}
