//! `has_table_privilege`, `has_any_column_privilege`, `has_schema_privilege`
//! and `has_database_privilege` answered from the caller's grants, where
//! datafusion-pg-catalog's answer true for anything: Metabase asks them for
//! every table it syncs (to offer writes where they are allowed), and a
//! PublicConsumer told it may insert would be told wrong.
//!
//! - a table: `SELECT` if the caller reads it (some of its rows: the row
//!   rules apply when it runs), `INSERT` if it may write rows into its
//!   database (`Access::can_write_data`); `UPDATE`, `DELETE`, `TRUNCATE`,
//!   `REFERENCES` and `TRIGGER` never (lakehost refuses those statements);
//!   the catalog's own tables `SELECT` only;
//! - a schema (a lake database): `USAGE` if the caller reads it, `CREATE` if
//!   it may create tables there; `public`, `pg_catalog` and
//!   `information_schema` `USAGE` only;
//! - the database connected to: `CONNECT` only.
//!
//! The user argument is ignored: a connection has one user, its client. A
//! name the caller cannot see is an error, as a missing one is in Postgres;
//! so is an unknown privilege. No privilege is held `WITH GRANT OPTION`.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use datafusion::{
    arrow::{
        array::{Array, AsArray, BooleanBuilder},
        compute::cast,
        datatypes::DataType,
    },
    common::{Result, exec_err, plan_err},
    logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
        Volatility,
    },
};
use datafusion_pg_catalog::pg_catalog::PG_CATALOG_TABLES;

use crate::{auth::LakeCaller, query::service::VisibleCatalog};

/// The schemas every caller uses and none writes.
const SYSTEM_SCHEMAS: [&str; 3] = ["pg_catalog", "information_schema", "public"];

/// What a caller may write in one lake database.
#[derive(Debug, Default, Clone, Copy, Hash, PartialEq, Eq)]
struct Writes {
    create_table: bool,
    insert: bool,
}

/// What one caller may do on its connection's database.
#[derive(Debug, Hash, PartialEq, Eq)]
pub struct Privileges {
    /// The database connected to (`demo`, `lab.demo`).
    database: String,
    /// Each lake database the caller reads, and what it may write there.
    schemas: BTreeMap<String, Writes>,
    /// The tables the caller reads, as (database, table).
    tables: BTreeSet<(String, String)>,
}

impl Privileges {
    /// No privileges on `database` (a session's tests).
    #[cfg(test)]
    pub fn none(database: &str) -> Self {
        Self {
            database: database.to_string(),
            schemas: BTreeMap::new(),
            tables: BTreeSet::new(),
        }
    }

    /// `caller`'s privileges on what it sees (`visible`) in `database`.
    pub fn of(caller: &LakeCaller, visible: &VisibleCatalog, database: &str) -> Self {
        let access = caller.grant.access();
        let schemas = visible
            .databases
            .iter()
            .map(|d| {
                let writes = Writes {
                    create_table: access.can_create_table(d.kind),
                    insert: access.can_write_data(d.kind),
                };
                (d.name.clone(), writes)
            })
            .collect();
        let tables = visible
            .tables
            .iter()
            .filter_map(|t| Some((visible.database_of(t)?.name.clone(), t.name.clone())))
            .collect();
        Self {
            database: database.to_string(),
            schemas,
            tables,
        }
    }

    /// The four functions, answering for these privileges.
    pub fn functions(self: &Arc<Self>) -> [ScalarUDF; 4] {
        [
            Object::Table(TABLE),
            Object::Table(COLUMNS),
            Object::Schema,
            Object::Database,
        ]
        .map(|object| {
            ScalarUDF::new_from_impl(HasPrivilege {
                object,
                privileges: self.clone(),
                signature: Signature::one_of(
                    vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                    Volatility::Stable,
                ),
            })
        })
    }

    fn table(&self, name: &str, privilege: &str, kind: &TableKind) -> Result<bool> {
        let parts = identifier_parts(name)?;
        let (schema, table) = match parts.as_slice() {
            // The search path: pg_catalog, then public (which is empty).
            [table] if PG_CATALOG_TABLES.contains(&table.as_str()) => ("pg_catalog", table),
            [schema, table] => (schema.as_str(), table),
            _ => return exec_err!("relation \"{name}\" does not exist"),
        };
        let system = match schema {
            "pg_catalog" => PG_CATALOG_TABLES.contains(&table.as_str()),
            "information_schema" => true,
            _ => false,
        };
        let reads = system
            || self
                .tables
                .contains(&(schema.to_string(), table.to_string()));
        if !reads {
            return exec_err!("relation \"{name}\" does not exist");
        }
        let writes = match system {
            true => Writes::default(),
            false => self.schemas.get(schema).copied().unwrap_or_default(),
        };
        match kind.privilege(privilege)? {
            TablePrivilege::Select => Ok(true),
            TablePrivilege::Insert => Ok(writes.insert),
            TablePrivilege::Never => Ok(false),
        }
    }

