"""Arrow Flight SQL clients for flight_sql.rs: ADBC's Flight SQL driver (the
DB-API most Python tools use) and pyarrow.flight's raw calls.

Usage: flight_client.py COMMAND JSON_ARGS; prints one JSON object.

Every command takes ``uri`` (``grpc://host:port``) and, to authenticate,
either ``token`` (sent as ``authorization: Bearer``) or ``username`` and
``password`` (a client id and secret, exchanged in the handshake); ``headers``
are extra call metadata (``x-lakehost-org``, ``x-lakehost-zone``);
``tls_root_certs`` (PEM) trusts a ``grpc+tls://`` server's certificate. A refused
call prints ``{"error": <the server's message>, "code": <the ADBC status or
Flight error class>}``, never a traceback.
"""

import json
import math
import sys


def adbc_connect(args):
    from adbc_driver_flightsql import DatabaseOptions
    import adbc_driver_flightsql.dbapi as flight_sql

    options = {}
    if "token" in args:
        options[DatabaseOptions.AUTHORIZATION_HEADER.value] = "Bearer " + args["token"]
    if "username" in args:
        options["username"] = args["username"]
        options["password"] = args["password"]
    for name, value in args.get("headers", {}).items():
        options[DatabaseOptions.RPC_CALL_HEADER_PREFIX.value + name] = value
    if "tls_root_certs" in args:
        options[DatabaseOptions.TLS_ROOT_CERTS.value] = args["tls_root_certs"]
    return flight_sql.connect(args["uri"], db_kwargs=options)


def cell(value):
    """JSON for a value: numbers stay numbers (NaN and the infinities, which
    JSON has not, as their text), everything else its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def typed(value):
    """A parameter from JSON: ``{"date": "2026-01-10"}``, ``{"timestamp":
    ISO}``, ``{"decimal": "1.50"}``, ``{"float": "nan"}`` become the Python
    values a tool binds; lists item by item; anything else as it is."""
    import datetime
    import decimal

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
    }[kind](text)


def table_json(table):
    return {
        "columns": table.column_names,
        "types": [str(field.type) for field in table.schema],
        "rows": [[cell(v) for v in row.values()] for row in table.to_pylist()],
    }


def adbc_error(error):
    return {"error": str(error), "code": type(error).__name__}


def adbc_query(args):
    """One statement through ADBC: its rows, typed."""
    import adbc_driver_manager

    try:
        with adbc_connect(args) as conn, conn.cursor() as cursor:
            cursor.execute(args["sql"])
            return table_json(cursor.fetch_arrow_table())
    except adbc_driver_manager.Error as error:
        return adbc_error(error)


def adbc_prepared(args):
    """A prepared statement through ADBC: prepared (the server checks and
    plans it), then executed, with ``params`` bound if given (DBAPI's
    ``execute(sql, params)``, ``?`` placeholders); its rows."""
    import adbc_driver_manager

    try:
        with adbc_connect(args) as conn, conn.cursor() as cursor:
            cursor.adbc_prepare(args["sql"])
            cursor.execute(args["sql"], args.get("params"))
            return table_json(cursor.fetch_arrow_table())
    except adbc_driver_manager.Error as error:
        return adbc_error(error)


def adbc_rebind(args):
    """One prepared statement ``sql`` executed once per entry of
    ``executions`` (its parameter values, see ``typed``) on one cursor, as
    DB-API code re-runs a query with new values: each execution's rows, or
    its error."""
    import adbc_driver_manager

    results = []
    with adbc_connect(args) as conn, conn.cursor() as cursor:
        for params in args["executions"]:
            try:
                cursor.execute(args["sql"], typed(params))
                results.append(table_json(cursor.fetch_arrow_table()))
            except adbc_driver_manager.Error as error:
                results.append(adbc_error(error))
    return {"results": results}


def adbc_many(args):
    """``statements`` run first (each executed and read), then ``sql`` with
    many rows of parameters (``rows``, see ``typed``): ``how`` is
    ``executemany`` (DB-API's) or ``execute`` (the rows bound as one Arrow
    table to one execution). The rows the last call read or its row count,
    or the error of the first call that failed."""
    import adbc_driver_manager
    import pyarrow as pa

    answer = {}
    try:
        with adbc_connect(args) as conn, conn.cursor() as cursor:
            for sql in args.get("statements", []):
                cursor.execute(sql)
                cursor.fetch_arrow_table()
            rows = [typed(row) for row in args["rows"]]
            if args["how"] == "executemany":
                cursor.executemany(args["sql"], rows)
                answer["rowcount"] = cursor.rowcount
            else:
                columns = list(zip(*rows))
                table = pa.table({f"p{i}": pa.array(list(c)) for i, c in enumerate(columns)})
                cursor.execute(args["sql"], table)
                answer.update(table_json(cursor.fetch_arrow_table()))
            conn.commit()
    except adbc_driver_manager.Error as error:
        answer.update(adbc_error(error))
    return answer


def adbc_objects(args):
    """ADBC's catalog listing (GetCatalogs, GetDbSchemas, GetTables)."""
    import adbc_driver_manager

    try:
        with adbc_connect(args) as conn:
            objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    except adbc_driver_manager.Error as error:
        return adbc_error(error)
    tables = []
    for catalog in objects:
        for schema in catalog["catalog_db_schemas"] or []:
            for table in schema["db_schema_tables"] or []:
                tables.append(
                    [catalog["catalog_name"], schema["db_schema_name"], table["table_name"]]
                )
    schemas = sorted(
        {(c["catalog_name"], s["db_schema_name"]) for c in objects for s in c["catalog_db_schemas"] or []}
    )
    return {"schemas": [list(s) for s in schemas], "tables": sorted(tables)}


