#!/usr/bin/env python3
"""Query latency benchmark: lakehost's HTTP query API against in-process peers.

The benchmark generates TPC-H data, adds a ``service_client_id`` column,
imports every table into a fresh lakehost lake with ``lakehost import``,
starts ``lakehost serve`` and runs a fixed set of queries four ways:

* ``lakehost``, through the HTTP API in one round trip: submit with
  ``Prefer: wait=25``, whose answer holds the final state and the first
  result page. This is the column the ratios, their geometric means and
  issue 50's targets use: the server's time for the query, not a client's
  polling;
* ``lakehost poll``, the spec's three steps: submit, poll until SUCCEEDED
  (every 0.5 ms at first, then every 2% of the time so far, at most 20 ms),
  fetch the first page. Printed beside, with its own geometric means: each
  poll costs the server and this client CPU on the cores the query runs on
  (Q1 at scale 1 is polled about 140 times);
* DataFusion-python, on the same lake files, ``ctx.sql(q).collect()``;
* DuckDB, on the same lake files, the whole result fetched as Arrow.

It prints the median latency per query and engine, the ratios, their
geometric means, and the p50/p99 latency of ``SELECT 1`` through the API.

``--peers-only DIR`` skips lakehost and runs the two peers on an existing lake
database directory (one holding ``<table>/service_client_id=<id>/...``).

Run it through ``bench/run``, which sets up the virtualenv. See README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import datafusion
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import requests

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

TABLES = ("nation", "region", "part", "partsupp", "supplier", "customer", "orders", "lineitem")
# service_client_id = <key column> % 8 for these tables; SHARED_CLIENT_ID for the others.
CLIENT_ID_KEYS = {"lineitem": "l_suppkey", "orders": "o_custkey", "customer": "c_custkey"}
CLIENT_COUNT = 8
SHARED_CLIENT_ID = 901
# The hive partition columns of the lake layout, outermost first.
PARTITION_COLS = [("service_client_id", pa.int64()), ("svc$load_id", pa.string())]

ORG = "demo"
DATABASE = "demo_lake_v2"
API_HOST = f"{ORG}.api.localhost"
CLIENT_ID = "demo-admin"
CLIENT_SECRET = "demo-admin-secret"
TOKEN_MAX_AGE_S = 240  # tokens last 5 minutes
# Polling backs off like a real client's: every 0.5 ms at first, then every
# 2% of the time elapsed so far (at most 20 ms), so a result is seen at most
# ~2% late, and a long query is not slowed by a client polling it 1,000 times
# a second on the same cores.
POLL_MIN_S = 0.0005
POLL_FRACTION = 0.02
POLL_MAX_S = 0.02
HTTP_TIMEOUT_S = 60  # one HTTP request
QUERY_TIMEOUT_S = 600  # one query, submit to final state
SERVER_START_TIMEOUT_S = 60
SELECT1_WARMUPS = 20
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
# The small queries timed one by one: where one round trip matters.
SMALL_QUERIES = {
    "SELECT 1": "SELECT 1",
    "count(*)": "SELECT count(*) FROM lineitem",
    "point lookup": "SELECT o_orderkey, o_custkey, o_totalprice FROM orders WHERE o_orderkey = 4242",
}

# TPC-H text in DataFusion's SQL dialect (DuckDB accepts it as well).
QUERIES: dict[str, str] = {
    "Q1": """
        SELECT l_returnflag, l_linestatus,
               sum(l_quantity) AS sum_qty,
               sum(l_extendedprice) AS sum_base_price,
               sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
               avg(l_quantity) AS avg_qty,
               avg(l_extendedprice) AS avg_price,
               avg(l_discount) AS avg_disc,
               count(*) AS count_order
        FROM lineitem
        WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
        GROUP BY l_returnflag, l_linestatus
        ORDER BY l_returnflag, l_linestatus""",
    "Q3": """
        SELECT l_orderkey,
               sum(l_extendedprice * (1 - l_discount)) AS revenue,
               o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING'
          AND c_custkey = o_custkey
          AND l_orderkey = o_orderkey
          AND o_orderdate < DATE '1995-03-15'
          AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate
        LIMIT 10""",
    "Q6": """
        SELECT sum(l_extendedprice * l_discount) AS revenue
        FROM lineitem
        WHERE l_shipdate >= DATE '1994-01-01'
          AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
          AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01
          AND l_quantity < 24""",
    "Q12": """
        SELECT l_shipmode,
               sum(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH'
                        THEN 1 ELSE 0 END) AS high_line_count,
               sum(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH'
                        THEN 1 ELSE 0 END) AS low_line_count
        FROM orders, lineitem
        WHERE o_orderkey = l_orderkey
          AND l_shipmode IN ('MAIL', 'SHIP')
          AND l_commitdate < l_receiptdate
          AND l_shipdate < l_commitdate
          AND l_receiptdate >= DATE '1994-01-01'
          AND l_receiptdate < DATE '1994-01-01' + INTERVAL '1' YEAR
        GROUP BY l_shipmode
        ORDER BY l_shipmode""",
    "Q6 one client": """
        SELECT sum(l_extendedprice * l_discount) AS revenue
        FROM lineitem
        WHERE l_shipdate >= DATE '1994-01-01'
          AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
          AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01
          AND l_quantity < 24
          AND service_client_id = 3""",
    # TPC-H order keys are sparse (k % 32 < 8); 4196 exists at every scale.
    "point lookup": "SELECT * FROM orders WHERE o_orderkey = 4196",
    "top 1000": "SELECT * FROM lineitem ORDER BY l_extendedprice DESC LIMIT 1000",
}


@dataclass
class Outcome:
    """One timed query run: rows returned, whether that is the whole result, seconds."""

    rows: int
    complete: bool
    seconds: float


class QueryFailed(RuntimeError):
    """A lakehost query ended FAILED or CANCELLED, or the API answered unexpectedly."""


# --------------------------------------------------------------------------- data


def tpchgen_cli() -> str:
    """The tpchgen-cli installed beside this Python (the venv's bin/), else the one on PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    return str(beside) if beside.is_file() else "tpchgen-cli"


def generate_tpch(work: Path, scale: float) -> Path:
    """Generate TPC-H parquet files with tpchgen-cli into <work>/tpch-sf<scale>/.

    Skipped when the directory already exists; generation goes to a temporary
    directory first so an interrupted run never leaves a half-written one.
    """
    target = work / f"tpch-sf{scale:g}"
    if target.is_dir():
        print(f"TPC-H data: reusing {target}")
        return target
    tmp = work / f"tpch-sf{scale:g}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"TPC-H data: generating scale factor {scale:g} into {target}")
    subprocess.run(
        [tpchgen_cli(), "parquet", "--scale-factor", f"{scale:g}", "--output-dir", str(tmp),
         "--no-progress", "--quiet"],
        check=True,
    )
    tmp.rename(target)
    return target


def service_client_ids(table_name: str, batch: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The service_client_id values for one batch of rows of a TPC-H table."""
    key = CLIENT_ID_KEYS.get(table_name)
    if key is None:
        return pa.array([SHARED_CLIENT_ID] * batch.num_rows, pa.int64())
    return pc.modulo(batch[key], CLIENT_COUNT)


def write_import_file(table_name: str, source: Path, target: Path) -> None:
    """Copy a TPC-H parquet file to `target` with a service_client_id (int64) column added.

    All original columns and types are kept. Works one row group at a time so
    the large tables never sit in memory whole. Skipped when `target` already
    has the column and the same number of rows as `source`.
    """
    src = pq.ParquetFile(source)
    if target.exists():
        existing = pq.ParquetFile(target)
        if (existing.metadata.num_rows == src.metadata.num_rows
                and "service_client_id" in existing.schema_arrow.names):
            return
    field = pa.field("service_client_id", pa.int64(), nullable=False)
    schema = src.schema_arrow.append(field)
    tmp = target.with_suffix(".parquet.tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for i in range(src.num_row_groups):
            batch = src.read_row_group(i)
            writer.write_table(batch.append_column(field, service_client_ids(table_name, batch)))
    tmp.rename(target)


def prepare_import_files(tpch_dir: Path, import_dir: Path) -> dict[str, int]:
    """Write <import_dir>/<table>.parquet for every table; return the row count of each."""
    import_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name in TABLES:
        source = tpch_dir / f"{name}.parquet"
        write_import_file(name, source, import_dir / f"{name}.parquet")
        counts[name] = pq.ParquetFile(source).metadata.num_rows
    return counts


def lake_row_counts(lake_dir: Path) -> dict[str, int]:
    """Rows per table in a lake database directory, summed from the parquet footers."""
    return {
        name: sum(pq.ParquetFile(f).metadata.num_rows for f in (lake_dir / name).rglob("*.parquet"))
        for name in TABLES
    }


# ----------------------------------------------------------------------- lakehost


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(work: Path, port: int, s3_port: int | None = None) -> tuple[Path, Path]:
    """Write <work>/lakehost.toml for an empty data dir, the upload endpoint on
    `s3_port` (a free one if None); return (config path, data dir)."""
    data_dir = work / "lakehost-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    config = work / "lakehost.toml"
    config.write_text(
        "[server]\n"
        f"listen = {json.dumps(f'127.0.0.1:{port}')}\n"
        "metrics_listen = \"127.0.0.1:0\"\n"
        "[storage]\n"
        f"data_dir = {json.dumps(str(data_dir))}\n"
        f"s3_listen = {json.dumps(f'127.0.0.1:{s3_port or free_port()}')}\n"
    )
    return config, data_dir


def import_tables(lakehost: Path, config: Path, import_dir: Path) -> None:
    """Import every table into the lake with `lakehost import`, printing its summaries."""
    for name in TABLES:
        result = subprocess.run(
            [str(lakehost), "import", "--config", str(config), "--org", ORG,
             "--database", DATABASE, "--table", name, str(import_dir / f"{name}.parquet")],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"lakehost import of {name} failed (exit {result.returncode}):\n"
                               f"{result.stdout}{result.stderr}")
        # Log lines may share stdout with the one-line JSON summary.
        summaries = [line for line in result.stdout.splitlines() if line.startswith("{")]
        print(f"  imported {name}: {summaries[-1] if summaries else '(no summary printed)'}")


class RssSampler:
    """The peak resident memory of a process, sampled from /proc while running."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        # The peak since the last `take_peak`, for a phase within the block.
        self.window = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def take_peak(self) -> float:
        """The peak since the last call (or the block's start), read now too;
        the next call's window starts here."""
        peak = max(self.window, self.rss_mib())
        self.window = 0
        return peak

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def _run(self) -> None:
        while not self.stop.is_set():
            rss = self.rss_mib()
            self.peak, self.window = max(self.peak, rss), max(self.window, rss)
            time.sleep(RSS_POLL_S)

    def __enter__(self) -> RssSampler:
        self.before = self.rss_mib()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


RSS_POLL_S = 0.02


def append_summary(path: Path | None, **record) -> None:
    """One JSON line of a bench's figures for `bench/run-all` (nothing without
    `--summary`)."""
    if path is not None:
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")


class LakehostServer:
    """`lakehost serve` as a subprocess for the duration of a `with` block."""

    def __init__(self, lakehost: Path, config: Path, port: int, log: Path):
        self.cmd = [str(lakehost), "serve", "--config", str(config)]
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LakehostServer:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        """Poll the OpenID discovery document until it answers 200."""
        url = f"{self.base_url}/realms/{ORG}/.well-known/openid-configuration"
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lakehost exited with {self.proc.returncode} at startup; "
                                   f"see {self.log}:\n{self.log.read_text()[-2000:]}")
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    return
            # Not listening yet, or listening but slow to answer while it
            # starts on a busy machine: ask again until the deadline.
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"lakehost not ready after {SERVER_START_TIMEOUT_S}s; see {self.log}")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LakehostEngine:
    """Runs queries through lakehost's HTTP query API over one keep-alive connection.

    The client is the standard library's `http.client`, not `requests`: on this
    2-core machine `requests` spends ~0.5-0.7 ms of CPU per call (http.client
    ~0.08 ms), and a client polling a running query takes that CPU from the
    server it is timing.
    """

    name = "lakehost"

    def __init__(self, base_url: str):
        self.base_url = base_url
        parsed = urllib.parse.urlsplit(base_url)
        self.connection = http.client.HTTPConnection(parsed.hostname, parsed.port,
                                                     timeout=HTTP_TIMEOUT_S)
        self.headers = {"Host": API_HOST}
        self.token_fetched_at = -math.inf

    def _ensure_token(self) -> None:
        """Fetch a client-credentials token when the current one is older than 4 minutes."""
        if time.monotonic() - self.token_fetched_at < TOKEN_MAX_AGE_S:
            return
        resp = requests.post(
            f"{self.base_url}/realms/{ORG}/protocol/openid-connect/token",
            data={"grant_type": "client_credentials", "client_id": CLIENT_ID,
                  "client_secret": CLIENT_SECRET},
            timeout=10,
        )
        if resp.status_code != 200:
            raise QueryFailed(f"token: HTTP {resp.status_code}: {resp.text[:500]}")
        self.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
        self.token_fetched_at = time.monotonic()

    def _call(self, method: str, path: str, status: int | tuple[int, ...],
              body: dict | None = None, extra_headers: dict | None = None) -> dict:
        """`method path` on the kept-alive connection; its JSON body, or QueryFailed
        when the status is not `status` (or one of them). A dropped connection is
        opened again once."""
        headers = dict(self.headers)
        headers.update(extra_headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            try:
                self.connection.request(method, path, body=data, headers=headers)
                resp = self.connection.getresponse()
                text = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.connection.close()
                if attempt == 2:
                    raise
        if resp.status not in (status if isinstance(status, tuple) else (status,)):
            raise QueryFailed(f"{method} {path}: HTTP {resp.status}: {text[:500]!r}")
        return json.loads(text)

    def run(self, sql: str) -> Outcome:
        """Submit `sql`, poll until it is final, fetch the first result page; time all of it."""
        self._ensure_token()
        start = time.perf_counter()
        query_id = self._call("POST", "/v2/query", 202, {"query": sql})["queryId"]
        return self._finish(sql, query_id, start)

    def run_waiting(self, sql: str) -> Outcome:
        """Submit `sql` with `Prefer: wait=25`: the answer holds the final state and
        the first page in one round trip; time it. A query still running after
        the wait (its 202) is polled on as `run` does."""
        self._ensure_token()
        start = time.perf_counter()
        body = self._call("POST", "/v2/query", (200, 202), {"query": sql},
                          {"Prefer": "wait=25"})
        if "status" not in body:
            return self._finish(sql, body["queryId"], start)
        seconds = time.perf_counter() - start
        if body["status"]["state"] != "SUCCEEDED":
            raise QueryFailed(f"{sql}: {body['status']}")
        rows = len(body["resultSet"]["Rows"]) - 1
        return Outcome(rows, "nextToken" not in body, seconds)

    def _finish(self, sql: str, query_id: str, start: float) -> Outcome:
        """Poll query `query_id` until it is final, fetch its first result page;
        the Outcome timed from `start`."""
        api = "/v2/query"
        shown = f"query {query_id} ({' '.join(sql.split())[:80]})"
        while True:
            status = self._call("GET", f"{api}/{query_id}", 200)["status"]
            if status["state"] in FINAL_STATES:
                break
            if time.perf_counter() - start > QUERY_TIMEOUT_S:
                raise QueryFailed(f"{shown} still {status['state']} after {QUERY_TIMEOUT_S}s")
            elapsed = time.perf_counter() - start
            time.sleep(min(max(POLL_MIN_S, elapsed * POLL_FRACTION), POLL_MAX_S))
        if status["state"] != "SUCCEEDED":
            raise QueryFailed(f"{shown} {status['state']}: "
                              f"{status.get('stateChangeReason', '(no reason given)')}")
        page = self._call("GET", f"{api}/{query_id}/result", 200)
        seconds = time.perf_counter() - start
        # The first row of the first page is the header.
        rows = len(page["resultSet"]["Rows"]) - 1
        return Outcome(rows, "nextToken" not in page, seconds)

    def run_floor(self, _sql: str) -> Outcome:
        """`GET /livez` on the same connection: what any request costs this
        client and the server's HTTP stack, with no token, query or store.
        Printed beside the small queries so that a run on a busy machine
        shows how much of their time is the machine's."""
        start = time.perf_counter()
        self._call("GET", "/livez", 200)
        return Outcome(0, True, time.perf_counter() - start)


class LakehostWay:
    """One way a client asks lakehost for a query's answer, timed as one engine
    of the TPC-H table: `name` and its `run(sql) -> Outcome`."""

    def __init__(self, name: str, run):
        self.name, self.run = name, run


# The TPC-H table's lakehost columns: in one round trip, and polled.
WAITING, POLLING = "lakehost", "lakehost poll"


def lakehost_version(lakehost: Path) -> str:
    """What `lakehost --version` prints."""
    return subprocess.run([str(lakehost), "--version"], capture_output=True,
                          text=True).stdout.strip() or "unknown"


# -------------------------------------------------------------------------- peers


class DataFusionEngine:
    """DataFusion-python on the lake files: one SessionContext, a listing table per table."""

    name = "datafusion-python"

    def __init__(self, lake_dir: Path):
        self.ctx = datafusion.SessionContext()
        for table in TABLES:
            # The trailing slash makes it a directory listing; the hive
            # partition directories are parsed into PARTITION_COLS.
            self.ctx.register_parquet(table, f"{lake_dir / table}/",
                                      table_partition_cols=PARTITION_COLS)

    def run(self, sql: str) -> Outcome:
        """Plan and execute `sql`, collecting the whole result as Arrow batches."""
        start = time.perf_counter()
        batches = self.ctx.sql(sql).collect()
        seconds = time.perf_counter() - start
        return Outcome(sum(b.num_rows for b in batches), True, seconds)

    @staticmethod
    def version() -> str:
        """The datafusion-python package version."""
        return datafusion.__version__


class DuckDBEngine:
    """DuckDB on the lake files: one in-memory connection, a read_parquet view per table."""

    name = "duckdb"

    def __init__(self, lake_dir: Path):
        self.con = duckdb.connect()
        hive_types = ", ".join(f"'{col}': {'BIGINT' if typ == pa.int64() else 'VARCHAR'}"
                               for col, typ in PARTITION_COLS)
        for table in TABLES:
            pattern = str(lake_dir / table / "**" / "*.parquet").replace("'", "''")
            self.con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{pattern}', "
                f"hive_partitioning = true, hive_types = {{{hive_types}}})"
            )

    def run(self, sql: str) -> Outcome:
        """Execute `sql` and fetch the whole result as an Arrow table."""
        start = time.perf_counter()
        result = self.con.sql(sql).to_arrow_table()
        seconds = time.perf_counter() - start
        return Outcome(result.num_rows, True, seconds)

    @staticmethod
    def version() -> str:
        """The duckdb package version."""
        return duckdb.__version__


