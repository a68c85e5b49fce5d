"""What a real caller of lakehost's upload descriptors does, for the
integration tests: parquet written by pyarrow, form POSTs with `requests`,
and boto3 against the embedded S3-compatible endpoint (path-style,
`endpoint_url`), exactly as a user would call them.

Usage: python upload_client.py <command> <json arguments>
Prints one JSON object: {"ok": true, ...} or {"ok": false, "status": <http>,
"code": <S3 error code>, "message": ...}.
"""

import json
import sys


def write_parquet(args):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = args["rows"]
    table = pa.table(
        {
            "trip_id": pa.array(range(rows), pa.int64()),
            "fare": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
            "city": pa.array(["city_%d" % (i % 7) for i in range(rows)], pa.string()),
            "service_client_id": pa.array([1 + i % 2 for i in range(rows)], pa.int64()),
        }
    )
    pq.write_table(table, args["path"])
    return {"ok": True, "rows": rows}


def s3_client(args):
    import boto3
    from botocore.config import Config

    creds = args["descriptor"]["sts_credentials"]
    return boto3.client(
        "s3",
        endpoint_url=args["endpoint"],
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=args.get("secret", creds["SecretAccessKey"]),
        aws_session_token=args.get("session_token", creds["SessionToken"]),
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def s3_call(fn):
    from botocore.exceptions import ClientError

    try:
        result = fn()
        return {"ok": True, "result": str(result)[:200]}
    except ClientError as e:
        return {
            "ok": False,
            "status": e.response["ResponseMetadata"]["HTTPStatusCode"],
            "code": e.response["Error"].get("Code"),
            "message": e.response["Error"].get("Message"),
        }


def put_object(args):
    d = args["descriptor"]
    client = s3_client(args)
    with open(args["file"], "rb") as body:
        return s3_call(
            lambda: client.put_object(
                Bucket=args.get("bucket", d["bucket"]), Key=args.get("key", d["path"]), Body=body
            )
        )


def upload_file(args):
    from boto3.s3.transfer import TransferConfig

    d = args["descriptor"]
    client = s3_client(args)
    config = TransferConfig(multipart_threshold=8 * 1024 * 1024, multipart_chunksize=8 * 1024 * 1024)
    return s3_call(lambda: client.upload_file(args["file"], d["bucket"], d["path"], Config=config))


def other_operation(args):
    d = args["descriptor"]
    client = s3_client(args)
    op = args["operation"]
    calls = {
        "get_object": lambda: client.get_object(Bucket=d["bucket"], Key=d["path"]),
        "delete_object": lambda: client.delete_object(Bucket=d["bucket"], Key=d["path"]),
        "list_objects": lambda: client.list_objects_v2(Bucket=d["bucket"]),
        "list_buckets": lambda: client.list_buckets(),
    }
    return s3_call(calls[op])


def form_post(args):
    import requests

    d = args["descriptor"]
    fields = dict(d["presigned_url"]["fields"])
    fields.update(args.get("override_fields", {}))
    for name in args.get("drop_fields", []):
        fields.pop(name, None)
    with open(args["file"], "rb") as body:
        response = requests.post(
            d["presigned_url"]["url"], data=fields, files={"file": ("upload.parquet", body)}
        )
    if response.status_code < 300:
        return {"ok": True, "status": response.status_code}
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(response.text)
        code, message = root.findtext("Code"), root.findtext("Message")
    except ET.ParseError:
        code, message = None, response.text
    return {"ok": False, "status": response.status_code, "code": code, "message": message}


def sign_policy(args):
    """A policy the caller signs themselves with the temporary secret."""
    import base64
    import hashlib
    import hmac

    policy = base64.b64encode(json.dumps(args["policy"]).encode()).decode()
    secret = args["descriptor"]["sts_credentials"]["SecretAccessKey"].encode()
    signature = base64.b64encode(hmac.new(secret, policy.encode(), hashlib.sha1).digest()).decode()
    return {"ok": True, "Policy": policy, "Signature": signature}


COMMANDS = {
    "write_parquet": write_parquet,
    "put_object": put_object,
    "upload_file": upload_file,
    "other_operation": other_operation,
    "form_post": form_post,
    "sign_policy": sign_policy,
}

if __name__ == "__main__":
    command, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(COMMANDS[command](arguments)))