def varint(n):
    n &= 0xFFFFFFFFFFFFFFFF  # a negative int32 is sent as its 64-bit two's complement
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def statement_command(sql):
    """google.protobuf.Any of arrow.flight.protocol.sql.CommandStatementQuery."""
    command = field(1, sql.encode())
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return field(1, type_url) + field(2, command)


def raw_statement(args):
    """GetFlightInfo then DoGet with pyarrow.flight: the query id the server
    names in app_metadata, the schema it announced and the rows it sent.
    ``do_get_token``: the DoGet is another caller's; ``again``: the same
    ticket is fetched a second time."""
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    headers = [(k.encode(), v.encode()) for k, v in args.get("headers", {}).items()]
    if "token" in args:
        headers.append((b"authorization", ("Bearer " + args["token"]).encode()))
    if "username" in args:
        name, value = client.authenticate_basic_token(args["username"], args["password"])
        headers.append((name, value))
    options = flight.FlightCallOptions(headers=headers)
    try:
        descriptor = flight.FlightDescriptor.for_command(statement_command(args["sql"]))
        info = client.get_flight_info(descriptor, options)
        answer = {
            "app_metadata": json.loads(info.app_metadata or b"{}"),
            "announced": [str(f.type) for f in info.schema],
            "endpoints": len(info.endpoints),
        }
    except flight.FlightError as error:
        return {"error": str(error), "code": type(error).__name__}
    if "do_get_token" in args:
        # The ticket presented by another caller.
        options = flight.FlightCallOptions(
            headers=[(b"authorization", ("Bearer " + args["do_get_token"]).encode())]
        )
    try:
        reader = client.do_get(info.endpoints[0].ticket, options)
        answer.update(table_json(reader.read_all()))
    except flight.FlightError as error:
        answer.update({"error": str(error), "code": type(error).__name__})
        return answer
    if args.get("again"):
        # The same ticket a second time.
        try:
            client.do_get(info.endpoints[0].ticket, options).read_all()
            answer["again"] = "rows"
        except Exception as error:  # pyarrow maps some gRPC codes to its own errors
            answer["again"] = {"error": str(error), "code": type(error).__name__}
    return answer