# -------------------------------------------------------------------- measurement


def counts_agree(outcomes: dict[str, Outcome]) -> bool:
    """Whether the engines returned the same number of rows.

    A result that is only a first page (complete=False) agrees with any
    complete count at least as large.
    """
    complete = {o.rows for o in outcomes.values() if o.complete}
    if len(complete) > 1:
        return False
    if not complete:
        return True
    full = complete.pop()
    return all(o.rows <= full for o in outcomes.values() if not o.complete)


def measure(engines: list, runs: int,
            rss: RssSampler | None = None) -> tuple[dict[str, dict[str, list[float]]],
                                                    dict[str, float]]:
    """Warm up, check row counts, then time `runs` interleaved rounds.

    Each round runs every query on every engine in turn, so drift (thermal,
    page cache, other load) hits all engines alike. Returns milliseconds per
    query per engine, and with `rss` (lakehost's server) the server's peak
    resident MiB while lakehost ran each query, warm-ups included (the peers
    run in this process, between lakehost's runs).
    """
    peaks: dict[str, float] = {}

    def run(engine, label: str, sql: str) -> Outcome:
        watched = rss is not None and engine.name.startswith(WAITING)
        if watched:
            rss.take_peak()
        outcome = engine.run(sql)
        if watched:
            peaks[label] = max(peaks.get(label, 0.0), rss.take_peak())
        return outcome

    print("\nWarm-up and row-count check:")
    for label, sql in QUERIES.items():
        outcomes = {e.name: run(e, label, sql) for e in engines}
        shown = ", ".join(f"{n}={o.rows}{'' if o.complete else '+'}" for n, o in outcomes.items())
        flag = "" if counts_agree(outcomes) else "   WARNING: row counts differ"
        print(f"  {label:<14} {shown}{flag}")
    times: dict[str, dict[str, list[float]]] = {q: {e.name: [] for e in engines} for q in QUERIES}
    for round_no in range(1, runs + 1):
        if sys.stdout.isatty():
            print(f"  round {round_no}/{runs}", end="\r", flush=True)
        for label, sql in QUERIES.items():
            for engine in engines:
                times[label][engine.name].append(run(engine, label, sql).seconds * 1000)
    return times, peaks


