"""What a user does with lakehost's typed result downloads, for the
integration tests (tests/tests/integration/result_formats.rs): the Arrow IPC
stream read by pyarrow (then handed to pandas and DuckDB), and the Parquet
file read by pyarrow over fsspec's HTTP files (ranged reads), by
`pandas.read_parquet(url)` and by DuckDB's `read_parquet('http...')`
(httpfs, installed from its PyPI wheel), each straight from a URL.

Usage: python result_client.py <command> <json arguments>
  arguments: {"url": ..., "headers": {...}}  (headers: for the API's own
  endpoint; a signed link needs none)
Prints one JSON object: {"readers": {<reader>: {"columns": [...],
"types": [...], "rows": [[cell, ...], ...]}}}, every cell written as the
result CSV writes it (see `cell`), so the test compares them with the CSV.
"""

import datetime
import decimal
import json
import math
import os
import sys
import urllib.request


def cell(value, arrow_type):
    """A value as the result CSV's text: integers and decimals in full,
    floats as Python's repr (the test compares floats as numbers),
    booleans as true/false, timestamps as `%Y-%m-%d %H:%M:%S.mmm` (with the
    offset, ` +00:00`, when zoned), dates as ISO, NULL (or pandas' NaN/NaT
    for it) as None."""
    import pyarrow as pa

    if value is None:
        return None
    try:
        import pandas as pd

        if value is pd.NaT or value is pd.NA or (
            not pa.types.is_floating(arrow_type) and isinstance(value, float) and math.isnan(value)
        ):
            return None
        if isinstance(value, pd.Timestamp):
            value = value.to_pydatetime()
    except ImportError:
        pass
    if pa.types.is_boolean(arrow_type):
        return "true" if value else "false"
    if pa.types.is_integer(arrow_type):
        return str(int(value))
    if pa.types.is_floating(arrow_type):
        return repr(float(value))
    if pa.types.is_decimal(arrow_type):
        return str(decimal.Decimal(value))
    if pa.types.is_timestamp(arrow_type):
        text = value.strftime("%Y-%m-%d %H:%M:%S.") + "%03d" % (value.microsecond // 1000)
        if arrow_type.tz:
            minutes = int(value.utcoffset().total_seconds()) // 60
            sign = "-" if minutes < 0 else "+"
            text += " %s%02d:%02d" % (sign, abs(minutes) // 60, abs(minutes) % 60)
        return text
    if pa.types.is_date(arrow_type):
        return value.isoformat() if isinstance(value, datetime.date) else str(value)
    return str(value)


def described(names, types, rows):
    return {
        "columns": list(names),
        "types": [str(t) for t in types],
        "rows": [[cell(v, t) for v, t in zip(row, types)] for row in rows],
    }


def of_table(table):
    return described(table.schema.names, table.schema.types, zip(*[c.to_pylist() for c in table.columns]))


def of_pandas(frame, schema):
    """A DataFrame read with pandas' Arrow-backed dtypes (its default NumPy
    ones turn 64-bit integer columns with NULLs into floats, which round
    past 2**53: pandas' own rule, not the file's), typed by the file's
    Arrow schema."""
    rows = frame.itertuples(index=False, name=None)
    return described(schema.names, schema.types, rows)


def of_duckdb(relation, schema):
    return described(relation.columns, schema.types, relation.fetchall())


def duckdb_connection():
    import duckdb
    import duckdb_extensions

    con = duckdb.connect()
    # Zoned timestamps come back in the session's zone: the CSV's is UTC.
    con.execute("SET TimeZone = 'UTC'")
    duckdb_extensions.import_extension("httpfs", con=con)
    con.execute("LOAD httpfs")
    return con


def open_url(args):
    request = urllib.request.Request(args["url"], headers=args.get("headers", {}))
    return urllib.request.urlopen(request)


def read_arrow(args):
    """The Arrow IPC stream, read as it arrives; then pandas and DuckDB on it."""
    import pandas as pd
    import pyarrow as pa

    with open_url(args) as response:
        content_type = response.headers.get("Content-Type")
        reader = pa.ipc.open_stream(response)
        table = reader.read_all()
    con = duckdb_connection()
    con.register("result", table)
    return {
        "content_type": content_type,
        "readers": {
            "pyarrow": of_table(table),
            "pandas": of_pandas(table.to_pandas(types_mapper=pd.ArrowDtype), table.schema),
            "duckdb": of_duckdb(con.sql("SELECT * FROM result"), table.schema),
        },
    }


def read_parquet(args):
    """The Parquet file from its URL: pyarrow over fsspec's HTTP file (ranged
    reads: the footer first), pandas.read_parquet(url), DuckDB read_parquet."""
    import fsspec
    import pandas as pd
    import pyarrow.parquet as pq

    headers = args.get("headers", {})
    http = fsspec.filesystem("http", headers=headers, block_size=64 * 1024)
    with http.open(args["url"], "rb") as file:
        parquet = pq.ParquetFile(file)
        table = parquet.read()
        row_groups = parquet.metadata.num_row_groups
    readers = {"pyarrow": of_table(table)}
    readers["pandas"] = of_pandas(
        pd.read_parquet(args["url"], storage_options=headers or None, dtype_backend="pyarrow"),
        table.schema,
    )
    if not headers:
        # DuckDB's httpfs sends no custom headers without a secret: it reads
        # the signed link, which needs none.
        con = duckdb_connection()
        url = args["url"].replace("'", "''")
        readers["duckdb"] = of_duckdb(con.sql(f"SELECT * FROM read_parquet('{url}')"), table.schema)
    return {"row_groups": row_groups, "readers": readers}


COMMANDS = {"read_arrow": read_arrow, "read_parquet": read_parquet}

if __name__ == "__main__":
    command, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(COMMANDS[command](arguments)), flush=True)
    # The answer is out: leave without running DuckDB's and Arrow's C++
    # destructors, whose threads (httpfs's, loaded for the links) now and
    # then abort the interpreter's exit ("terminate called without an active
    # exception") after a correct answer.
    os._exit(0)
