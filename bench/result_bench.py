#!/usr/bin/env python3
"""Whole-result download benchmark: a big result (TPC-H lineitem, 6,001,215
rows at scale 1) fetched from lakehost as CSV, Arrow IPC stream and Parquet,
beside DuckDB's and DataFusion-python's `COPY ... TO` / `write_*` of the
same rows to a file of each format, in one run on the same lake files.

For lakehost it measures:

* the query (submit to SUCCEEDED, which writes the result CSV, and the Arrow
  copy when `query.typed_results` is on) with the typed copy off and on: the
  difference is what the Arrow copy costs;
* per format, time to last byte of the signed link (`GET /query/{id}/csv
  ?format=...` then the link), and of `GET /query/{id}/result` with `Accept`;
  Parquet's first link request makes the Parquet file, timed on its own:
  from the Arrow copy when Arrow was asked for first, and, on a fresh
  result, straight from the CSV when Parquet is the first typed request;
* end to end per format: query + (Parquet: making it as the first typed
  request) + download;
* Arrow first (`Prefer: result-format=arrow`, per `--arrow-first`
  compression) and Parquet first (`Prefer: result-format=parquet`): the
  query writing that file alone, its link's download, and the CSV made from
  it on its first request.

Peers, in process, on the lake's parquet files: DuckDB `COPY (SELECT ...) TO`
CSV (every value quoted, like lakehost's), Parquet (zstd) and Arrow IPC (the
`nanoarrow` extension's `arrows` format when it can be loaded, else DuckDB's
Arrow batches written by pyarrow's IPC writer, named as such); the same
three through DataFusion-python (`write_csv`, `write_parquet`, its batches
through pyarrow's IPC writer). Each peer also writes its Arrow batches
through pyarrow's IPC writer compressed as each Arrow-first run's file is
(lz4 by default): the same format as lakehost's, which the Arrow-first
figures compare with (the uncompressed peers are printed beside).

Run it through ``bench/run-results`` (the virtualenv); see README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import datafusion
import duckdb
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import requests

from query_bench import (
    API_HOST,
    CLIENT_ID,
    CLIENT_SECRET,
    DATABASE,
    FINAL_STATES,
    ORG,
    PARTITION_COLS,
    LakehostServer,
    RssSampler,
    append_summary,
    free_port,
    generate_tpch,
    lakehost_version,
    write_import_file,
)

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
TABLE = "lineitem"
SQL = f"SELECT * FROM {TABLE}"
FORMATS = ("csv", "arrow", "parquet")
MEDIA_TYPES = {
    "csv": "text/csv",
    "arrow": "application/vnd.apache.arrow.stream",
    "parquet": "application/vnd.apache.parquet",
}
CHUNK = 1 << 20
HTTP_TIMEOUT_S = 600
# A token is renewed before a call once it is this old (the embedded IdP's
# last 5 minutes), and the connection is opened again before a call after
# this long idle (well under the server's `server.idle_timeout_s`).
TOKEN_RENEW_S = 60.0
IDLE_REOPEN_S = 5.0


# ----------------------------------------------------------------------- lakehost


def write_config(work: Path, port: int, compression: str | None,
                 arrow_first: str = "lz4") -> tuple[Path, Path]:
    """<work>/lakehost.toml on <work>/lakehost-data (kept between servers:
    each serves the lake the first imported). `compression`: the typed
    copy's, or None for no typed copy; `arrow_first`: the compression of
    the Arrow file a `Prefer: result-format=arrow` query writes."""
    data_dir = work / "lakehost-data"
    config = work / "lakehost.toml"
    typed = "false" if compression is None else "true"
    config.write_text(
        "[server]\n"
        f"listen = {json.dumps(f'127.0.0.1:{port}')}\n"
        "metrics_listen = \"127.0.0.1:0\"\n"
        "[storage]\n"
        f"data_dir = {json.dumps(str(data_dir))}\n"
        f"s3_listen = {json.dumps(f'127.0.0.1:{free_port()}')}\n"
        "[query]\n"
        f"typed_results = {typed}\n"
        f"typed_results_compression = {json.dumps(compression or 'none')}\n"
        f"arrow_first_compression = {json.dumps(arrow_first)}\n"
    )
    return config, data_dir


def import_table(lakehost: Path, config: Path, source: Path) -> None:
    result = subprocess.run(
        [str(lakehost), "import", "--config", str(config), "--org", ORG,
         "--database", DATABASE, "--table", TABLE, str(source)],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"lakehost import failed:\n{result.stdout}{result.stderr}")


class Client:
    """lakehost's API over http.client (cheap on CPU, like query_bench's)."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        parsed = urllib.parse.urlsplit(base_url)
        self.api = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=HTTP_TIMEOUT_S)
        self.headers = {"Host": API_HOST}
        self.token_at = -TOKEN_RENEW_S
        self.last_call = time.monotonic()
        self.renew()

    def renew(self) -> None:
        """Before a call: a fresh token once the last is old (a scale-10 run
        outlives one), and a fresh connection after an idle spell (the
        server's idle timeout closes the kept one), as a client does."""
        now = time.monotonic()
        if now - self.last_call > IDLE_REOPEN_S:
            self.api.close()
        if now - self.token_at > TOKEN_RENEW_S:
            token = requests.post(
                f"{self.base_url}/realms/{ORG}/protocol/openid-connect/token",
                data={"grant_type": "client_credentials", "client_id": CLIENT_ID,
                      "client_secret": CLIENT_SECRET},
                timeout=10,
            ).json()["access_token"]
            self.headers["Authorization"] = f"Bearer {token}"
            self.token_at = now

    def call(self, method: str, path: str, body: dict | None = None,
             headers: dict | None = None) -> tuple[int, dict, bytes]:
        self.renew()
        all_headers = dict(self.headers, **(headers or {}))
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        self.api.request(method, path, body=data, headers=all_headers)
        response = self.api.getresponse()
        answer = response.status, dict(response.getheaders()), response.read()
        self.last_call = time.monotonic()
        return answer

    def run(self, sql: str, prefer: str | None = None) -> tuple[str, float]:
        """Submit (with `Prefer: <prefer>`), poll until final; the id and
        seconds to SUCCEEDED."""
        start = time.perf_counter()
        headers = {"Prefer": prefer} if prefer else None
        status, _, body = self.call("POST", "/v2/query", {"query": sql}, headers)
        if status != 202:
            raise RuntimeError(f"submit: {status} {body[:300]!r}")
        query_id = json.loads(body)["queryId"]
        while True:
            _, _, body = self.call("GET", f"/v2/query/{query_id}")
            state = json.loads(body)["status"]
            if state["state"] in FINAL_STATES:
                break
            time.sleep(min(0.05, max(0.001, (time.perf_counter() - start) * 0.02)))
        seconds = time.perf_counter() - start
        if state["state"] != "SUCCEEDED":
            raise RuntimeError(f"query {state}")
        return query_id, seconds

    def link(self, query_id: str, fmt: str) -> tuple[str, float]:
        """The signed link of `fmt`; seconds until it came (Parquet's first
        request makes the file). A request the gateway's 30 s limit ends
        (504) is asked again, as a client does: the conversion goes on and
        the next request joins it."""
        start = time.perf_counter()
        while True:
            status, headers, body = self.call("GET", f"/v2/query/{query_id}/csv?format={fmt}")
            if status != 504:
                break
        seconds = time.perf_counter() - start
        if status != 302:
            raise RuntimeError(f"link {fmt}: {status} {body[:300]!r}")
        return headers["location"], seconds

    def download_api(self, query_id: str, fmt: str) -> tuple[int, float]:
        """GET /result with Accept, read to the last byte: (bytes, seconds)."""
        self.renew()
        start = time.perf_counter()
        headers = dict(self.headers, Accept=MEDIA_TYPES[fmt])
        self.api.request("GET", f"/v2/query/{query_id}/result", headers=headers)
        response = self.api.getresponse()
        size = drain(response)
        self.last_call = time.monotonic()
        if response.status != 200:
            raise RuntimeError(f"/result {fmt}: {response.status}")
        return size, time.perf_counter() - start


