"""Postgres clients for pg_wire.rs: psycopg 3 (libpq underneath, as most
Python tools reach Postgres servers), and SQLAlchemy 2 on it.

Usage: pg_client.py COMMAND JSON_ARGS; prints one JSON object.

Every command takes ``conn``: psycopg.connect keyword arguments (host, port,
dbname, user, password, sslmode, sslrootcert, ...). A refused connection or
statement prints ``{"error": <the server's message>, "sqlstate": <code>}``,
never a traceback.
"""

import datetime
import decimal
import json
import os
import sys
import time


def cell(value):
    """JSON for a value: numbers stay numbers (NaN and the infinities, which
    JSON has not, as their text), everything else its text."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def typed(value):
    """A parameter from JSON: ``{"date": "2026-01-10"}``, ``{"timestamp":
    ISO}`` (with an offset: aware), ``{"decimal": "1.50"}``, ``{"float":
    "nan"}``, ``{"interval": seconds}`` become the Python values psycopg binds (dates, timestamps and
    decimals in binary with ``%b``); lists item by item."""
    if isinstance(value, list):
        return [typed(v) for v in value]
    if not isinstance(value, dict):
        return value
    (kind, text), = value.items()
    return {
        "date": datetime.date.fromisoformat,
        "timestamp": datetime.datetime.fromisoformat,
        "decimal": decimal.Decimal,
        "float": float,
        "interval": lambda seconds: datetime.timedelta(seconds=float(seconds)),
    }[kind](text)


def error_json(error):
    diag = getattr(error, "diag", None)
    message = diag.message_primary if diag is not None and diag.message_primary else str(error)
    return {
        "error": message,
        "sqlstate": getattr(error, "sqlstate", None),
        "severity": diag.severity if diag is not None else None,
    }


def run(args):
    """Runs ``statements`` ({"sql", "params"? (see ``typed``), "binary"?,
    "count_rows"?}, or
    {"sql", "raw_params"}: see ``raw_exec_params``) on one connection,
    in order; each gives its columns and rows, or its error (the transaction
    is then rolled back and the next statement runs). A ``{"wait_for_file":
    path}`` entry pauses the session until the test creates ``path``.
    ``autocommit`` as psycopg's (default false: psycopg sends BEGIN first, as
    most apps do)."""
    import psycopg

    try:
        conn = psycopg.connect(autocommit=args.get("autocommit", False), **args["conn"])
    except psycopg.Error as error:
        return {"connect": error_json(error)}
    results = []
    try:
        run_statements(conn, args["statements"], results)
    finally:
        if not conn.closed:
            conn.close()
    return {"results": results}


def run_statements(conn, statements, results):
    import psycopg

    for statement in statements:
        if "wait_for_file" in statement:
            # A pause mid-session: says so in <file>.ready, then waits (at
            # most 60 s) for the test to create <file>.
            path = statement["wait_for_file"]
            open(path + ".ready", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.05)
            continue
        if "raw_params" in statement:
            results.append(raw_exec_params(conn, statement["sql"], statement["raw_params"]))
            continue
        try:
            with conn.cursor(binary=statement.get("binary", False)) as cursor:
                cursor.execute(statement["sql"], typed(statement.get("params")))
                if cursor.description is None:
                    results.append({"status": cursor.statusmessage})
                elif statement.get("count_rows"):
                    # Only how many rows came, for results too large to print.
                    results.append({"row_count": sum(1 for _ in cursor), "status": cursor.statusmessage})
                else:
                    results.append(
                        {
                            "columns": [column.name for column in cursor.description],
                            "types": [column.type_code for column in cursor.description],
                            "rows": [[cell(v) for v in row] for row in cursor.fetchall()],
                            "status": cursor.statusmessage,
                        }
                    )
        except psycopg.Error as error:
            results.append(error_json(error))
            if conn.closed:
                # The server closed the session (an idle timeout).
                break
            conn.rollback()


def raw_exec_params(conn, sql, params):
    """libpq's PQexecParams as it is: Parse, then Bind with ``params`` (text)
    whatever the statement takes (psycopg's cursors check the count first).
    The rows as text (NULL as null), or the error."""
    from psycopg import pq

    result = conn.pgconn.exec_params(sql.encode(), [p.encode() for p in params])
    if result.status == pq.ExecStatus.TUPLES_OK:
        values = ((result.get_value(r, c) for c in range(result.nfields))
                  for r in range(result.ntuples))
        rows = [[None if v is None else v.decode() for v in row] for row in values]
        return {"rows": rows}
    field = result.error_field
    return {
        "error": (field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode(),
        "sqlstate": (field(pq.DiagnosticField.SQLSTATE) or b"").decode(),
        "status": pq.ExecStatus(result.status).name,
    }


def cancel(args):
    """Runs ``sql`` in a thread and, once the server has taken it (after
    ``after_s``), cancels it with psycopg's ``cancel_safe`` (a cancel request
    on a new connection); then the statement's error and the session's last
    query id."""
    import threading

    import psycopg

    conn = psycopg.connect(autocommit=True, **args["conn"])
    outcome = {}

    def execute():
        try:
            with conn.cursor() as cursor:
                cursor.execute(args["sql"])
                outcome["rows"] = [[cell(v) for v in row] for row in cursor.fetchall()]
        except psycopg.Error as error:
            outcome.update(error_json(error))

    worker = threading.Thread(target=execute)
    worker.start()
    time.sleep(args.get("after_s", 1.0))
    try:
        conn.cancel_safe(timeout=10)
    except psycopg.Error as error:
        outcome["cancel_error"] = error_json(error)
    worker.join(timeout=60)
    outcome["finished"] = not worker.is_alive()
    if worker.is_alive():
        return outcome
    with conn.cursor() as cursor:
        cursor.execute("SHOW lakehost.last_query_id")
        outcome["query_id"] = cursor.fetchone()[0]
    conn.close()
    return outcome


def sqlalchemy_inspect(args):
    """SQLAlchemy 2 on psycopg, as pandas' ``read_sql`` and most Python
    apps use it: connect (the dialect's own queries on connect), run
    ``sql``, then the inspector's listings: schemas, the tables of
    ``schema``, and the columns of ``table`` in it. An error at any step
    prints where it happened and the server's message."""
    import sqlalchemy

    conn = args["conn"]
    url = sqlalchemy.engine.URL.create(
        "postgresql+psycopg",
        username=conn["user"],
        password=conn["password"],
        host=conn["host"],
        port=conn["port"],
        database=conn["dbname"],
        query={"sslmode": conn["sslmode"], "sslrootcert": str(conn["sslrootcert"])},
    )
    engine = sqlalchemy.create_engine(url)
    outcome = {}
    step = "connect"
    try:
        with engine.connect() as connection:
            step = "query"
            result = connection.execute(sqlalchemy.text(args["sql"]))
            outcome["rows"] = [[cell(v) for v in row] for row in result]
            inspector = sqlalchemy.inspect(connection)
            step = "schemas"
            outcome["schemas"] = inspector.get_schema_names()
            step = "tables"
            outcome["tables"] = inspector.get_table_names(schema=args["schema"])
            step = "columns"
            outcome["columns"] = [
                {"name": column["name"], "type": str(column["type"]), "nullable": column["nullable"]}
                for column in inspector.get_columns(args["table"], schema=args["schema"])
            ]
    except sqlalchemy.exc.DBAPIError as error:
        outcome["error"] = {"step": step, **error_json(error.orig)}
    except sqlalchemy.exc.NoSuchTableError as error:
        outcome["error"] = {"step": step, "error": f"no such table: {error}"}
    finally:
        engine.dispose()
    return outcome


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    commands = {"run": run, "cancel": cancel, "sqlalchemy": sqlalchemy_inspect}
    print(json.dumps(commands[command](args)))


if __name__ == "__main__":
    main()