    fn schema(&self, name: &str, privilege: &str) -> Result<bool> {
        let schema = match identifier_parts(name)?.as_slice() {
            [schema] => schema.clone(),
            _ => return exec_err!("schema \"{name}\" does not exist"),
        };
        let writes = match self.schemas.get(&schema) {
            Some(writes) => *writes,
            None if SYSTEM_SCHEMAS.contains(&schema.as_str()) => Writes::default(),
            None => return exec_err!("schema \"{name}\" does not exist"),
        };
        match privilege {
            "USAGE" => Ok(true),
            "CREATE" => Ok(writes.create_table),
            _ => exec_err!("unrecognized privilege type: \"{privilege}\""),
        }
    }

    fn database(&self, name: &str, privilege: &str) -> Result<bool> {
        if name != self.database {
            return exec_err!("database \"{name}\" does not exist");
        }
        match privilege {
            "CONNECT" => Ok(true),
            "CREATE" | "TEMPORARY" | "TEMP" => Ok(false),
            _ => exec_err!("unrecognized privilege type: \"{privilege}\""),
        }
    }

    /// Whether any privilege of `list` (`'SELECT, INSERT'`) is held on
    /// `name`, as Postgres reads the list.
    fn any(&self, object: &Object, name: &str, list: &str) -> Result<bool> {
        let mut held = false;
        for privilege in list.split(',') {
            let privilege = privilege.trim().to_ascii_uppercase();
            let (privilege, grant_option) = match privilege.strip_suffix(" WITH GRANT OPTION") {
                Some(privilege) => (privilege.trim_end(), true),
                None => (privilege.as_str(), false),
            };
            let has = match object {
                Object::Table(kind) => self.table(name, privilege, kind)?,
                Object::Schema => self.schema(name, privilege)?,
                Object::Database => self.database(name, privilege)?,
            };
            held |= has && !grant_option;
        }
        Ok(held)
    }
}

/// The parts of a (possibly qualified, possibly quoted) name, as Postgres
/// reads them: unquoted parts lowercase, `""` in a quoted part a quote.
fn identifier_parts(name: &str) -> Result<Vec<String>> {
    let mut parts = Vec::new();
    let mut chars = name.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return exec_err!("unterminated quoted name in \"{name}\""),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != '.') {
                part.push(c.to_ascii_lowercase());
            }
        }
        if part.is_empty() {
            return exec_err!("invalid name syntax: \"{name}\"");
        }
        parts.push(part);
        match chars.next() {
            Some('.') => continue,
            None => return Ok(parts),
            Some(_) => return exec_err!("invalid name syntax: \"{name}\""),
        }
    }
}

/// What a table privilege is for a lake.
enum TablePrivilege {
    Select,
    Insert,
    Never,
}

/// The privileges a table function knows: `has_table_privilege`'s or
/// `has_any_column_privilege`'s.
struct TableKind {
    name: &'static str,
    never: &'static [&'static str],
}

const TABLE: TableKind = TableKind {
    name: "has_table_privilege",
    never: &["UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"],
};

const COLUMNS: TableKind = TableKind {
    name: "has_any_column_privilege",
    never: &["UPDATE", "REFERENCES"],
};

impl TableKind {
    fn privilege(&self, privilege: &str) -> Result<TablePrivilege> {
        match privilege {
            "SELECT" => Ok(TablePrivilege::Select),
            "INSERT" => Ok(TablePrivilege::Insert),
            p if self.never.contains(&p) => Ok(TablePrivilege::Never),
            _ => exec_err!("unrecognized privilege type: \"{privilege}\""),
        }
    }
}

/// What a privilege function asks about.
enum Object {
    Table(TableKind),
    Schema,
    Database,
}

impl Object {
    fn name(&self) -> &'static str {
        match self {
            Object::Table(kind) => kind.name,
            Object::Schema => "has_schema_privilege",
            Object::Database => "has_database_privilege",
        }
    }
}