def drain(response) -> int:
    size = 0
    while True:
        chunk = response.read(CHUNK)
        if not chunk:
            return size
        size += len(chunk)


def download_link(url: str) -> tuple[int, float]:
    """GET a signed link to the last byte on a fresh connection: (bytes, seconds)."""
    parsed = urllib.parse.urlsplit(url)
    start = time.perf_counter()
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=HTTP_TIMEOUT_S)
    connection.request("GET", f"{parsed.path}?{parsed.query}")
    response = connection.getresponse()
    size = drain(response)
    seconds = time.perf_counter() - start
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"link GET: {response.status}")
    return size, seconds


def remove_results(data_dir: Path) -> None:
    """Deletes the result files the runs left (only the bench's own lake)."""
    shutil.rmtree(data_dir / "lake" / "_results", ignore_errors=True)


# -------------------------------------------------------------------------- peers


def duckdb_peer(lake_dir: Path, out: Path,
                codecs: list[str]) -> dict[str, tuple[float, str]]:
    """DuckDB's COPY of the table to each format: {format: (seconds, how)};
    Arrow also with each of `codecs`, as `arrow <codec>`."""
    con = duckdb.connect()
    hive_types = ", ".join(f"'{c}': {'BIGINT' if t == pa.int64() else 'VARCHAR'}"
                           for c, t in PARTITION_COLS)
    pattern = str(lake_dir / TABLE / "**" / "*.parquet").replace("'", "''")
    con.execute(f"CREATE VIEW {TABLE} AS SELECT * FROM read_parquet('{pattern}', "
                f"hive_partitioning = true, hive_types = {{{hive_types}}})")
    timings: dict[str, tuple[float, str]] = {}
    for fmt, options in (("csv", "FORMAT csv, HEADER true, FORCE_QUOTE *"),
                         ("parquet", "FORMAT parquet, COMPRESSION zstd")):
        target = out / f"duckdb.{fmt}"
        start = time.perf_counter()
        con.execute(f"COPY ({SQL}) TO '{target}' ({options})")
        timings[fmt] = (time.perf_counter() - start, "COPY TO")
        target.unlink()
    target = out / "duckdb.arrows"
    try:
        con.execute("LOAD nanoarrow")
        start = time.perf_counter()
        con.execute(f"COPY ({SQL}) TO '{target}' (FORMAT arrows)")
        timings["arrow"] = (time.perf_counter() - start, "COPY TO (nanoarrow)")
    except duckdb.Error:
        start = time.perf_counter()
        write_ipc(con.sql(SQL).to_arrow_reader(), target, None)
        timings["arrow"] = (time.perf_counter() - start, "batches + pyarrow IPC writer")
    target.unlink()
    for compression in codecs:
        start = time.perf_counter()
        write_ipc(con.sql(SQL).to_arrow_reader(), target, compression)
        timings[f"arrow {compression}"] = (time.perf_counter() - start,
                                           f"batches + pyarrow IPC writer, {compression}")
        target.unlink()
    return timings


