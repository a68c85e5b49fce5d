"""Superset's Arrow Flight SQL client for flight_sql.rs: flightsql-dbapi's
DB-API and its SQLAlchemy 1.4 dialect (``datafusion+flightsql://``), the
driver Superset names for Flight SQL databases. It lives in a venv of its
own (tests/python/requirements-superset.txt: the dialect needs SQLAlchemy
below 2, as Superset does), which ``.ci/python`` makes.

Usage: superset_client.py COMMAND JSON_ARGS; prints one JSON object.

``superset`` takes ``host``, ``port`` and either ``token`` (a bearer token)
or ``username`` and ``password`` (a client id and secret, exchanged in the
Flight handshake), plus ``headers`` (call metadata such as
``x-lakehost-zone``). As Superset does when a database is added and a chart
runs, it connects (the dialect asks GetSqlInfo), lists schemas, the tables
of ``schema`` and the columns of ``table``, and runs ``sql``. An error at any
step prints the step and the server's message, never a traceback.
"""

import json
import sys


def cell(value):
    """JSON for a value: numbers stay numbers, everything else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def engine_of(args):
    import flightsql.sqlalchemy  # noqa: F401  registers datafusion+flightsql
    import sqlalchemy

    query = {"insecure": "true", **args.get("headers", {})}
    if "token" in args:
        query["token"] = args["token"]
    url = sqlalchemy.engine.URL.create(
        "datafusion+flightsql",
        username=args.get("username"),
        password=args.get("password"),
        host=args["host"],
        port=args["port"],
        query=query,
    )
    return sqlalchemy.create_engine(url)


def superset(args):
    import sqlalchemy

    engine = None
    outcome = {}
    step = "connect"
    try:
        # The dialect authenticates (the Flight handshake) as it makes the
        # engine, then asks GetSqlInfo on connect.
        engine = engine_of(args)
        with engine.connect() as connection:
            inspector = sqlalchemy.inspect(connection)
            step = "schemas"
            outcome["schemas"] = sorted(inspector.get_schema_names())
            if "schema" in args:
                step = "tables"
                outcome["tables"] = sorted(inspector.get_table_names(schema=args["schema"]))
            if "table" in args:
                step = "columns"
                outcome["columns"] = [
                    {"name": column["name"], "type": str(column["type"])}
                    for column in inspector.get_columns(args["table"], schema=args["schema"])
                ]
            if "sql" in args:
                step = "query"
                result = connection.execute(sqlalchemy.text(args["sql"]))
                outcome["rows"] = [[cell(v) for v in row] for row in result]
    except Exception as error:  # the dialect raises pyarrow's Flight errors as they come
        outcome["error"] = {"step": step, "error": str(error), "code": type(error).__name__}
    finally:
        if engine is not None:
            engine.dispose()
    return outcome


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    commands = {"superset": superset}
    print(json.dumps(commands[command](args)))


if __name__ == "__main__":
    main()
