"""Upload throughput of lakehost's two upload routes, beside dd.

Starts `lakehost serve` on free ports with its data under --work, makes one
file of --size-mb MiB on the same disk, and per round: writes the same amount
with dd (conv=fdatasync, the disk's own rate), uploads the file with the
descriptor's form POST (curl -F, which streams the file), with boto3
put_object (one PUT) and with boto3 upload_file (multipart, 8 MiB parts).
Prints the median seconds and MB/s per route, the ratio to dd, and the
server's peak resident memory (VmHWM) so that streaming is visible.

Usage: bench/run-upload [--size-mb 1024] [--runs 3] [--lakehost BIN] [--work DIR]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import boto3
import requests
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

REPO = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, work):
    data = work / "lakehost-data"
    shutil.rmtree(data, ignore_errors=True)
    api, s3 = free_port(), free_port()
    config = work / "lakehost.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:{api}"\nmetrics_listen = "127.0.0.1:0"\n'
        f'[storage]\ndata_dir = "{data}"\ns3_listen = "127.0.0.1:{s3}"\n'
    )
    log = open(work / "server.log", "w")
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    server = subprocess.Popen([binary, "serve", "--config", str(config)], stdout=log, stderr=log, env=env)
    base = f"http://localhost:{api}"
    for _ in range(300):
        try:
            if requests.get(f"{base}/realms/demo/.well-known/openid-configuration", timeout=1).ok:
                return server, base, f"http://localhost:{s3}"
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    server.kill()
    sys.exit(f"server did not start; see {work / 'server.log'}")


def token(base):
    reply = requests.post(
        f"{base}/realms/demo/protocol/openid-connect/token",
        data={"grant_type": "client_credentials", "client_id": "demo-admin", "client_secret": "demo-admin-secret"},
    )
    reply.raise_for_status()
    return reply.json()["access_token"]


def descriptor(base, bearer, load_id, file_key):
    reply = requests.post(
        f"{base}/v2/load/{load_id}/file",
        headers={"Authorization": f"Bearer {bearer}"},
        json={"file_key": file_key},
    )
    reply.raise_for_status()
    return reply.json()


def peak_rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lakehost", default=str(REPO / "target/release/lakehost"))
    parser.add_argument("--work", default=str(REPO / "bench/.work-upload"))
    args = parser.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    size = args.size_mb * 1024 * 1024

    source = work / "upload.bin"
    if not source.exists() or source.stat().st_size != size:
        block = os.urandom(8 * 1024 * 1024)
        with open(source, "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)
            f.write(block[: size % len(block)])

    server, base, endpoint = start_server(args.lakehost, work)
    try:
        bearer = token(base)
        load = requests.post(
            f"{base}/v2/load",
            headers={"Authorization": f"Bearer {bearer}"},
            json={"load_type": "APPEND_ONLY", "table_name": "bench"},
        )
        load.raise_for_status()
        load_id = load.json()["loadId"]
        baseline_rss = peak_rss_mib(server.pid)

        def dd():
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={work / 'dd.bin'}", "bs=8M", f"count={args.size_mb // 8}", "conv=fdatasync"],
                check=True,
                capture_output=True,
            )

        def form_post():
            d = descriptor(base, bearer, load_id, "form")
            command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}"]
            for name, value in d["presigned_url"]["fields"].items():
                command += ["-F", f"{name}={value}"]
            command += ["-F", f"file=@{source}", d["presigned_url"]["url"]]
            status = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            if status != "204":
                sys.exit(f"form POST answered {status}")

        def client(d):
            c = d["sts_credentials"]
            return boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id=c["AccessKeyId"],
                aws_secret_access_key=c["SecretAccessKey"],
                aws_session_token=c["SessionToken"],
                config=Config(s3={"addressing_style": "path"}),
            )

        def put_object():
            d = descriptor(base, bearer, load_id, "put")
            with open(source, "rb") as body:
                client(d).put_object(Bucket=d["bucket"], Key=d["path"], Body=body)

        def upload_file():
            d = descriptor(base, bearer, load_id, "multipart")
            config = TransferConfig(multipart_threshold=8 * 1024 * 1024, multipart_chunksize=8 * 1024 * 1024)
            client(d).upload_file(str(source), d["bucket"], d["path"], Config=config)

        routes = [("dd (conv=fdatasync)", dd), ("form POST (curl -F)", form_post),
                  ("boto3 put_object", put_object), ("boto3 upload_file (multipart)", upload_file)]
        for _, fn in routes[1:]:
            fn()  # warm-up: the code paths, the page cache of the source file
        times = {name: [] for name, _ in routes}
        for _ in range(args.runs):
            for name, fn in routes:
                times[name].append(timed(fn))

        print(f"Upload of {args.size_mb} MiB, median of {args.runs} rounds (os.cpu_count() = {os.cpu_count()}):")
        print(f"  {'route':32} {'seconds':>8} {'MB/s':>8} {'vs dd':>6}")
        dd_rate = size / 1e6 / statistics.median(times[routes[0][0]])
        for name, _ in routes:
            seconds = statistics.median(times[name])
            rate = size / 1e6 / seconds
            print(f"  {name:32} {seconds:8.2f} {rate:8.0f} {rate / dd_rate:6.2f}")
        print(f"Server resident memory: {baseline_rss:.0f} MiB before, {peak_rss_mib(server.pid):.0f} MiB peak")
    finally:
        server.terminate()
        server.wait()
        (work / "dd.bin").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