def raw_bind(args):
    """DoPut of parameter values to prepared statement ``sql`` (pyarrow.flight
    raw calls): ``batches`` is a list of row lists, each sent as one record
    batch of ``types`` (pyarrow type names; ``null`` for a column of nulls);
    none sends only the schema. Then the new handle the server answered
    with is executed (GetFlightInfo of it, DoGet): its rows, or the first
    refusal."""
    import pyarrow as pa
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    options = flight.FlightCallOptions(
        headers=[(b"authorization", ("Bearer " + args["token"]).encode())]
    )
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandPreparedStatementQuery"
    command = field(1, type_url) + field(2, field(1, args["sql"].encode()))
    descriptor = flight.FlightDescriptor.for_command(command)
    types = [getattr(pa, name)() for name in args["types"]]
    schema = pa.schema([(f"p{i}", t) for i, t in enumerate(types)])
    try:
        writer, reader = client.do_put(descriptor, schema, options)
        for rows in args["batches"]:
            columns = [pa.array([row[i] for row in rows], type=t) for i, t in enumerate(types)]
            writer.write_batch(pa.record_batch(columns, schema=schema))
        writer.done_writing()
        answer = reader.read()
        writer.close()
    except Exception as error:  # pyarrow maps some gRPC codes to its own errors
        return {"error": str(error), "code": type(error).__name__}
    # DoPutPreparedStatementResult { prepared_statement_handle (1): bytes }
    handle = read_bytes_field(answer.to_pybytes())
    command = field(1, type_url) + field(2, field(1, handle))
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
        return table_json(client.do_get(info.endpoints[0].ticket, options).read_all())
    except Exception as error:  # pyarrow maps some gRPC codes to its own errors
        return {"error": str(error), "code": type(error).__name__}


def read_bytes_field(message):
    """The bytes of a message's one length-delimited field."""
    at, length, shift = 1, 0, 0
    while True:
        byte = message[at]
        at += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return message[at : at + length]


def raw_stream(args):
    """GetFlightInfo then DoGet of ``sql``, reading batch by batch: the rows
    read before the stream ended and how it ended. With ``leave_after``, the
    client stops reading after that many batches and closes the call."""
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    options = flight.FlightCallOptions(
        headers=[(b"authorization", ("Bearer " + args["token"]).encode())]
    )
    descriptor = flight.FlightDescriptor.for_command(statement_command(args["sql"]))
    info = client.get_flight_info(descriptor, options)
    answer = {"queryId": json.loads(info.app_metadata)["queryId"], "rows": 0, "batches": 0}
    reader = client.do_get(info.endpoints[0].ticket, options)
    try:
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                answer["end"] = "complete"
                break
            answer["rows"] += chunk.data.num_rows
            answer["batches"] += 1
            if args.get("leave_after") and answer["batches"] >= args["leave_after"]:
                reader.cancel()
                answer["end"] = "left"
                break
    except flight.FlightError as error:
        answer["end"] = {"error": str(error), "code": type(error).__name__}
    client.close()
    return answer


def raw_cancel_while_streaming(args):
    """GetFlightInfo then DoGet of ``sql`` on a thread; once REST (``rest``,
    with ``host`` as the Host header) shows the query RUNNING, the
    CancelFlightInfo action with that info: the state seen, the action's
    answer and how the DoGet ended."""
    import threading
    import time
    import urllib.error
    import urllib.request

    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    headers = [(b"authorization", ("Bearer " + args["token"]).encode())]
    options = flight.FlightCallOptions(headers=headers)
    descriptor = flight.FlightDescriptor.for_command(statement_command(args["sql"]))
    info = client.get_flight_info(descriptor, options)
    query_id = json.loads(info.app_metadata)["queryId"]
    answer = {"queryId": query_id}

    def fetch():
        # Chunk by chunk: read_all treats a cancelled call as Ctrl-C.
        try:
            reader = client.do_get(info.endpoints[0].ticket, options)
            while True:
                reader.read_chunk()
        except StopIteration:
            answer["do_get"] = "rows"
        except flight.FlightError as error:
            answer["do_get"] = {"error": str(error), "code": type(error).__name__}

    fetching = threading.Thread(target=fetch)
    fetching.start()
    request = urllib.request.Request(
        args["rest"] + "/v2/query/" + query_id,
        headers={"Host": args["host"], "Authorization": "Bearer " + args["token"]},
    )
    deadline = time.monotonic() + 60
    answer["seen"] = None
    while time.monotonic() < deadline and answer["seen"] != "RUNNING":
        try:
            with urllib.request.urlopen(request) as response:
                answer["seen"] = json.load(response)["status"]["state"]
        except urllib.error.HTTPError as error:
            answer["seen"] = error.code
        time.sleep(0.05)
    results = client.do_action(flight.Action("CancelFlightInfo", field(1, info.serialize())), options)
    answer["cancel"] = [r.body.to_pybytes().hex() for r in results]
    fetching.join(60)
    return answer


