"""The catalog queries of SQL tools, sent by the tools themselves, for
tools_catalog.rs: SQLAlchemy 2 reflection on psycopg 3 (and pandas'
``read_sql_table``), SQLAlchemy 1.4 on psycopg2 as Superset reaches a
Postgres URI (its inspector and a time-range filter query), and dbt-postgres'
own relation-listing and catalog macros rendered from the installed package
and run on psycopg2, as dbt runs them.

Usage: catalog_tools.py COMMAND JSON_ARGS; prints one JSON object. Every
command takes ``conn``: libpq keyword arguments (host, port, dbname, user,
password, sslmode, sslrootcert). Each step answers its result or
``{"error": <the server's message>, "sqlstate": <code>}``, never a
traceback, and the next step runs.
"""

import datetime
import decimal
import json
import sys


def cell(value):
    """JSON for a value: numbers stay numbers, everything else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def error_json(error):
    """The server's message and SQLSTATE of a driver's error, or of the one
    SQLAlchemy's (``orig``) or pandas' (its cause) wraps."""
    orig = error
    while getattr(orig, "orig", None) is not None or (
        getattr(orig, "diag", None) is None and orig.__cause__ is not None
    ):
        orig = getattr(orig, "orig", None) or orig.__cause__
    diag = getattr(orig, "diag", None)
    message = getattr(diag, "message_primary", None) or str(orig)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return {"error": message, "sqlstate": sqlstate, "kind": type(error).__name__}


def step(outcome, name, work):
    """``work()``'s answer as ``outcome[name]``, or its error."""
    try:
        outcome[name] = work()
    except Exception as error:  # each step reports, the next one runs
        outcome[name] = error_json(error)


def engine_of(conn, driver):
    import sqlalchemy

    url = sqlalchemy.engine.URL.create(
        f"postgresql+{driver}",
        username=conn["user"],
        password=conn["password"],
        host=conn["host"],
        port=conn["port"],
        database=conn["dbname"],
        query={"sslmode": conn["sslmode"], "sslrootcert": str(conn["sslrootcert"])},
    )
    return sqlalchemy.create_engine(url)


def reflected(inspector, schema, table):
    """What an inspector reflects of ``schema.table`` (the calls Superset's
    table metadata and SQLAlchemy's ``Table(autoload_with=)`` make)."""
    outcome = {}
    step(
        outcome,
        "columns",
        lambda: [
            {"name": c["name"], "type": str(c["type"]), "nullable": c["nullable"]}
            for c in inspector.get_columns(table, schema=schema)
        ],
    )
    step(outcome, "pk", lambda: inspector.get_pk_constraint(table, schema=schema))
    step(outcome, "foreign_keys", lambda: inspector.get_foreign_keys(table, schema=schema))
    step(outcome, "indexes", lambda: inspector.get_indexes(table, schema=schema))
    step(
        outcome,
        "unique_constraints",
        lambda: inspector.get_unique_constraints(table, schema=schema),
    )
    step(outcome, "tables", lambda: inspector.get_table_names(schema=schema))
    step(outcome, "views", lambda: inspector.get_view_names(schema=schema))
    return outcome


def sqlalchemy2(args):
    """SQLAlchemy 2 on psycopg 3: ``Table(..., autoload_with=engine)`` of
    ``schema.table`` (its columns, primary key, indexes and unique
    constraints), the inspector, and ``pandas.read_sql_table``."""
    import pandas
    import sqlalchemy

    schema, table = args["schema"], args["table"]
    engine = engine_of(args["conn"], "psycopg")
    outcome = {}
    try:

        def autoload():
            t = sqlalchemy.Table(table, sqlalchemy.MetaData(), schema=schema, autoload_with=engine)
            return {
                "columns": [c.name for c in t.columns],
                "primary_key": [c.name for c in t.primary_key.columns],
                "indexes": sorted(i.name for i in t.indexes),
                "unique_constraints": sorted(
                    str(c.name)
                    for c in t.constraints
                    if isinstance(c, sqlalchemy.UniqueConstraint)
                ),
            }

        step(outcome, "autoload", autoload)
        with engine.connect() as connection:
            outcome["inspector"] = reflected(sqlalchemy.inspect(connection), schema, table)

        def read_table():
            frame = pandas.read_sql_table(table, engine, schema=schema)
            return {"columns": list(frame.columns), "rows": len(frame)}

        step(outcome, "read_sql_table", read_table)
    finally:
        engine.dispose()
    return outcome


