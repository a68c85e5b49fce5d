"""One ADBC Flight SQL session (a client id and secret, exchanged in the
handshake) running statements in order, for flight_session.rs (issue 48):
a ``{"wait_for_file": path}`` entry pauses the session until the test
creates ``path`` (it writes ``path.ready`` first), so the test can move the
server's clock past the handshake token's lifetime meanwhile.

Usage: flight_session_client.py run JSON_ARGS, where JSON_ARGS are
flight_client.py's connection arguments (``uri``, ``username``,
``password``, ``headers``) and ``statements`` ({"sql"} or
{"wait_for_file"}); prints ``{"results": [...]}``, each statement's rows
or ``{"error", "code"}``.
"""

import json
import os
import sys
import time

from flight_client import adbc_connect, adbc_error, table_json


def run(args):
    import adbc_driver_manager

    results = []
    try:
        conn = adbc_connect(args)
    except adbc_driver_manager.Error as error:
        return {"connect": adbc_error(error)}
    with conn:
        for statement in args["statements"]:
            if "wait_for_file" in statement:
                path = statement["wait_for_file"]
                open(path + ".ready", "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(path) and time.monotonic() < deadline:
                    time.sleep(0.05)
                continue
            try:
                with conn.cursor() as cursor:
                    cursor.execute(statement["sql"])
                    results.append(table_json(cursor.fetch_arrow_table()))
            except adbc_driver_manager.Error as error:
                results.append(adbc_error(error))
    return {"results": results}


def main():
    command, raw = sys.argv[1], sys.argv[2]
    print(json.dumps({"run": run}[command](json.loads(raw))))


if __name__ == "__main__":
    main()