def raw_cancel(args):
    """GetFlightInfo of a statement, then the CancelFlightInfo action with
    that info (pyarrow.flight raw calls): the action's answer, and what a
    DoGet of the ticket gets afterwards."""
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    headers = [(b"authorization", ("Bearer " + args["token"]).encode())]
    options = flight.FlightCallOptions(headers=headers)
    try:
        descriptor = flight.FlightDescriptor.for_command(statement_command(args["sql"]))
        info = client.get_flight_info(descriptor, options)
        query_id = json.loads(info.app_metadata)["queryId"]
        request = field(1, info.serialize())
        results = list(client.do_action(flight.Action("CancelFlightInfo", request), options))
        answer = {"queryId": query_id, "cancel": [r.body.to_pybytes().hex() for r in results]}
    except flight.FlightError as error:
        return {"error": str(error), "code": type(error).__name__}
    try:
        client.do_get(info.endpoints[0].ticket, options).read_all()
        answer["do_get"] = "rows"
    except flight.FlightError as error:
        answer["do_get"] = {"error": str(error), "code": type(error).__name__}
    return answer


def raw_type_info(args):
    """GetFlightInfo then DoGet of CommandGetXdbcTypeInfo (pyarrow.flight
    raw calls, as JDBC's getTypeInfo asks), for one ``data_type`` or all:
    the rows' type names, data types and literal prefixes."""
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    headers = []
    if "token" in args:
        headers.append((b"authorization", ("Bearer " + args["token"]).encode()))
    options = flight.FlightCallOptions(headers=headers)
    command = b""
    if "data_type" in args:
        command = varint(1 << 3) + varint(args["data_type"])
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandGetXdbcTypeInfo"
    descriptor = flight.FlightDescriptor.for_command(field(1, type_url) + field(2, command))
    try:
        info = client.get_flight_info(descriptor, options)
        table = client.do_get(info.endpoints[0].ticket, options).read_all()
    except flight.FlightError as error:
        return {"error": str(error), "code": type(error).__name__}
    return {
        "types": [
            [row["type_name"], row["data_type"], row["literal_prefix"]]
            for row in table.to_pylist()
        ]
    }


def ticket_of(query_id):
    """The ticket lakehost answers a statement with: Any of
    TicketStatementQuery { statement_handle: <query id> }."""
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.TicketStatementQuery"
    return field(1, type_url) + field(2, field(1, query_id.encode()))


def raw_query_calls(args):
    """DoGet of query ``query_id``'s ticket, and CancelFlightInfo of an info
    naming it (pyarrow.flight raw calls), with ``token``: what each got."""
    import pyarrow.flight as flight

    client = flight.FlightClient(args["uri"])
    options = flight.FlightCallOptions(
        headers=[(b"authorization", ("Bearer " + args["token"]).encode())]
    )
    ticket = ticket_of(args["query_id"])
    answer = {}
    try:
        client.do_get(flight.Ticket(ticket), options).read_all()
        answer["do_get"] = "rows"
    except Exception as error:  # pyarrow maps some gRPC codes to its own errors
        answer["do_get"] = {"error": str(error), "code": type(error).__name__}
    if args.get("cancel"):
        # FlightInfo { endpoint: [FlightEndpoint { ticket: Ticket { ticket } }] }
        info = field(3, field(1, field(1, ticket)))
        try:
            results = client.do_action(flight.Action("CancelFlightInfo", field(1, info)), options)
            answer["cancel"] = [r.body.to_pybytes().hex() for r in results]
        except Exception as error:  # pyarrow maps some gRPC codes to its own errors
            answer["cancel"] = {"error": str(error), "code": type(error).__name__}
    return answer


COMMANDS = {
    "raw_query_calls": raw_query_calls,
    "raw_stream": raw_stream,
    "raw_bind": raw_bind,
    "adbc_rebind": adbc_rebind,
    "adbc_many": adbc_many,
    "raw_cancel_while_streaming": raw_cancel_while_streaming,
    "raw_cancel": raw_cancel,
    "adbc_query": adbc_query,
    "adbc_prepared": adbc_prepared,
    "adbc_objects": adbc_objects,
    "raw_statement": raw_statement,
    "raw_type_info": raw_type_info,
}

if __name__ == "__main__":
    command, raw = sys.argv[1], sys.argv[2]
    print(json.dumps(COMMANDS[command](json.loads(raw))))