def datafusion_peer(lake_dir: Path, out: Path,
                    codecs: list[str]) -> dict[str, tuple[float, str]]:
    """DataFusion-python's writes of the table to each format, Arrow also
    with each of `codecs`."""
    ctx = datafusion.SessionContext()
    ctx.register_parquet(TABLE, f"{lake_dir / TABLE}/", table_partition_cols=PARTITION_COLS)
    timings: dict[str, tuple[float, str]] = {}
    target = out / "datafusion.csv"
    start = time.perf_counter()
    ctx.sql(SQL).write_csv(str(target), with_header=True)
    timings["csv"] = (time.perf_counter() - start, "write_csv")
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink()
    target = out / "datafusion.parquet"
    start = time.perf_counter()
    ctx.sql(SQL).write_parquet(str(target), compression="zstd", compression_level=1)
    timings["parquet"] = (time.perf_counter() - start, "write_parquet")
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink()
    target = out / "datafusion.arrows"
    for compression in [None, *codecs]:
        start = time.perf_counter()
        write_ipc((batch.to_pyarrow() for batch in ctx.sql(SQL).execute_stream()), target,
                  compression)
        key, how = ((f"arrow {compression}", f"batches + pyarrow IPC writer, {compression}")
                    if compression else ("arrow", "batches + pyarrow IPC writer"))
        timings[key] = (time.perf_counter() - start, how)
        target.unlink()
    return timings