def superset(args):
    """SQLAlchemy 1.4 on psycopg2, as Superset 6.1 reaches a Postgres URI:
    the inspector's table metadata of ``schema.table``, then ``sql`` (a
    chart's query with a time-range filter) and its rows."""
    import sqlalchemy

    engine = engine_of(args["conn"], "psycopg2")
    outcome = {"sqlalchemy": sqlalchemy.__version__}
    try:
        with engine.connect() as connection:
            outcome["inspector"] = reflected(
                sqlalchemy.inspect(connection), args["schema"], args["table"]
            )

            def query():
                result = connection.execute(sqlalchemy.text(args["sql"]))
                return [[cell(v) for v in row] for row in result]

            step(outcome, "rows", query)
    finally:
        engine.dispose()
    return outcome


def dbt_macro_sql(macro, call, context):
    """The SQL dbt-postgres' installed ``macro`` (adapters.sql's or
    catalog.sql's) sends, rendered with jinja as dbt renders it: the body of
    its ``statement`` call, with ``context``'s relations."""
    import os

    import jinja2
    from dbt.include import postgres

    macros = os.path.join(os.path.dirname(postgres.__file__), "macros")
    source = ""
    for name in ("adapters.sql", "catalog.sql"):
        with open(os.path.join(macros, name)) as f:
            source += f.read()
    sent = []

    def statement(name, fetch_result=False, auto_begin=True, caller=None):
        sent.append(caller())
        return ""

    class Adapter:
        @staticmethod
        def verify_database(database):
            return ""

    class Result:
        table = None

    env = jinja2.Environment(extensions=["jinja2.ext.do"])
    env.globals.update(
        statement=statement,
        adapter=Adapter(),
        load_result=lambda name: Result(),
        exceptions=None,
    )
    env.globals["return"] = lambda value: ""
    env.from_string(source + "{{ " + call + " }}").render(**context)
    [sql] = [s for s in sent if macro in call]
    return sql


class Relation:
    """What dbt's macros read of a relation."""

    def __init__(self, database, schema, identifier=None):
        self.database, self.schema, self.identifier = database, schema, identifier


def dbt(args):
    """dbt-postgres' ``postgres__list_relations_without_caching`` of
    ``schema`` and ``postgres__get_catalog`` of it, rendered from the
    installed macros and run on psycopg2 (dbt's driver)."""
    import psycopg2

    database, schema = args["conn"]["dbname"], args["schema"]
    queries = {
        "relations": dbt_macro_sql(
            "list_relations",
            "postgres__list_relations_without_caching(schema_relation)",
            {"schema_relation": Relation(database, schema)},
        ),
        "catalog": dbt_macro_sql(
            "get_catalog",
            "postgres__get_catalog(information_schema, schemas)",
            {"information_schema": Relation(database, "information_schema"), "schemas": [schema]},
        ),
    }
    outcome = {}
    try:
        connection = psycopg2.connect(**args["conn"])
    except psycopg2.Error as error:
        return {"connect": error_json(error)}
    try:
        for name, sql in queries.items():
            try:
                with connection.cursor() as cursor:
                    cursor.execute(sql)
                    columns = [d[0] for d in cursor.description]
                    rows = [[cell(v) for v in row] for row in cursor.fetchall()]
                    outcome[name] = {"columns": columns, "rows": rows}
            except psycopg2.Error as error:
                outcome[name] = error_json(error)
            connection.rollback()
    finally:
        connection.close()
    return outcome


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    commands = {"sqlalchemy2": sqlalchemy2, "superset": superset, "dbt": dbt}
    print(json.dumps(commands[command](args), default=cell))


if __name__ == "__main__":
    main()