def geomean(values: list[float]) -> float:
    """Geometric mean of positive numbers."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def print_results(times: dict[str, dict[str, list[float]]], engine_names: list[str],
                  peaks: dict[str, float] | None = None) -> None:
    """The median table, and when lakehost ran, its ratios to each peer and their
    geomeans; when it was also polled, the polled geomeans beside; with
    `peaks`, the server's peak resident memory per query."""
    peers = [n for n in engine_names if not n.startswith(WAITING)]
    with_lakehost = WAITING in engine_names
    headers = ["query"] + [f"{n} ms" for n in engine_names]
    if with_lakehost:
        headers += [f"lakehost/{n}" for n in peers]
    if peaks:
        headers.append("lakehost RSS peak MiB")
    rows = []
    ratios: dict[str, list[float]] = {n: [] for n in peers}
    polled: dict[str, list[float]] = {n: [] for n in peers}
    for label, per_engine in times.items():
        medians = {n: statistics.median(per_engine[n]) for n in engine_names}
        row = [label] + [f"{medians[n]:.1f}" for n in engine_names]
        if with_lakehost:
            for n in peers:
                ratio = medians[WAITING] / medians[n]
                ratios[n].append(ratio)
                row.append(f"{ratio:.2f}")
                if POLLING in medians:
                    polled[n].append(medians[POLLING] / medians[n])
        if peaks:
            row.append(f"{peaks[label]:,.0f}")
        rows.append(row)
    widths = [max(len(r[i]) for r in [headers] + rows) for i in range(len(headers))]
    print("\nMedian latency per query:")
    for r in [headers] + rows:
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    if with_lakehost:
        for n in peers:
            print(f"  geometric mean lakehost/{n}: {geomean(ratios[n]):.2f}")
        for n in peers:
            if polled[n]:
                print(f"  geometric mean {POLLING}/{n}: {geomean(polled[n]):.2f}")


