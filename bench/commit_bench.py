#!/usr/bin/env python3
"""Load-commit benchmark: TPC-H lineitem (with a service_client_id column)
committed into a lake table through lakehost's load API, beside the same
rows rewritten by DuckDB and DataFusion-python in process, in one run.

Per round, lakehost: a load, a descriptor, the import file uploaded with
boto3 (one PUT, timed apart), then the commit, timed from
`POST /load/{id}/commit` to the status SUCCESS seen by polling (every 20 ms;
the spec's clients poll every 5 s). The commit runs the default pipeline:
validate the files, enforce the service clients, verify the check_sum
(`count(*)`, `sum(l_quantity)`, `sum(l_extendedprice)`, computed here by
pyarrow), match the schema, insert: the rows written partitioned by
service_client_id (and svc$load_id). The server's resident memory is
sampled from /proc every 20 ms during the commit.

Peers, on the same file, writing what lakehost writes (uncompressed parquet,
one directory per service_client_id):

* DuckDB: `COPY (SELECT * FROM read_parquet(...)) TO ... (PARTITION_BY
  service_client_id)`, and the same after the three checksum aggregates and
  the service clients' GROUP BY (the work a commit does);
* DataFusion-python: the aggregates and the GROUP BY, then
  `write_parquet(..., partition_by=service_client_id)`.

Run it through ``bench/run-commit`` (the virtualenv); see README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

import boto3
import datafusion
import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import requests
from botocore.config import Config

from query_bench import (
    RssSampler,
    append_summary,
    API_HOST,
    CLIENT_ID,
    CLIENT_SECRET,
    ORG,
    LakehostServer,
    free_port,
    generate_tpch,
    lakehost_version,
    write_config,
    write_import_file,
)

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
TABLE = "lineitem"
POLL_S = 0.02
# Reopen the API connection before a call after this long idle: well under
# the server's idle timeout (`server.idle_timeout_s`).
IDLE_REOPEN_S = 5.0
# What lakehost's lake files are: parquet-rs's default writer properties.
COMPRESSION = "uncompressed"


def check_sum(source: Path, copies: int) -> dict[str, object]:
    """The commit's check_sum of `copies` copies of the file, computed by pyarrow."""
    table = pq.read_table(source, columns=["l_quantity", "l_extendedprice"])
    return {
        "count(*)": table.num_rows * copies,
        "sum(l_quantity)": str(pc.sum(table["l_quantity"]).as_py() * copies),
        "sum(l_extendedprice)": str(pc.sum(table["l_extendedprice"]).as_py() * copies),
    }


def copies_of(source: Path, copies: int) -> Path:
    """A directory holding `copies` hard links of `source` (one file, when 1):
    the files of one load, read by the peers as one table."""
    if copies == 1:
        return source
    folder = source.parent / f"{source.stem}-x{copies}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for number in range(copies):
        os.link(source, folder / f"part-{number}.parquet")
    return folder


class Loader:
    """lakehost's load API as an uploading client uses it."""

    def __init__(self, base_url: str, s3_url: str):
        self.base_url, self.s3_url = base_url, s3_url
        self.renew()

    def renew(self) -> None:
        """A fresh token, and a fresh connection: the peers' rounds outlast
        the server's idle timeout at larger scales."""
        parsed = urllib.parse.urlsplit(self.base_url)
        self.api = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
        self.last_call = time.monotonic()
        token = requests.post(
            f"{self.base_url}/realms/{ORG}/protocol/openid-connect/token",
            data={"grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
            timeout=10,
        ).json()["access_token"]
        self.headers = {"Host": API_HOST, "Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        # A connection left idle while files upload (minutes at scale 10) is
        # closed by the server's idle timeout: open a fresh one first, as a
        # pooling client would, rather than send a POST on a closed socket.
        if time.monotonic() - self.last_call > IDLE_REOPEN_S:
            self.api.close()
        self.api.request(method, path, body=data, headers=self.headers)
        self.last_call = time.monotonic()
        response = self.api.getresponse()
        payload = response.read()
        self.last_call = time.monotonic()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:500]!r}")
        return json.loads(payload) if payload else {}

    def upload(self, sources: list[Path], table: str) -> tuple[str, float]:
        """A load of `table` with each of `sources` uploaded as one of its
        files; its id and the uploads' seconds."""
        load_id = self.call("POST", "/v2/load", {"load_type": "APPEND_ONLY", "table_name": table})["loadId"]
        seconds = 0.0
        for number, source in enumerate(sources):
            descriptor = self.call("POST", f"/v2/load/{load_id}/file", {"file_key": f"rows{number}"})
            credentials = descriptor["sts_credentials"]
            s3 = boto3.client(
                "s3", endpoint_url=self.s3_url, region_name="us-east-1",
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"],
                config=Config(s3={"addressing_style": "path"}),
            )
            start = time.perf_counter()
            with open(source, "rb") as body:
                s3.put_object(Bucket=descriptor["bucket"], Key=descriptor["path"], Body=body)
            seconds += time.perf_counter() - start
        return load_id, seconds

    def commit(self, load_id: str, sums: dict) -> float:
        """Seconds from the commit request to SUCCESS."""
        start = time.perf_counter()
        self.call("POST", f"/v2/load/{load_id}/commit", {"check_sum": sums})
        while True:
            status = self.call("GET", f"/v2/load/{load_id}")
            if status["LoadStatus"] == "SUCCESS":
                return time.perf_counter() - start
            if status["LoadStatus"] == "FAIL":
                raise RuntimeError(f"commit failed: {json.dumps(status)[:1000]}")
            time.sleep(POLL_S)


