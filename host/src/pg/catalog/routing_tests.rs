//! Which statements are catalog queries (`is_catalog_query`).

use super::*;

#[test]
fn catalog_relations_and_functions_route_here_and_lake_statements_do_not() {
    assert!(is_catalog_query("select 1 from PG_CATALOG.pg_type"));
    assert!(is_catalog_query("SELECT typname FROM pg_type"));
    assert!(is_catalog_query(
        "SELECT table_name FROM information_schema.tables"
    ));
    assert!(is_catalog_query("select current_schema()"));
    assert!(is_catalog_query("SELECT to_regtype('hstore')"));
    assert!(is_catalog_query(
        "SELECT c.relname FROM pg_catalog.pg_class c JOIN demo_lake_v2.trips t ON true"
    ));
    assert!(!is_catalog_query("SELECT 'pg_catalog.pg_class' AS word"));
    assert!(!is_catalog_query("SELECT 1 -- FROM pg_catalog.pg_class"));
    assert!(!is_catalog_query("SELECT count(*) FROM demo_lake_v2.trips"));
    assert!(!is_catalog_query(
        "SELECT current_schema() FROM demo_lake_v2.trips"
    ));
    assert!(!is_catalog_query("SELECT 1"));
    assert!(!is_catalog_query("not sql at all"));
    assert!(is_catalog_query("DROP TABLE information_schema.tables"));
    assert!(is_catalog_query(PSQL_POLICIES));
    assert!(parse(PSQL_POLICIES).is_ok());
}

/// The fourth query of psql 15's `\d table`.
const PSQL_POLICIES: &str = "SELECT pol.polname, pol.polpermissive,
  CASE WHEN pol.polroles = '{0}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,
  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),
  CASE pol.polcmd
WHEN 'r' THEN 'SELECT'
WHEN 'a' THEN 'INSERT'
WHEN 'w' THEN 'UPDATE'
WHEN 'd' THEN 'DELETE'
END AS cmd
FROM pg_catalog.pg_policy pol
WHERE pol.polrelid = '16388' ORDER BY 1;";
