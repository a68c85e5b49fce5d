"""Drives the real Comotion SDK (comotion-sdk 1.2.2 from PyPI) against a
lakehost server, for the integration tests, calling it as its users do.

The SDK hard-codes its hosts (https://<org>.api.comodash.io/v2,
https://api.<org>.comodash.io/superset and https://auth.comotion.us); the test
runs this with `sdk_site/` on PYTHONPATH, whose sitecustomize resolves those
names to the test server inside this process. The test also sets the CA
(SSL_CERT_FILE, REQUESTS_CA_BUNDLE, AWS_CA_BUNDLE) and the storage endpoint
(AWS_ENDPOINT_URL_S3). lakehost itself is not patched.

Usage: sdk_client.py COMMAND JSON_ARGS; prints one JSON object.
"""

import contextlib
import json
import os
import sys


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    # The SDK prints progress; only the answer goes to stdout.
    with contextlib.redirect_stdout(sys.stderr):
        if command == "write_parquet":
            answer = write_parquet(args)
        else:
            answer = COMMANDS[command](config_of(args), args)
    print(json.dumps(answer))


def config_of(args):
    """An application (client credentials) or, without a client, the user the
    `comotion authenticate` login left in the keyring."""
    from comotion import Auth
    from comotion.dash import DashConfig

    if "client_id" in args:
        auth = Auth(
            args["org"],
            entity_type=Auth.APPLICATION,
            application_client_id=args["client_id"],
            application_client_secret=args["client_secret"],
        )
    else:
        auth = Auth(args["org"])
    return DashConfig(auth)


def outcome(call):
    """What a call returned, or the exception it raised, as a user sees it."""
    try:
        return {"ok": call()}
    except Exception as e:  # the SDK raises bare Exceptions and ValueErrors
        return {"raised": type(e).__name__, "message": str(e)}


def info_of(load):
    info = load.get_load_info()
    return {
        "load_id": load.load_id,
        "status": info.load_status,
        "error_type": info.error_type,
        "error_messages": info.error_messages,
    }


def write_parquet(args):
    """A parquet file of args["rows"], as a pandas user writes one."""
    import pandas as pd

    pd.DataFrame(args["rows"]).to_parquet(args["path"], index=False)
    return {"written": args["path"]}


def query(config, args):
    from comotion.dash import Query

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


def loads(config, args):
    """Every load of args["loads"] is created, filled and committed first, then
    waited for (the SDK polls every 5 seconds), then read back."""
    import pandas as pd
    from comotion.dash import Load

    started = []
    for spec in args["loads"]:
        load = Load(
            config=config,
            load_type="APPEND_ONLY",
            table_name=spec["table"],
            load_as_service_client_id=spec.get("load_as_service_client_id"),
            partitions=spec.get("partitions"),
        )
        if spec.get("rows"):
            load.upload_df(pd.DataFrame(spec["rows"]))
        for path in spec.get("files", []):
            load.upload_file(path)
        load.commit(check_sum=spec["check_sum"])
        started.append(load)
    out = []
    for load in started:
        waited = load.wait_to_complete()
        out.append(dict(info_of(load), waited=waited))
    return out


def upload_file(config, args):
    """Load.upload_file of each file as its own load, as a user would try it."""
    from comotion.dash import Load

    out = {}
    for name, path in args["files"].items():
        load = Load(config=config, load_type="APPEND_ONLY", table_name=args["table"])
        out[name] = outcome(lambda: len(load.upload_file(path)))
        if "ok" in out[name]:
            load.commit(check_sum=args["check_sum"])
            out[name]["waited"] = load.wait_to_complete()
            out[name].update(info_of(load))
    return out


def bulk(config, args):
    """DashBulkUploader over several tables: a DataFrame, a CSV file and a
    Query's result as data sources; one table with a wrong checksum."""
    import pandas as pd
    from comotion.dash import DashBulkUploader, Query

    uploader = DashBulkUploader(config=config)
    for table, spec in args["tables"].items():
        uploader.add_load(table_name=table, check_sum=spec["check_sum"])
        for rows in spec.get("frames", []):
            uploader.add_data_to_load(table_name=table, data=pd.DataFrame(rows))
        for path in spec.get("files", []):
            uploader.add_data_to_load(table_name=table, data=path)
        if "query" in spec:
            uploader.add_data_to_load(
                table_name=table, data=Query(config=config, query_text=spec["query"])
            )
    uploader.execute_all_uploads()
    infos = uploader.get_load_info()
    return {
        table: {
            "status": info.load_status,
            "error_type": info.error_type,
            "error_messages": info.error_messages,
            "tracked_status": uploader.uploads[table]["load_status"],
        }
        for table, info in infos.items()
    }


def dailyrun(config, args):
    """Each DailyRun call in args["calls"], in order, with what it answered."""
    from comotion.dash import DailyRun

    daily = DailyRun(config)
    modes = DailyRun.GetDailyRunExecutionMode
    out = []
    for call in args["calls"]:
        name = call[0]
        if name == "get_enabled":
            result = outcome(daily.get_daily_run_enabled)
        elif name == "set_enabled":
            result = outcome(lambda: daily.update_daily_run_enabled(call[1]))
        elif name == "start":
            result = outcome(lambda: daily.start_execution().to_dict())
        elif name == "wait":
            result = outcome(lambda: _wait_for_end(daily, modes))
        elif name == "status":
            result = outcome(
                lambda: _to_dict(daily.get_execution_info(mode=modes[call[1]]))
            )
        else:
            raise SystemExit(f"unknown DailyRun call {name}")
        out.append(result)
    return out


def _wait_for_end(daily, modes, timeout_s=60):
    """Polls the latest execution, as the spec tells clients to, until it is
    no longer RUNNING; returns its status."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = _to_dict(daily.get_execution_info(mode=modes.LATEST))
        if latest and latest.get("status") != "RUNNING":
            return latest["status"]
        time.sleep(0.5)
    raise TimeoutError("the daily run is still RUNNING")


def _to_dict(model):
    return None if model is None else json.loads(json.dumps(model.to_dict(), default=str))


COMMANDS = {
    "query": query,
    "loads": loads,
    "upload_file": upload_file,
    "bulk": bulk,
    "dailyrun": dailyrun,
}


if __name__ == "__main__":
    main()
