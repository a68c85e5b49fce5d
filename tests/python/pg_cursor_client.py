"""psycopg 3's server-side (named) cursors and COPY TO STDOUT, for
pg_wire/cursors.rs (issue 48).

Usage: pg_cursor_client.py COMMAND JSON_ARGS; prints one JSON object.

Commands (each takes ``conn``: psycopg.connect keyword arguments):

- ``named``: ``{"sql", "step", "stop_after"?}``: a named cursor (psycopg
  sends DECLARE ... CURSOR WITHOUT HOLD FOR, then FETCH FORWARD ``step``
  FROM it) read with ``fetchmany(step)`` until it is empty, or closed after
  ``stop_after`` fetches; then the transaction is committed. Gives the
  query id of the DECLARE (``SHOW lakehost.last_query_id``) and each
  fetch's rows.
- ``copy``: ``{"sql"}``: ``cursor.copy(sql)`` (a COPY ... TO STDOUT), the
  text it wrote.

A refused statement gives ``{"error", "sqlstate", "stage"}``, never a
traceback.
"""

import json
import sys

from pg_client import cell, error_json


def named(args):
    import psycopg

    try:
        conn = psycopg.connect(**args["conn"])
    except psycopg.Error as error:
        return {"connect": error_json(error)}
    stage = "declare"
    try:
        cursor = conn.cursor("lakehost_rows")
        cursor.execute(args["sql"])
        stage = "show"
        with conn.cursor() as show:
            show.execute("SHOW lakehost.last_query_id")
            query_id = show.fetchone()[0]
        stage = "fetch"
        fetches = []
        while args.get("stop_after") is None or len(fetches) < args["stop_after"]:
            rows = cursor.fetchmany(args["step"])
            if not rows:
                break
            fetches.append([[cell(v) for v in row] for row in rows])
        stage = "close"
        cursor.close()
        conn.commit()
        return {"query_id": query_id, "fetches": fetches}
    except psycopg.Error as error:
        return dict(error_json(error), stage=stage)
    finally:
        conn.close()


def copy(args):
    import psycopg

    try:
        conn = psycopg.connect(autocommit=True, **args["conn"])
    except psycopg.Error as error:
        return {"connect": error_json(error)}
    try:
        with conn.cursor() as cursor:
            data = bytearray()
            with cursor.copy(args["sql"]) as copying:
                for chunk in copying:
                    data += chunk
            return {"data": data.decode(), "status": cursor.statusmessage}
    except psycopg.Error as error:
        return dict(error_json(error), stage="copy")
    finally:
        conn.close()


def main():
    command, raw = sys.argv[1], sys.argv[2]
    commands = {"named": named, "copy": copy}
    print(json.dumps(commands[command](json.loads(raw))))


if __name__ == "__main__":
    main()
