#!/usr/bin/env python3
"""Wire protocol benchmark: one big scan (TPC-H lineitem, 6,001,215 rows at
scale 1, `SELECT * FROM lineitem`) fetched from lakehost through each of its
front ends, beside DuckDB and DataFusion-python reading the same lake files
in process, in one run: seconds and rows/s each.

* Flight SQL: ADBC's Flight SQL driver, `cursor.execute` then
  `fetch_arrow_table()`, from before the execute to the last batch (the rows
  stream from the engine as the query runs). Over plain gRPC, and over TLS.
  Then the same calls through `pyarrow.flight` (`GetFlightInfo` of the
  statement, `DoGet` of its ticket, `read_all()`): the same server with
  arrow's C++ client instead of ADBC's Go one.
* Postgres: psycopg 3, a binary cursor, `execute` then `fetchmany` to the
  last row. Python builds a tuple per row, which dominates: shown for scale.
* REST CSV link: POST, poll to SUCCEEDED, `GET /query/{id}/csv`, then the
  link to its last byte.
* DuckDB: `read_parquet(..., hive_partitioning = true)` to an Arrow table.
* DataFusion-python: `ctx.sql(q).to_arrow_table()`.
* Flight floor: no lakehost and no scan. DataFusion-python's result (strings
  made plain, as lakehost sends them) is held in memory by a
  `pyarrow.flight` server in this process and fetched by a `pyarrow.flight`
  client: what moving these rows over gRPC costs on this machine by itself.

On two cores the client and the server share the CPU: ADBC's decoding (Go)
competes with the server's scan and encoding. Run it through
``bench/run-wire`` (the virtualenv); see README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import datafusion
import duckdb
import psycopg
import pyarrow as pa
import pyarrow.flight as pa_flight
import pyarrow.parquet as pq
import requests
from adbc_driver_flightsql import DatabaseOptions

from query_bench import (
    CLIENT_ID,
    CLIENT_SECRET,
    DATABASE,
    ORG,
    PARTITION_COLS,
    LakehostServer,
    free_port,
    generate_tpch,
    lakehost_version,
    write_import_file,
)
from result_bench import Client, download_link, import_table, remove_results

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))
from flight_client import statement_command  # noqa: E402  (the tests' protobuf helper)
TABLE = "lineitem"
SQL = f"SELECT * FROM {TABLE}"
PG_FETCH = 100_000


def write_config(work: Path, ports: dict[str, int], tls: tuple[Path, Path] | None) -> Path:
    """<work>/lakehost-wire.toml: the API, Flight SQL and (with `tls`, the
    certificate and key) Postgres listeners on the bench's lake."""
    config = work / "lakehost-wire.toml"
    address = {name: json.dumps(f"127.0.0.1:{port}") for name, port in ports.items()}
    server = (
        "[server]\n"
        f"listen = {address['api']}\n"
        "metrics_listen = \"127.0.0.1:0\"\n"
        f"flight_listen = {address['flight']}\n"
    )
    if tls is not None:
        cert, key = tls
        server += (
            f"pg_listen = {address['pg']}\n"
            f"tls_cert = {json.dumps(str(cert))}\n"
            f"tls_key = {json.dumps(str(key))}\n"
        )
    config.write_text(
        server
        + "[storage]\n"
        f"data_dir = {json.dumps(str(work / 'lakehost-data'))}\n"
        f"s3_listen = {json.dumps(f'127.0.0.1:{free_port()}')}\n"
    )
    return config


def certificate(work: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost (openssl, as the README's)."""
    cert, key = work / "cert.pem", work / "key.pem"
    if not cert.exists():
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-addext", "basicConstraints=critical,CA:FALSE"],
            check=True, capture_output=True,
        )
    return cert, key


class TlsLakehostServer(LakehostServer):
    """`lakehost serve` with a certificate: every listener speaks TLS, the
    API too, so readiness is checked over HTTPS trusting `cert`."""

    def __init__(self, lakehost: Path, config: Path, port: int, log: Path, cert: Path):
        super().__init__(lakehost, config, port, log)
        self.base_url = f"https://localhost:{port}"
        self.cert = cert

    def _wait_ready(self) -> None:
        url = f"{self.base_url}/realms/{ORG}/.well-known/openid-configuration"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lakehost exited at startup; see {self.log}")
            try:
                if requests.get(url, timeout=1, verify=str(self.cert)).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"lakehost not ready after 60s; see {self.log}")

    def token(self) -> str:
        return requests.post(
            f"{self.base_url}/realms/{ORG}/protocol/openid-connect/token",
            data={"grant_type": "client_credentials", "client_id": CLIENT_ID,
                  "client_secret": CLIENT_SECRET},
            timeout=10, verify=str(self.cert),
        ).json()["access_token"]


# ------------------------------------------------------------------ front ends