def percentile_ms(samples: list[float], q: int) -> float:
    """The q-th percentile of `samples` (seconds), in milliseconds."""
    if len(samples) == 1:
        return samples[0] * 1000
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1000


def measure_small_queries(lakehost: LakehostEngine, peers: list,
                          count: int) -> dict[str, dict[str, float]]:
    """Small queries side by side: lakehost in one round trip (`Prefer: wait`),
    lakehost submit-poll-page, and the in-process peers; p50/p99 of `count`
    runs after warm-ups, and lakehost's wait mode minus in-process DataFusion.
    Returns the p50s in ms per query and contender."""
    contenders = [("lakehost Prefer: wait", lakehost.run_waiting),
                  ("lakehost submit+poll+page", lakehost.run),
                  ("lakehost HTTP floor (GET /livez)", lakehost.run_floor)]
    contenders += [(peer.name + " (in process)", peer.run) for peer in peers]
    print(f"\nSmall queries ({count} runs each after {SELECT1_WARMUPS} warm-ups; "
          "lakehost over HTTP on the loopback, one keep-alive connection):")
    width = max(len(name) for name, _ in contenders)
    all_p50s = {}
    for label, sql in SMALL_QUERIES.items():
        print(f"  {label}: {sql}")
        p50s = all_p50s[label] = {}
        for name, run in contenders:
            for _ in range(SELECT1_WARMUPS):
                run(sql)
            samples = [run(sql).seconds for _ in range(count)]
            p50s[name] = percentile_ms(samples, 50)
            print(f"    {name.ljust(width)}  p50 {p50s[name]:7.3f} ms  "
                  f"p99 {percentile_ms(samples, 99):7.3f} ms")
        datafusion = next((v for k, v in p50s.items() if k.startswith("datafusion")), None)
        if datafusion is not None:
            print(f"    lakehost wait mode p50 - in-process DataFusion p50: "
                  f"{p50s[contenders[0][0]] - datafusion:+.3f} ms (target: within 1 ms)")
        floor = p50s[contenders[2][0]]
        print(f"    lakehost wait mode p50 - its HTTP floor p50: "
              f"{p50s[contenders[0][0]] - floor:+.3f} ms (the server's work for the query)")
    return all_p50s


