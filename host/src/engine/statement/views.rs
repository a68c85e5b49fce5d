//! CREATE VIEW's classification: a plain view of one SELECT, optionally OR
//! REPLACE or IF NOT EXISTS. Materialized, temporary and secure views,
//! column lists and view options are refused (a lake view is its SELECT and
//! nothing else; alias the SELECT's columns instead of listing them).

use datafusion::sql::sqlparser::ast::CreateView;

use super::{Action, Classified, StatementError, StatementType, refused, table_name};

pub(super) fn classify_create(create: &CreateView) -> Result<Classified, StatementError> {
    if create.materialized {
        return Err(refused("CREATE MATERIALIZED VIEW"));
    }
    if create.temporary || create.secure || create.or_alter || create.to.is_some() {
        return Err(refused("CREATE TEMPORARY, SECURE, OR ALTER or TO VIEW"));
    }
    if !create.columns.is_empty() {
        return Err(refused("CREATE VIEW with a column list"));
    }
    if create.params.is_some() || create.comment.is_some() || !create.cluster_by.is_empty() {
        return Err(refused("CREATE VIEW with options"));
    }
    Ok(Classified {
        statement_type: StatementType::Ddl,
        action: Action::CreateView {
            view: table_name(&create.name)?,
            query: create.query.to_string(),
            or_replace: create.or_replace,
            if_not_exists: create.if_not_exists,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::{TableName, classify};
    use super::*;

    fn action(sql: &str) -> Action {
        classify(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .action
    }

    fn name(catalog: Option<&str>, database: Option<&str>, table: &str) -> TableName {
        TableName {
            catalog: catalog.map(String::from),
            database: database.map(String::from),
            table: table.into(),
        }
    }

    #[test]
    fn views_are_created_replaced_and_dropped() {
        assert_eq!(
            action(r#"create view "demo"."demo_sandbox"."v__dbt_tmp" as (select 1 as a);"#),
            Action::CreateView {
                view: name(Some("demo"), Some("demo_sandbox"), "v__dbt_tmp"),
                query: "(SELECT 1 AS a)".into(),
                or_replace: false,
                if_not_exists: false,
            }
        );
        assert!(matches!(
            action("CREATE OR REPLACE VIEW v AS SELECT * FROM trips"),
            Action::CreateView { or_replace: true, if_not_exists: false, ref view, .. }
                if *view == name(None, None, "v")
        ));
        assert!(matches!(
            action("CREATE VIEW IF NOT EXISTS demo_sandbox.v AS SELECT 1"),
            Action::CreateView {
                or_replace: false,
                if_not_exists: true,
                ..
            }
        ));
        assert_eq!(
            action(r#"drop view if exists "demo"."demo_sandbox"."v__dbt_backup" cascade"#),
            Action::DropViews {
                views: vec![name(Some("demo"), Some("demo_sandbox"), "v__dbt_backup")],
                if_exists: true,
            }
        );
        let statement_type = classify("DROP VIEW v").unwrap().statement_type;
        assert_eq!(statement_type, StatementType::Ddl);
    }

    #[test]
    fn cascade_is_accepted_and_three_part_names_keep_their_catalog() {
        assert_eq!(
            action(r#"drop table if exists "demo"."demo_sandbox"."m__dbt_backup" cascade"#),
            Action::DropTables {
                tables: vec![name(Some("demo"), Some("demo_sandbox"), "m__dbt_backup")],
                if_exists: true,
            }
        );
        assert!(matches!(
            action(r#"insert into "lab.demo"."lab_sandbox"."t" select 1"#),
            Action::Insert { ref table } if *table == name(Some("lab.demo"), Some("lab_sandbox"), "t")
        ));
        // Whether the catalog is the session's is decided where the session is known.
        assert!(matches!(
            action("ALTER TABLE other.demo_sandbox.v RENAME TO w"),
            Action::AlterTable { ref table, .. } if table.catalog.as_deref() == Some("other")
        ));
    }

    #[test]
    fn only_plain_views_are_made() {
        for sql in [
            "CREATE MATERIALIZED VIEW v AS SELECT 1",
            "CREATE TEMPORARY VIEW v AS SELECT 1",
            "CREATE VIEW v (a) AS SELECT 1",
            "DROP MATERIALIZED VIEW v",
        ] {
            assert!(
                matches!(classify(sql), Err(StatementError::Refused(_))),
                "{sql}: {:?}",
                classify(sql)
            );
        }
        // The view's SELECT meets the same expression limits as any query.
        let deep = format!(
            "CREATE VIEW v AS SELECT {}1{}",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        assert!(classify(&deep).is_err());
    }
}