def flight_rows(uri: str, token: str, tls_root: Path | None) -> tuple[int, float]:
    """ADBC: execute and fetch the whole result as Arrow: (rows, seconds)."""
    options = {
        DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}",
        DatabaseOptions.RPC_CALL_HEADER_PREFIX.value + "x-lakehost-org": ORG,
    }
    if tls_root is not None:
        options[DatabaseOptions.TLS_ROOT_CERTS.value] = tls_root.read_text()
    with flight_sql.connect(uri, db_kwargs=options) as conn, conn.cursor() as cursor:
        start = time.perf_counter()
        cursor.execute(SQL)
        table = cursor.fetch_arrow_table()
        seconds = time.perf_counter() - start
    return table.num_rows, seconds


def flight_pyarrow_rows(uri: str, token: str) -> tuple[int, float]:
    """pyarrow.flight: GetFlightInfo of the statement, DoGet of its ticket,
    the whole stream read: (rows, seconds)."""
    client = pa_flight.connect(uri)
    options = pa_flight.FlightCallOptions(headers=[
        (b"authorization", f"Bearer {token}".encode()), (b"x-lakehost-org", ORG.encode())])
    start = time.perf_counter()
    info = client.get_flight_info(
        pa_flight.FlightDescriptor.for_command(statement_command(SQL)), options)
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    seconds = time.perf_counter() - start
    client.close()
    return table.num_rows, seconds


def postgres_rows(port: int, cert: Path) -> tuple[int, float]:
    """psycopg, binary cursor, every row fetched: (rows, seconds)."""
    with psycopg.connect(host="localhost", port=port, dbname=ORG, user=CLIENT_ID,
                         password=CLIENT_SECRET, sslmode="verify-full",
                         sslrootcert=str(cert)) as conn:
        start = time.perf_counter()
        rows = 0
        with conn.cursor(binary=True) as cursor:
            cursor.execute(SQL)
            while batch := cursor.fetchmany(PG_FETCH):
                rows += len(batch)
        seconds = time.perf_counter() - start
    return rows, seconds


def rest_csv_rows(client: Client) -> tuple[int, float]:
    """Submit, SUCCEEDED, the CSV link, downloaded: (bytes, seconds)."""
    start = time.perf_counter()
    query_id, _ = client.run(SQL)
    url, _ = client.link(query_id, "csv")
    size, _ = download_link(url)
    return size, time.perf_counter() - start


def duckdb_rows(lake_dir: Path) -> tuple[int, float]:
    con = duckdb.connect()
    hive_types = ", ".join(f"'{c}': {'BIGINT' if t == pa.int64() else 'VARCHAR'}"
                           for c, t in PARTITION_COLS)
    pattern = str(lake_dir / TABLE / "**" / "*.parquet").replace("'", "''")
    con.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet('{pattern}', "
                f"hive_partitioning = true, hive_types = {{{hive_types}}})")
    start = time.perf_counter()
    table = con.sql(SQL).to_arrow_table()
    return table.num_rows, time.perf_counter() - start


def datafusion_table(lake_dir: Path) -> pa.Table:
    ctx = datafusion.SessionContext()
    ctx.register_parquet(TABLE, f"{lake_dir / TABLE}/", table_partition_cols=PARTITION_COLS)
    return ctx.sql(SQL).to_arrow_table()


def datafusion_rows(lake_dir: Path) -> tuple[int, float]:
    start = time.perf_counter()
    table = datafusion_table(lake_dir)
    return table.num_rows, time.perf_counter() - start


class MemoryFlightServer(pa_flight.FlightServerBase):
    """Serves one in-memory table to any ticket (the floor's server)."""

    def __init__(self, table: pa.Table):
        super().__init__("grpc://127.0.0.1:0")
        self.table = table

    def do_get(self, context, ticket):
        return pa_flight.RecordBatchStream(self.table)


def plain_strings(table: pa.Table) -> pa.Table:
    """`table` with string views as plain strings (what lakehost sends)."""
    schema = pa.schema([
        field.with_type(pa.string()) if pa.types.is_string_view(field.type) else field
        for field in table.schema
    ])
    return table.cast(schema)


def flight_floor_rows(server: MemoryFlightServer) -> tuple[int, float]:
    """pyarrow.flight: the server's table fetched whole: (rows, seconds)."""
    client = pa_flight.connect(f"grpc://127.0.0.1:{server.port}")
    start = time.perf_counter()
    table = client.do_get(pa_flight.Ticket(b"rows")).read_all()
    seconds = time.perf_counter() - start
    client.close()
    return table.num_rows, seconds


# ------------------------------------------------------------------------ main