def print_environment(versions: dict[str, str], scale: float | None,
                      row_counts: dict[str, int]) -> None:
    """Engine versions, scale factor, rows per table, CPU count."""
    print("Environment:")
    for name, version in versions.items():
        print(f"  {name}: {version}")
    print(f"  python {platform.python_version()}, pyarrow {pa.__version__}, "
          f"{os.cpu_count()} CPUs")
    print(f"  scale factor: {'unknown (--peers-only)' if scale is None else f'{scale:g}'}")
    print("  rows: " + ", ".join(f"{t} {n:,}" for t, n in row_counts.items()))


# ---------------------------------------------------------------------------- main


def run_peers_only(lake_dir: Path, runs: int) -> None:
    """Benchmark the two peers on an existing lake database directory."""
    lake_dir = lake_dir.resolve()
    engines = [DataFusionEngine(lake_dir), DuckDBEngine(lake_dir)]
    print_environment({e.name: e.version() for e in engines}, None, lake_row_counts(lake_dir))
    times, _ = measure(engines, runs)
    print_results(times, [e.name for e in engines])


def run_full(args: argparse.Namespace) -> None:
    """Generate data, build a lake with lakehost, serve it and benchmark all three engines."""
    work = args.work.resolve()
    lakehost = args.lakehost.resolve()
    if not lakehost.is_file():
        sys.exit(f"lakehost binary not found: {lakehost} (cargo build --release, or --lakehost)")
    work.mkdir(parents=True, exist_ok=True)
    tpch_dir = generate_tpch(work, args.scale)
    import_dir = work / "import"
    print(f"Import files: {import_dir}")
    source_counts = prepare_import_files(tpch_dir, import_dir)

    port = free_port()
    config, data_dir = write_config(work, port)
    print(f"Importing into {data_dir}")
    import_tables(lakehost, config, import_dir)
    lake_dir = data_dir / "lake" / DATABASE
    lake_counts = lake_row_counts(lake_dir)
    for table, n in source_counts.items():
        if lake_counts[table] != n:
            print(f"WARNING: {table} has {n} rows in TPC-H but {lake_counts[table]} in the lake")

    with LakehostServer(lakehost, config, port, work / "server.log") as server:
        print(f"lakehost serving on {server.base_url} (log: {server.log})\n")
        api = LakehostEngine(server.base_url)
        peers = [DataFusionEngine(lake_dir), DuckDBEngine(lake_dir)]
        engines = [LakehostWay(WAITING, api.run_waiting), LakehostWay(POLLING, api.run),
                   *peers]
        versions = {"lakehost": lakehost_version(lakehost),
                    **{e.name: e.version() for e in peers}}
        print_environment(versions, args.scale, source_counts)
        with RssSampler(server.proc.pid) as rss:
            times, peaks = measure(engines, args.runs, rss)
        print_results(times, [e.name for e in engines], peaks)
        print(f"lakehost resident memory during the queries: {rss.before:.0f} MiB before, "
              f"{rss.peak:.0f} MiB peak")
        for label, per_engine in times.items():
            append_summary(args.summary, bench="query", scale=args.scale, work=label,
                           rss_before_mib=rss.before, rss_peak_mib=peaks[label],
                           **{f"{name.replace(' ', '_')}_s": statistics.median(ms) / 1000
                              for name, ms in per_engine.items()})
        if args.select1 > 0:
            small = measure_small_queries(api, peers, args.select1)
            for label, p50s in small.items():
                append_summary(args.summary, bench="small", scale=args.scale, work=label,
                               p50_ms=p50s)
    print("\nNote: the peers collect the whole result, lakehost returns its first page "
          "(at most 1,000 rows); every query here returns at most 1,000 rows.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Benchmark lakehost's HTTP query API against DataFusion-python and DuckDB "
                    "on TPC-H data.")
    parser.add_argument("--scale", type=float, default=1,
                        help="TPC-H scale factor (default: 1)")
    parser.add_argument("--runs", type=int, default=5,
                        help="timed rounds after the warm-up (default: 5)")
    parser.add_argument("--lakehost", type=Path, default=REPO_ROOT / "target/release/lakehost",
                        help="the lakehost binary (default: target/release/lakehost)")
    parser.add_argument("--work", type=Path, default=BENCH_DIR / ".work",
                        help="working directory for data, config, lake and log "
                             "(default: bench/.work)")
    parser.add_argument("--select1", type=int, default=200,
                        help="timed runs of each small query (SELECT 1, a point lookup) per "
                             "engine; 0 skips them (default: 200)")
    parser.add_argument("--summary", type=Path, metavar="FILE",
                        help="append the figures as JSON lines to FILE (bench/run-all)")
    parser.add_argument("--peers-only", type=Path, metavar="DIR",
                        help="skip lakehost; run the peers on an existing lake database "
                             "directory DIR holding <table>/service_client_id=<id>/...")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.select1 < 0 or args.scale <= 0:
        parser.error("--runs must be >= 1, --select1 >= 0, --scale > 0")
    return args


def main() -> None:
    """Entry point; SIGTERM unwinds like Ctrl-C so the server is always stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    try:
        if args.peers_only:
            run_peers_only(args.peers_only, args.runs)
        else:
            run_full(args)
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, OSError, subprocess.CalledProcessError,
            requests.RequestException, http.client.HTTPException) as e:
        sys.exit(f"query_bench: {e}")


if __name__ == "__main__":
    main()
