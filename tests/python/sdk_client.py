"""Drives the real Comotion SDK (comotion-sdk 1.2.2 from PyPI) against a
lakehost server, for the integration tests, calling it as its users do.

The SDK hard-codes its hosts (https://<org>.api.comodash.io/v2 and
https://auth.comotion.us/auth/realms/<org>): this process, and only it,
resolves those names to the test server's API port and the storage
endpoint's name to its upload port, and trusts the test's certificate.
lakehost itself is not patched.

Usage: sdk_client.py COMMAND JSON_ARGS; prints one JSON object.
"""

import contextlib
import json
import os
import socket
import sys


def resolve_to_test_server(names):
    """names: {"auth.comotion.us": port, "comodash.io": port, ...}; a host
    matches a name or any of its subdomains."""
    original = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else (host or "")
        for suffix, target in names.items():
            if name == suffix or name.endswith("." + suffix):
                return original("127.0.0.1", target, *args, **kwargs)
        return original(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    # The SDK prints progress; only the answer goes to stdout.
    with contextlib.redirect_stdout(sys.stderr):
        answer = run(command, args)
    print(json.dumps(answer))


def run(command, args):
    # Before the SDK makes any TLS context or S3 client.
    for variable in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE"):
        os.environ[variable] = args["ca"]
    os.environ["AWS_ENDPOINT_URL_S3"] = args["storage_url"]
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    resolve_to_test_server(args["resolve"])

    import pandas as pd
    from comotion import Auth
    from comotion.dash import DashConfig, Load, Query

    auth = Auth(
        args["org"],
        entity_type=Auth.APPLICATION,
        application_client_id=args["client_id"],
        application_client_secret=args["client_secret"],
    )
    config = DashConfig(auth)

    if command == "query":
        query = Query(config=config, query_text=args["sql"])
        ended = query.wait_to_complete()
        out = {"query_id": query.query_id, "state": ended.status.state}
        if ended.status.state == "SUCCEEDED":
            query.download_csv(args["csv_path"])
            out["csv_bytes"] = os.path.getsize(args["csv_path"])
            streamed = query.get_csv_for_streaming()
            out["streamed_bytes"] = sum(len(chunk) for chunk in streamed.stream(1 << 16))
            streamed.release_conn()
            query.stop()
            out["state_after_stop"] = query.state()
        else:
            out["reason"] = ended.status.state_change_reason
        return out
    elif command == "load":
        load = Load(
            config=config,
            load_type="APPEND_ONLY",
            table_name=args["table"],
        )
        load.upload_df(pd.DataFrame(args["rows"]))
        load.commit(check_sum=args["check_sum"])
        waited = load.wait_to_complete()
        info = load.get_load_info()
        return {
            "load_id": load.load_id,
            "waited": waited,
            "status": info.load_status,
            "error_type": info.error_type,
            "error_messages": info.error_messages,
        }
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