def run(args: argparse.Namespace) -> None:
    work = args.work.resolve()
    lakehost = args.lakehost.resolve()
    if not lakehost.is_file():
        sys.exit(f"lakehost binary not found: {lakehost} (cargo build --release, or --lakehost)")
    work.mkdir(parents=True, exist_ok=True)
    tpch_dir = generate_tpch(work, args.scale)
    source = work / "import" / f"{TABLE}.parquet"
    source.parent.mkdir(parents=True, exist_ok=True)
    write_import_file(TABLE, tpch_dir / f"{TABLE}.parquet", source)
    rows = pq.ParquetFile(source).metadata.num_rows

    ports = {"api": free_port(), "flight": free_port(), "pg": free_port()}
    cert, key = certificate(work)
    config = write_config(work, ports, None)
    data_dir = work / "lakehost-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    print(f"Importing {TABLE} ({rows:,} rows) into {data_dir}")
    import_table(lakehost, config, source)
    lake_dir = data_dir / "lake" / DATABASE
    env_log = os.environ.setdefault("RUST_LOG", "warn")
    print(f"\nEnvironment: lakehost {lakehost_version(lakehost)}, duckdb {duckdb.__version__}, "
          f"datafusion-python {datafusion.__version__}, pyarrow {pa.__version__}, "
          f"psycopg {psycopg.__version__}, {os.cpu_count()} CPUs, scale {args.scale:g}, "
          f"RUST_LOG={env_log}")
    print(f"Scan: {SQL}: {rows:,} rows, {args.runs} timed runs after a warm-up, median\n")

    seconds: dict[str, list[float]] = {}

    def timed(name: str, fetch, expect_rows: bool = True) -> None:
        fetch()  # warm-up: the file cache, the catalog, the connection pool
        for _ in range(args.runs):
            got, took = fetch()
            if expect_rows and got != rows:
                raise RuntimeError(f"{name}: {got:,} rows, expected {rows:,}")
            seconds.setdefault(name, []).append(took)
            remove_results(data_dir)

    config = write_config(work, ports, None)
    with LakehostServer(lakehost, config, ports["api"], work / "server-wire.log") as server:
        client = Client(server.base_url)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        uri = f"grpc://127.0.0.1:{ports['flight']}"
        timed("Flight SQL (ADBC, gRPC)", lambda: flight_rows(uri, token, None))
        timed("Flight SQL (pyarrow.flight, gRPC)", lambda: flight_pyarrow_rows(uri, token))
        timed("REST CSV link", lambda: rest_csv_rows(client), expect_rows=False)
    config = write_config(work, ports, (cert, key))
    with TlsLakehostServer(lakehost, config, ports["api"], work / "server-wire-tls.log",
                           cert) as server:
        token = server.token()
        uri = f"grpc+tls://localhost:{ports['flight']}"
        timed("Flight SQL (ADBC, TLS)", lambda: flight_rows(uri, token, cert))
        if not args.no_postgres:
            timed("Postgres (psycopg binary, TLS)", lambda: postgres_rows(ports["pg"], cert))
    timed("DuckDB in process", lambda: duckdb_rows(lake_dir))
    timed("DataFusion-python in process", lambda: datafusion_rows(lake_dir))
    floor = MemoryFlightServer(plain_strings(datafusion_table(lake_dir)))
    threading.Thread(target=floor.serve, daemon=True).start()
    timed("Flight floor (pyarrow, no scan)", lambda: flight_floor_rows(floor))
    floor.shutdown()

    fusion = statistics.median(seconds["DataFusion-python in process"])
    width = max(len(name) for name in seconds)
    print(f"  {'front end'.ljust(width)}  {'s':>7}  {'rows/s':>12}  {'x DataFusion':>12}")
    for name, runs in seconds.items():
        median = statistics.median(runs)
        print(f"  {name.ljust(width)}  {median:7.2f}  {rows / median:12,.0f}  "
              f"{median / fusion:12.2f}")
    flight = statistics.median(seconds["Flight SQL (ADBC, gRPC)"])
    floor_s = statistics.median(seconds["Flight floor (pyarrow, no scan)"])
    print(f"\nFlight SQL over gRPC / DataFusion in process: {flight / fusion:.2f}x "
          f"(target: at most 1.3x); moving the rows alone, with no scan: "
          f"{floor_s / fusion:.2f}x; Flight SQL (ADBC) over the floor: "
          f"{flight / floor_s:.2f}x")
    print("Flight and Postgres: from the execute to the last row in the client. REST: "
          "submit, SUCCEEDED, the link and its download. In process: the same scan into an "
          "Arrow table, no server.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="One big scan through Flight SQL, Postgres and the REST CSV link, beside "
                    "DuckDB and DataFusion-python in process.")
    parser.add_argument("--scale", type=float, default=1,
                        help="TPC-H scale factor; lineitem has ~6M rows per unit (default: 1)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs (default: 5)")
    parser.add_argument("--no-postgres", action="store_true",
                        help="skip the Postgres client (the slowest: Python tuples)")
    parser.add_argument("--lakehost", type=Path, default=REPO_ROOT / "target/release/lakehost",
                        help="the lakehost binary (default: target/release/lakehost)")
    parser.add_argument("--work", type=Path, default=BENCH_DIR / ".work-wire",
                        help="data, config, lake and logs (default: bench/.work-wire)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.scale <= 0:
        parser.error("--runs must be at least 1 and --scale positive")
    return args


def main() -> None:
    run(parse_args())


if __name__ == "__main__":
    main()