def write_ipc(batches, target: Path, compression: str | None) -> None:
    """`batches` (pyarrow record batches, or a reader of them) written to
    `target` as an Arrow IPC stream, its buffers compressed with
    `compression` (pyarrow compresses a batch's buffers on its thread pool)."""
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(target), "wb") as sink:
        writer = None
        for batch in batches:
            if writer is None:
                writer = pa.ipc.new_stream(sink, batch.schema, options=options)
            writer.write_batch(batch)
        if writer is not None:
            writer.close()


# ---------------------------------------------------------------------------- main


def median(values: list[float]) -> float:
    return statistics.median(values)


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

    port = free_port()
    config, data_dir = write_config(work, port, None)
    shutil.rmtree(data_dir, ignore_errors=True)
    print(f"Importing {TABLE} ({rows:,} rows) into {data_dir}")
    import_table(lakehost, config, source)
    lake_dir = data_dir / "lake" / DATABASE
    env_log = os.environ.setdefault("RUST_LOG", "warn")

    print(f"\nEnvironment: lakehost {lakehost_version(lakehost)}, duckdb {duckdb.__version__}, "
          f"datafusion-python {datafusion.__version__}, pyarrow {pa.__version__}, "
          f"{os.cpu_count()} CPUs, scale {args.scale:g}, RUST_LOG={env_log}")
    print(f"Result: {SQL}: {rows:,} rows\n")

    # The query without a typed copy, then with one per compression; with
    # one, every format downloaded, each run from a fresh result.
    query_s: dict[str | None, list[float]] = {}
    convert_s: dict[str, list[float]] = {}  # Parquet made from the Arrow copy
    parquet_first_s: dict[str, list[float]] = {}  # Parquet asked for first: from the CSV
    link_s: dict[tuple[str, str], list[float]] = {}
    api_s: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    rss: dict[str | None, RssSampler] = {}
    csv_download_rss: list[RssSampler] = []  # the CSV link's download alone
    for compression in [None, *args.compressions]:
        config, _ = write_config(work, port, compression)
        log = work / f"server-{compression or 'untyped'}.log"
        with LakehostServer(lakehost, config, port, log) as server, \
                RssSampler(server.proc.pid) as sampler:
            rss[compression] = sampler
            client = Client(server.base_url)
            client.run(SQL)  # warm-up: the file cache, the catalog
            remove_results(data_dir)
            query_s[compression] = []
            for _ in range(args.runs):
                _, seconds = client.run(SQL)
                query_s[compression].append(seconds)
                remove_results(data_dir)
            if compression is None:
                continue
            convert_s[compression] = []
            for _ in range(args.runs):
                query_id, _ = client.run(SQL)
                for fmt in FORMATS:
                    url, seconds = client.link(query_id, fmt)
                    if fmt == "parquet":
                        convert_s[compression].append(seconds)
                        url, seconds = client.link(query_id, fmt)
                    with RssSampler(server.proc.pid) as download_rss:
                        size, download = download_link(url)
                    if fmt == "csv":
                        csv_download_rss.append(download_rss)
                    key = (compression, fmt)
                    sizes[key] = size
                    link_s.setdefault(key, []).append(seconds + download)
                    size, through_api = client.download_api(query_id, fmt)
                    if size != sizes[key]:
                        raise RuntimeError(f"{fmt}: /result sent {size} bytes, the link {sizes[key]}")
                    api_s.setdefault(key, []).append(through_api)
                remove_results(data_dir)
            # A caller whose first typed request is for Parquet: the file is
            # made from the CSV, with no Arrow copy on the way.
            parquet_first_s[compression] = []
            for _ in range(args.runs):
                query_id, _ = client.run(SQL)
                _, seconds = client.link(query_id, "parquet")
                parquet_first_s[compression].append(seconds)
                remove_results(data_dir)

    # Arrow first (`Prefer: result-format=arrow`): the query writes the
    # Arrow file alone; its link is then a download, and the CSV is made
    # from it on its first request.
    arrow_first: dict[str, dict[str, list[float]]] = {}
    arrow_first_mb: dict[str, float] = {}
    parquet_first: dict[str, list[float]] = {}
    for af in args.arrow_first:
        config, _ = write_config(work, port, args.compressions[0], af)
        log = work / f"server-arrow-first-{af}.log"
        with LakehostServer(lakehost, config, port, log) as server, \
                RssSampler(server.proc.pid) as sampler:
            rss[f"arrow first {af}"] = sampler
            client = Client(server.base_url)
            client.run(SQL, "result-format=arrow")  # warm-up
            remove_results(data_dir)
            times = arrow_first[af] = {"query": [], "link": [], "csv": []}
            for _ in range(args.runs):
                query_id, seconds = client.run(SQL, "result-format=arrow")
                times["query"].append(seconds)
                url, seconds = client.link(query_id, "arrow")
                size, download = download_link(url)
                times["link"].append(seconds + download)
                arrow_first_mb[af] = size / 1e6
                _, seconds = client.link(query_id, "csv")
                times["csv"].append(seconds)
                remove_results(data_dir)
            if parquet_first:
                continue
            # Parquet first (`Prefer: result-format=parquet`), on the first
            # of these servers: the query writes the Parquet file alone.
            parquet_first = {"query": [], "link": [], "csv": []}
            for _ in range(args.runs):
                query_id, seconds = client.run(SQL, "result-format=parquet")
                parquet_first["query"].append(seconds)
                url, seconds = client.link(query_id, "parquet")
                size, download = download_link(url)
                parquet_first["link"].append(seconds + download)
                parquet_first["mb"] = [size / 1e6]
                _, seconds = client.link(query_id, "csv")
                parquet_first["csv"].append(seconds)
                remove_results(data_dir)

    out = work / "peer-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    peers = {"duckdb": [], "datafusion-python": []}
    # The peers write Arrow uncompressed, and compressed as each Arrow-first
    # run was: the same format as lakehost's file.
    codecs = [c for c in args.arrow_first if c != "none"]
    for _ in range(args.runs):
        peers["duckdb"].append(duckdb_peer(lake_dir, out, codecs))
        peers["datafusion-python"].append(datafusion_peer(lake_dir, out, codecs))
    shutil.rmtree(out, ignore_errors=True)

    def peer_seconds(key: str) -> tuple[float, float]:
        """DuckDB's and DataFusion-python's median seconds writing `key`."""
        return (median([p[key][0] for p in peers["duckdb"]]),
                median([p[key][0] for p in peers["datafusion-python"]]))

    off = median(query_s[None])
    print(f"Query, submit to SUCCEEDED (median of {args.runs}): writes the result CSV, and "
          f"the Arrow copy when typed results are on and the columns do not read back from "
          f"the CSV (lineitem's do: its Arrow copy is read back on the first Arrow request, "
          f"timed in that format's link)")
    print(f"  typed results off: {off:.2f} s")
    for c in args.compressions:
        on = median(query_s[c])
        print(f"  on, Arrow compression {c:<4}: {on:.2f} s, the Arrow copy costs "
              f"{on - off:+.2f} s ({(on - off) / off * 100:+.0f}%); Arrow file "
              f"{sizes[(c, 'arrow')] / 1e6:,.1f} MB")
        print(f"  Parquet made on its first link request: from the Arrow copy (asked for "
              f"after Arrow) in {median(convert_s[c]):.2f} s; straight from the CSV (asked "
              f"for first, no Arrow copy made) in {median(parquet_first_s[c]):.2f} s")
    first = args.compressions[0]
    print(f"  CSV {sizes[(first, 'csv')] / 1e6:,.1f} MB, Parquet "
          f"{sizes[(first, 'parquet')] / 1e6:,.1f} MB")

    def end_to_end(fmt: str, c: str) -> float:
        """The query, [Parquet: making it as a caller asking for it first
        does], and the link's request and download."""
        made = median(parquet_first_s[c]) if fmt == "parquet" else 0.0
        return median(query_s[c]) + made + median(link_s[(c, fmt)])

    header = ["format", "MB", "link s", "link rows/s", "MB/s", "/result s", "/result rows/s",
              "end to end s", "e2e rows/s", "duckdb s", "duckdb rows/s",
              "datafusion-py s", "datafusion-py rows/s"]
    # The CSV's end to end includes the query, so its typed copy: one line per compression.
    lines = ([("csv", c) for c in args.compressions] + [("arrow", c) for c in args.compressions]
             + [("parquet", first)])
    table = []
    for fmt, c in lines:
        link = median(link_s[(c, fmt)])
        api = median(api_s[(c, fmt)])
        e2e = end_to_end(fmt, c)
        duck, fusion = peer_seconds(fmt)
        label = {"arrow": f"arrow ({c})",
                 "csv": f"csv ({c} copy)" if len(args.compressions) > 1 else "csv"}.get(fmt, fmt)
        size = sizes[(c, fmt)] / 1e6
        table.append([label, f"{size:,.1f}", f"{link:.2f}", f"{rows / link:,.0f}",
                      f"{size / link:,.0f}", f"{api:.2f}", f"{rows / api:,.0f}",
                      f"{e2e:.2f}", f"{rows / e2e:,.0f}", f"{duck:.2f}", f"{rows / duck:,.0f}",
                      f"{fusion:.2f}", f"{rows / fusion:,.0f}"])
    widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]
    print(f"\nWhole result, time to last byte (median of {args.runs}):")
    for r in [header] + table:
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    print("\nlakehost resident memory (sampled from /proc): "
          + "; ".join(f"{'typed results off, queries' if c is None else c if c.startswith('arrow first') else f'{c} copy, queries and downloads'}"
                      f" {s.before:.0f} MiB before, {s.peak:.0f} MiB peak (+{s.peak - s.before:.0f})"
                      for c, s in rss.items()))
    worst = max(csv_download_rss, key=lambda s: s.peak - s.before)
    print(f"  the CSV link's download alone ({sizes[(first, 'csv')] / 1e6:,.0f} MB): "
          f"{worst.before:.0f} MiB before, {worst.peak:.0f} MiB peak "
          f"(+{worst.peak - worst.before:.0f}; the largest growth of {len(csv_download_rss)} downloads)")
    append_summary(args.summary, bench="results", scale=args.scale,
                   work="CSV link download alone", rows=rows, bytes=sizes[(first, "csv")],
                   lakehost_s=median(link_s[(first, "csv")]),
                   rss_before_mib=worst.before, rss_peak_mib=worst.peak)
    for fmt, c in lines:
        e2e = end_to_end(fmt, c)
        append_summary(args.summary, bench="results", scale=args.scale,
                       work=f"whole result as {fmt} ({c})", rows=rows, bytes=sizes[(c, fmt)],
                       lakehost_s=e2e, rss_before_mib=rss[c].before, rss_peak_mib=rss[c].peak,
                       **dict(zip(("duckdb_s", "datafusion-python_s"), peer_seconds(fmt))))
    def first_line(label: str, fmt: str, times: dict, mb: float, sampler, work_name: str,
                   peer_key: str | None = None):
        """One written-first way's figures beside the peers writing `fmt`:
        as `peer_key` (the same format, compression too) when given, and as
        `fmt` (uncompressed Arrow) beside it."""
        key = peer_key or fmt
        duck, fusion = peer_seconds(key)
        query, link = median(times["query"]), median(times["link"])
        e2e = query + link
        print(f"\n{label}; median of {args.runs}): query {query:.2f} s (writes {mb:,.1f} MB, "
              f"no CSV), link + download {link:.2f} s, end to end {e2e:.2f} s, "
              f"{rows / e2e:,.0f} rows/s; DuckDB {duck:.2f} s ({e2e / duck:.2f}x, target at "
              f"most 1.5x), DataFusion-python {fusion:.2f} s ({e2e / fusion:.2f}x); its CSV "
              f"made on the first CSV link request in {median(times['csv']):.2f} s")
        extra = {}
        if key != fmt:
            plain_duck, plain_fusion = peer_seconds(fmt)
            print(f"  the peers writing {fmt} uncompressed: DuckDB {plain_duck:.2f} s "
                  f"({e2e / plain_duck:.2f}x), DataFusion-python {plain_fusion:.2f} s "
                  f"({e2e / plain_fusion:.2f}x)")
            extra = {"duckdb_uncompressed_s": plain_duck,
                     "datafusion-python_uncompressed_s": plain_fusion}
        append_summary(args.summary, bench="results", scale=args.scale, work=work_name,
                       rows=rows, bytes=int(mb * 1e6), lakehost_s=e2e,
                       rss_before_mib=sampler.before, rss_peak_mib=sampler.peak,
                       duckdb_s=duck, **{"datafusion-python_s": fusion}, **extra)

    for af, times in arrow_first.items():
        first_line(f"Arrow first (Prefer: result-format=arrow, {af}", "arrow", times,
                   arrow_first_mb[af], rss[f"arrow first {af}"],
                   f"whole result as arrow, arrow first ({af})",
                   None if af == "none" else f"arrow {af}")
    if parquet_first:
        first_line("Parquet first (Prefer: result-format=parquet", "parquet", parquet_first,
                   parquet_first["mb"][0], rss[f"arrow first {args.arrow_first[0]}"],
                   "whole result as parquet, parquet first")
    csv_link = median(link_s[(first, "csv")])
    for c in args.compressions:
        print(f"  Arrow ({c}) over CSV, link download rows/s: "
              f"{csv_link / median(link_s[(c, 'arrow')]):.2f}x (target: at least 3x)")
    print("  peers' Arrow: " + "; ".join(
        f"{name} {runs[0][key][1]}" for name, runs in peers.items()
        for key in runs[0] if key.startswith("arrow")))
    print("\nlink: the signed link's request (the first Arrow one reads the copy back from "
          "the CSV) + GET to the last byte; /result: GET "
          "/v2/query/{id}/result with Accept, to the last byte; end to end: the query "
          "(with that typed copy) + [Parquet: making it as its first typed request, from the "
          "CSV] + the link's download. Peers: the "
          "same rows from the same lake files written to a local file of each format.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Whole-result downloads from lakehost as CSV, Arrow and Parquet, beside "
                    "DuckDB and DataFusion-python writing the same rows.")
    parser.add_argument("--scale", type=float, default=1,
                        help="TPC-H scale factor; lineitem has ~6M rows per unit (default: 1)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs (default: 3)")
    parser.add_argument("--compressions", default="zstd",
                        type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
                        help="Arrow copy compressions to measure, comma separated, of none, "
                             "lz4, zstd (default: zstd, the server's default)")
    parser.add_argument("--arrow-first", default="lz4",
                        type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
                        help="compressions of the Arrow file written first (Prefer: "
                             "result-format=arrow) to measure, comma separated, of none, lz4, "
                             "zstd; empty for none (default: lz4, the server's default)")
    parser.add_argument("--summary", type=Path, metavar="FILE",
                        help="append the figures as JSON lines to FILE (bench/run-all)")
    parser.add_argument("--lakehost", type=Path, default=REPO_ROOT / "target/release/lakehost",
                        help="the lakehost binary (default: target/release/lakehost)")
    parser.add_argument("--work", type=Path, default=BENCH_DIR / ".work-results",
                        help="data, config, lake and logs (default: bench/.work-results)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.scale <= 0:
        parser.error("--runs must be >= 1, --scale > 0")
    if not args.compressions or set(args.compressions) - {"none", "lz4", "zstd"}:
        parser.error("--compressions: a list of none, lz4, zstd")
    if set(args.arrow_first) - {"none", "lz4", "zstd"}:
        parser.error("--arrow-first: a list of none, lz4, zstd")
    return args


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    try:
        run(args)
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, OSError, subprocess.CalledProcessError,
            requests.RequestException, http.client.HTTPException) as e:
        sys.exit(f"result_bench: {e}")


if __name__ == "__main__":
    main()