/// `has_..._privilege([user,] name, privileges)`.
struct HasPrivilege {
    object: Object,
    privileges: Arc<Privileges>,
    signature: Signature,
}

impl std::fmt::Debug for HasPrivilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.object.name())
    }
}

impl PartialEq for HasPrivilege {
    fn eq(&self, other: &Self) -> bool {
        self.object.name() == other.object.name() && self.privileges == other.privileges
    }
}

impl Eq for HasPrivilege {}

impl std::hash::Hash for HasPrivilege {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.object.name().hash(state);
        self.privileges.hash(state);
    }
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null
    )
}

impl ScalarUDFImpl for HasPrivilege {
    fn name(&self) -> &str {
        self.object.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        // The object by its name (an oid is not looked up here) and the
        // privileges as text; the user is ignored.
        let [.., object, privileges] = arg_types else {
            return plan_err!("{} takes a name and privileges", self.name());
        };
        if !is_text(object) || !is_text(privileges) {
            return plan_err!(
                "{} takes the object's name and the privileges as text, got {object} and {privileges}",
                self.name()
            );
        }
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let [.., object, privileges] = args.args.as_slice() else {
            return exec_err!("{} takes a name and privileges", self.name());
        };
        let objects = cast(&object.to_array(rows)?, &DataType::Utf8)?;
        let privileges = cast(&privileges.to_array(rows)?, &DataType::Utf8)?;
        let (objects, privileges) = (objects.as_string::<i32>(), privileges.as_string::<i32>());
        let mut held = BooleanBuilder::with_capacity(rows);
        for row in 0..rows {
            if objects.is_null(row) || privileges.is_null(row) {
                held.append_null();
                continue;
            }
            held.append_value(self.privileges.any(
                &self.object,
                objects.value(row),
                privileges.value(row),
            )?);
        }
        Ok(ColumnarValue::Array(Arc::new(held.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analyst() -> Privileges {
        Privileges {
            database: "demo".to_string(),
            schemas: BTreeMap::from([
                ("demo_lake_v2".to_string(), Writes::default()),
                (
                    "demo_sandbox".to_string(),
                    Writes {
                        create_table: true,
                        insert: true,
                    },
                ),
            ]),
            tables: BTreeSet::from([
                ("demo_lake_v2".to_string(), "trips".to_string()),
                ("demo_sandbox".to_string(), "My Table".to_string()),
            ]),
        }
    }

    #[test]
    fn privileges_follow_the_grants_and_names_read_as_postgres_reads_them() {
        let p = analyst();
        let table = Object::Table(TABLE);
        assert!(p.any(&table, "demo_lake_v2.trips", "select").unwrap());
        assert!(
            !p.any(&table, "\"demo_lake_v2\".\"trips\"", "INSERT")
                .unwrap()
        );
        assert!(
            p.any(&table, "demo_sandbox.\"My Table\"", "insert")
                .unwrap()
        );
        assert!(
            p.any(&table, "demo_lake_v2.trips", "update, select")
                .unwrap()
        );
        assert!(!p.any(&table, "demo_lake_v2.trips", "DELETE").unwrap());
        assert!(
            !p.any(&table, "demo_lake_v2.trips", "SELECT WITH GRANT OPTION")
                .unwrap()
        );
        assert!(p.any(&table, "pg_class", "SELECT").unwrap());
        assert!(!p.any(&table, "pg_catalog.pg_class", "INSERT").unwrap());
        for hidden in ["demo_insights.summary", "trips", "a.b.c", "\"x", ""] {
            assert!(p.any(&table, hidden, "SELECT").is_err(), "{hidden}");
        }
        assert!(p.any(&table, "demo_lake_v2.trips", "OWN").is_err());
        assert!(p.any(&Object::Schema, "demo_sandbox", "CREATE").unwrap());
        assert!(!p.any(&Object::Schema, "demo_lake_v2", "CREATE").unwrap());
        assert!(p.any(&Object::Schema, "public", "USAGE").unwrap());
        assert!(p.any(&Object::Schema, "demo_insights", "USAGE").is_err());
        assert!(p.any(&Object::Database, "demo", "CONNECT").unwrap());
        assert!(!p.any(&Object::Database, "demo", "CREATE").unwrap());
        assert!(p.any(&Object::Database, "other", "CONNECT").is_err());
    }
}