def duckdb_rewrite(source: Path, target: Path, with_checks: bool) -> float:
    shutil.rmtree(target, ignore_errors=True)
    if source.is_dir():
        source = source / "*.parquet"
    con = duckdb.connect()
    start = time.perf_counter()
    if with_checks:
        con.sql(f"SELECT count(*), sum(l_quantity), sum(l_extendedprice) FROM read_parquet('{source}')").fetchall()
        con.sql(f"SELECT service_client_id FROM read_parquet('{source}') GROUP BY 1").fetchall()
    con.sql(
        f"COPY (SELECT * FROM read_parquet('{source}')) TO '{target}' "
        f"(FORMAT parquet, PARTITION_BY (service_client_id), COMPRESSION {COMPRESSION})"
    )
    seconds = time.perf_counter() - start
    con.close()
    return seconds


def datafusion_rewrite(source: Path, target: Path) -> float:
    shutil.rmtree(target, ignore_errors=True)
    ctx = datafusion.SessionContext()
    start = time.perf_counter()
    ctx.register_parquet("staged", str(source))
    ctx.sql("SELECT count(*), sum(l_quantity), sum(l_extendedprice) FROM staged").collect()
    ctx.sql("SELECT service_client_id FROM staged GROUP BY service_client_id").collect()
    options = datafusion.dataframe.DataFrameWriteOptions(partition_by="service_client_id")
    ctx.table("staged").write_parquet(str(target), compression=COMPRESSION, write_options=options)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=1,
                        help="files in each load: the import file uploaded this many times "
                             "(2 at scale 10 makes a 5.2 GB load; default: 1)")
    parser.add_argument("--lakehost", default=str(REPO_ROOT / "target/release/lakehost"))
    parser.add_argument("--work", default=str(BENCH_DIR / ".work"))
    parser.add_argument("--summary", type=Path, metavar="FILE",
                        help="append the figures as JSON lines to FILE (bench/run-all)")
    args = parser.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    lakehost = Path(args.lakehost).resolve()

    tpch = generate_tpch(work, args.scale)
    source = work / "import" / f"sf{args.scale:g}" / f"{TABLE}.parquet"
    source.parent.mkdir(parents=True, exist_ok=True)
    write_import_file(TABLE, tpch / f"{TABLE}.parquet", source)
    if args.files < 1:
        sys.exit("--files must be >= 1")
    rows = pq.ParquetFile(source).metadata.num_rows * args.files
    size_mb = source.stat().st_size * args.files / 1e6
    sums = check_sum(source, args.files)
    peers_source = copies_of(source, args.files)
    print(f"lakehost {lakehost_version(lakehost)}, datafusion-python {datafusion.__version__}, "
          f"duckdb {duckdb.__version__}, os.cpu_count() = {os.cpu_count()}")
    print(f"Commit of {rows:,} rows ({size_mb:.0f} MB parquet in {args.files} file(s)), "
          f"TPC-H scale {args.scale:g}, "
          f"median of {args.runs} rounds after a warm-up")

    api, s3 = free_port(), free_port()
    config, _ = write_config(work, api, s3)
    times: dict[str, list[float]] = {}
    uploads, peaks = [], []
    out = work / "rewrite"
    with LakehostServer(lakehost, config, api, work / "server.log") as server:
        loader = Loader(server.base_url, f"http://127.0.0.1:{s3}")
        for round in range(args.runs + 1):
            loader.renew()
            load_id, upload_s = loader.upload([source] * args.files, f"{TABLE}_commit")
            with RssSampler(server.proc.pid) as rss:
                commit_s = loader.commit(load_id, sums)
            duck = duckdb_rewrite(peers_source, out, with_checks=False)
            duck_checks = duckdb_rewrite(peers_source, out, with_checks=True)
            fusion = datafusion_rewrite(peers_source, out)
            if round == 0:
                continue  # warm-up
            uploads.append(upload_s)
            peaks.append((rss.before, rss.peak))
            for name, seconds in (("lakehost commit (default pipeline)", commit_s),
                                  ("duckdb partitioned rewrite", duck),
                                  ("duckdb checks + partitioned rewrite", duck_checks),
                                  ("datafusion-python checks + partitioned rewrite", fusion)):
                times.setdefault(name, []).append(seconds)
    shutil.rmtree(out, ignore_errors=True)

    duck = statistics.median(times["duckdb partitioned rewrite"])
    fusion = statistics.median(times["datafusion-python checks + partitioned rewrite"])
    print(f"  {'work':48} {'s':>7} {'rows/s':>11} {'x duckdb':>9} {'x datafusion':>13}")
    for name, samples in times.items():
        seconds = statistics.median(samples)
        print(f"  {name:48} {seconds:7.2f} {rows / seconds:11,.0f} {seconds / duck:9.2f} {seconds / fusion:13.2f}")
    print(f"  upload (boto3 put_object, not in the commit)   {statistics.median(uploads):7.2f}")
    before, peak = max(p[0] for p in peaks), max(p[1] for p in peaks)
    print(f"lakehost resident memory during the commits: {before:.0f} MiB before, {peak:.0f} MiB peak "
          f"(+{peak - before:.0f} MiB)")
    work_name = f"commit {TABLE}" + (f" x{args.files} files" if args.files > 1 else "")
    append_summary(args.summary, bench="commit", scale=args.scale, work=work_name,
                   rows=rows, rss_before_mib=before, rss_peak_mib=peak,
                   lakehost_s=statistics.median(times["lakehost commit (default pipeline)"]),
                   duckdb_s=duck, **{"datafusion-python_s": fusion})
    print("Targets (issue 17): the commit within 1.3x of DuckDB's partitioned rewrite and at or under "
          "DataFusion's checks + rewrite.")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
