#!/usr/bin/env python3
"""Distributed reads benchmark: one query run by one lakehost process, then
spread over 1, 2 and 3 worker processes, beside DataFusion-python reading
the same files.

The lake is on S3, because a lake on local disk cannot be distributed:
``--s3 moto`` (``.ci/s3``, the tests' server) or, by default, ``--s3 fs``
(``bench/s3-fs``: s3s-fs, objects as plain files; moto, in Python, sets the
pace of big scans). The benchmark:

1. generates TPC-H parquet with ``tpchgen-cli`` (``query_bench.py``'s
   helpers, the same ``service_client_id`` column) and imports every table
   into ``s3://lhb`` with ``lakehost import``;
2. starts three worker replicas (``[distributed] enabled``, no workers of
   their own) and, for each worker count 0-3, a coordinator naming that many
   of them, all on one SQLite store file;
3. times each query through the HTTP API (submit, poll, first page; median
   of ``--runs``) and DataFusion-python on the same S3 files in process;
4. for each distributed query, one more run: the bytes each boundary
   between stages moved (the coordinator's log, ``engine::distributed::
   report``: Arrow in memory), the bytes the workers wrote to sockets
   (/proc wchar: compressed stage output, plus their requests to S3), and
   the CPU seconds every process spent.

On a machine with fewer cores than processes, distribution can only add
work: the figures measure its overhead, and the bytes moved are what a
model of larger clusters needs (bench/README.md).

Run it through ``bench/run-distributed``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import boto3
import datafusion
from datafusion.object_store import AmazonS3

sys.path.insert(0, str(Path(__file__).resolve().parent))
import query_bench as qb  # noqa: E402  (beside this file)

QUERIES = {name: qb.QUERIES[name] for name in ("Q1", "Q3", "Q6", "Q12")}
QUERIES["join"] = """
    SELECT c_mktsegment, count(*) AS lines, sum(l_quantity) AS quantity
    FROM lineitem JOIN orders ON l_orderkey = o_orderkey
                  JOIN customer ON o_custkey = c_custkey
    GROUP BY c_mktsegment ORDER BY c_mktsegment"""
SECRET = "distributed-benchmark-secret-0123456789abcdef"


def s3_environment(server: str, work: Path) -> tuple[dict[str, str], int]:
    """Starts the S3 server (`moto` through .ci/s3, `fs` through bench/s3-fs);
    its AWS_* variables and its pid."""
    if server == "moto":
        command = ["bash", str(qb.REPO_ROOT / ".ci" / "s3")]
    else:
        root = work / "s3-root"
        shutil.rmtree(root, ignore_errors=True)  # the last run's lake
        command = ["bash", str(qb.BENCH_DIR / "s3-fs"), str(root)]
    out = subprocess.run(command, capture_output=True, text=True)
    env = {}
    for line in out.stdout.splitlines():
        match = re.match(r"export (\w+)=(.*)", line)
        if match:
            env[match.group(1)] = match.group(2)
    if "AWS_ENDPOINT_URL" not in env:
        raise RuntimeError(f".ci/s3 failed (is an S3 server left on its port?):\n"
                           f"{out.stdout}{out.stderr}")
    pid = int(env.pop("LAKEHOST_TEST_S3_PID"))
    env.pop("LAKEHOST_TEST_S3_ENDPOINT", None)
    return env, pid


class Process:
    """One `lakehost serve` with its own data dir and ports, on the shared store and lake."""

    def __init__(self, lakehost: Path, work: Path, name: str, env: dict[str, str]):
        self.name = name
        self.log = work / f"{name}.log"
        data = work / name
        data.mkdir(parents=True, exist_ok=True)
        full = {**os.environ, **env,
                "LAKEHOST_STORAGE_DATA_DIR": str(data),
                "LAKEHOST_SERVER_LISTEN": "127.0.0.1:0",
                "LAKEHOST_STORAGE_S3_LISTEN": "127.0.0.1:0",
                "LAKEHOST_SERVER_METRICS_LISTEN": "127.0.0.1:0",
                "LAKEHOST_DISTRIBUTED_WORKER_LISTEN": "127.0.0.1:0",
                "RUST_LOG": "warn,lakehost::engine::distributed::report=info"}
        self.proc = subprocess.Popen([str(lakehost), "serve"], env=full, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "wb"), stdin=subprocess.DEVNULL,
                                     text=True)
        self.api = self.worker = None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("lakehost listening on "):
                self.api = line.removeprefix("lakehost listening on ")
            if line.startswith("Worker:"):
                self.worker = line.split()[1]
            if line.startswith("Get a token") or line.startswith("Tokens come from"):
                break
        if self.api is None:
            raise RuntimeError(f"{name} did not start; see {self.log}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def sent_bytes(processes: list[Process]) -> int:
    """Bytes the processes wrote through system calls (/proc/<pid>/io wchar)."""
    total = 0
    for process in processes:
        for line in Path(f"/proc/{process.proc.pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                total += int(line.split()[1])
    return total


MOVED = re.compile(r"(shuffle|coalesce|broadcast) (\d+) B (\d+) rows")


def stage_reports(coordinator: Process) -> list[str]:
    """The coordinator's log lines saying what a distributed read's stage
    boundaries moved (``engine::distributed::report``), oldest first."""
    return [line for line in coordinator.log.read_text(errors="replace").splitlines()
            if "distributed read: what each boundary" in line]


def measured_run(engine: qb.LakehostEngine, sql: str, coordinator: Process,
                 workers: list[Process]) -> tuple[int, list[tuple[str, int, int]]]:
    """One run of `sql`: the bytes the workers wrote to sockets (/proc wchar:
    compressed stage output to the coordinator and to each other, plus their
    few requests to S3) and what each stage boundary moved, top down, as
    (boundary, bytes, rows); none when the plan was kept whole."""
    reports = len(stage_reports(coordinator))
    before = sent_bytes(workers)
    engine.run(sql)
    written = sent_bytes(workers) - before
    time.sleep(0.2)  # the report is logged right after the last row
    new = stage_reports(coordinator)[reports:]
    if not new:
        return written, []
    return written, [(kind, int(b), int(r)) for kind, b, r in MOVED.findall(new[-1])]


def stages_cell(stages: list[tuple[str, int, int]]) -> str:
    if not stages:
        return "kept whole (no stages)"
    def size(b: int) -> str:
        return f"{b / 1e6:.1f} MB" if b >= 100_000 else f"{b / 1e3:.1f} kB"
    return ", ".join(f"{kind} {size(b)}/{r:,} rows" for kind, b, r in stages)


def datafusion_on_s3(env: dict[str, str], bucket: str, lake_prefix: str) -> datafusion.SessionContext:
    """DataFusion-python reading the very same lake files from the same S3 server."""
    ctx = datafusion.SessionContext()
    store = AmazonS3(bucket_name=bucket, region=env.get("AWS_REGION", "us-east-1"),
                     access_key_id=env["AWS_ACCESS_KEY_ID"],
                     secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                     endpoint=env["AWS_ENDPOINT_URL"], allow_http=True)
    ctx.register_object_store("s3://", store, bucket)
    for table in qb.TABLES:
        ctx.register_parquet(table, f"s3://{bucket}/{lake_prefix}/{table}/",
                             table_partition_cols=qb.PARTITION_COLS)
    return ctx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lakehost", type=Path,
                        default=qb.REPO_ROOT / "target" / "release" / "lakehost")
    parser.add_argument("--work", type=Path, default=qb.BENCH_DIR / ".work-distributed")
    parser.add_argument("--workers", type=int, default=3,
                        help="the most worker processes a coordinator names (0: local only)")
    parser.add_argument("--s3", choices=["fs", "moto"], default="fs",
                        help="the S3 server: s3s-fs (bench/s3-fs) or moto (.ci/s3)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    env, server = s3_environment(args.s3, args.work.resolve())
    try:
        run(args, env)
    finally:
        os.kill(server, signal.SIGTERM)
        # The lake is imported again on every run: s3s-fs's copy goes.
        shutil.rmtree(args.work.resolve() / "s3-root", ignore_errors=True)


def run(args: argparse.Namespace, env: dict[str, str]) -> None:
    work = args.work.resolve()
    lakehost = args.lakehost.resolve()
    # The S3 server is new each run. A short bucket, the lake at its root:
    # s3s-fs keeps a multipart upload's state in one file whose name holds
    # the bucket and the key in base64, and lakehost's longest keys
    # (partition, load id, file) leave room only for that.
    bucket = "lhb"
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                 aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)
    store_file = work / "store.db"
    for leftover in work.glob("store.db*"):
        leftover.unlink()
    shared = {**env,
              "LAKEHOST_STORAGE_DATABASE_URL": f"sqlite:{store_file}",
              "LAKEHOST_STORAGE_LAKE_URL": f"s3://{bucket}",
              "LAKEHOST_DISTRIBUTED_SECRET": SECRET,
              "LAKEHOST_QUERY_READ_CACHE_BYTES": "0"}

    tpch = qb.generate_tpch(work, args.scale)
    import_dir = work / f"import-sf{args.scale:g}"
    import_dir.mkdir(exist_ok=True)
    qb.prepare_import_files(tpch, import_dir)
    config = work / "import.toml"
    config.write_text(f"[storage]\ndata_dir = {json.dumps(str(work / 'import-data'))}\n"
                      f"database_url = {json.dumps('sqlite:' + str(store_file))}\n"
                      f"lake_url = {json.dumps(f's3://{bucket}')}\n")
    os.environ.update(env)
    start = time.perf_counter()
    qb.import_tables(lakehost, config, import_dir)
    print(f"imported into s3://{bucket} in {time.perf_counter() - start:.1f} s")

    on = {**shared, "LAKEHOST_DISTRIBUTED_ENABLED": "true"}
    workers: list[Process] = []
    times: dict[str, dict[str, float]] = {name: {} for name in QUERIES}
    shuffles: dict[str, dict[int, int]] = {name: {} for name in QUERIES}
    stages: dict[str, dict[int, list[tuple[str, int, int]]]] = {name: {} for name in QUERIES}
    cpu: dict[int, float] = {}  # CPU seconds per query run
    try:
        workers.extend(Process(lakehost, work, f"worker{i}", on) for i in range(args.workers))
        peer = datafusion_on_s3(env, bucket, qb.DATABASE)
        for n in range(args.workers + 1):
            coordinator_env = dict(shared)
            if n:
                coordinator_env.update({
                    "LAKEHOST_DISTRIBUTED_ENABLED": "true",
                    "LAKEHOST_DISTRIBUTED_WORKERS": ",".join(w.worker for w in workers[:n]),
                    "LAKEHOST_DISTRIBUTED_MIN_SCAN_BYTES": "1",
                    "LAKEHOST_DISTRIBUTED_BYTES_PER_TASK": str(16 << 20),
                })
            coordinator = Process(lakehost, work, f"coordinator-{n}", coordinator_env)
            engine = qb.LakehostEngine(coordinator.api)
            everyone = [coordinator, *workers]
            cpu_before = sum(p.cpu_seconds() for p in everyone)
            try:
                for name, sql in QUERIES.items():
                    engine.run(sql)  # warm-up
                    runs = [engine.run(sql).seconds for _ in range(args.runs)]
                    times[name][f"{n} workers" if n else "local"] = statistics.median(runs)
                    if n:
                        shuffles[name][n], stages[name][n] = measured_run(
                            engine, sql, coordinator, workers[:n])
                # Each query ran a warm-up, the timed runs and, distributed,
                # the byte-counting run.
                run_count = len(QUERIES) * (1 + args.runs + (1 if n else 0))
                cpu[n] = (sum(p.cpu_seconds() for p in everyone) - cpu_before) / run_count
            finally:
                coordinator.stop()
        for name, sql in QUERIES.items():
            peer.sql(sql).collect()
            runs = []
            for _ in range(args.runs):
                start = time.perf_counter()
                peer.sql(sql).collect()
                runs.append(time.perf_counter() - start)
            times[name]["DataFusion-python"] = statistics.median(runs)
        lineitem = peer.sql("SELECT count(*) FROM lineitem").collect()[0].column(0)[0].as_py()
    finally:
        for worker in workers:
            worker.stop()

    columns = ["local", *[f"{n} workers" for n in range(1, args.workers + 1)], "DataFusion-python"]
    server = "moto" if args.s3 == "moto" else "s3s-fs"
    print(f"\nTPC-H scale {args.scale:g} on S3 ({server}), {os.cpu_count()} cores, "
          f"median of {args.runs}; seconds (x local)")
    print("| query | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in QUERIES:
        local = times[name]["local"]
        cells = [f"{times[name][c]:.3f} ({times[name][c] / local:.2f}x)" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nThe same as lineitem rows read per second, millions ({lineitem:,} rows)")
    print("| query | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in QUERIES:
        cells = [f"{lineitem / times[name][c] / 1e6:.1f}" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.workers:
        print("\nWhat each boundary between stages moved in one run, top down (Arrow in "
              "memory, from the coordinator's report)")
        for name in QUERIES:
            for n in range(1, args.workers + 1):
                print(f"  {name}, {n} workers: {stages_cell(stages[name][n])}")
        print("\nMB the workers wrote to sockets in one run (compressed stage output to the "
              "coordinator and to each other, and S3 requests; /proc wchar)")
        print("| query | " + " | ".join(f"{n} workers" for n in range(1, args.workers + 1)) + " |")
        print("|---" * (args.workers + 1) + "|")
        for name in QUERIES:
            cells = [f"{shuffles[name][n] / 1e6:.2f}" for n in range(1, args.workers + 1)]
            print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nCPU seconds of all lakehost processes per query run, averaged over the set")
    for n, seconds in cpu.items():
        label = "local" if n == 0 else f"{n} workers"
        print(f"  {label}: {seconds:.3f} s ({seconds / cpu[0]:.2f}x local)")


if __name__ == "__main__":
    main()
