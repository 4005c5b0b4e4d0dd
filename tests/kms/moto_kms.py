"""A KMS API on loopback for the aws-kms key-store tests (tests/api/key_stores.rs): moto's
server on a free port, with one symmetric key for encryption (and an alias to it). Prints one
JSON line {"ready": true, "endpoint", "arn", "alias"}; ends when its stdin closes, so a
crashed test leaves nothing behind. State lives in this process only: a new one knows no key.
A line `rotate` on stdin makes a new key and points the alias at it (a KEK rotation as an
operator makes one; the benchmark's rotation row), answered with {"arn"}.
"""

import json
import logging
import sys

import boto3
from moto.server import ThreadedMotoServer

REGION = "eu-central-1"


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    kms = boto3.client(
        "kms",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    key = kms.create_key(KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT")["KeyMetadata"]
    kms.create_alias(AliasName="alias/mcp-connect", TargetKeyId=key["KeyId"])
    print(
        json.dumps({"ready": True, "endpoint": endpoint, "arn": key["Arn"], "alias": "alias/mcp-connect"}),
        flush=True,
    )
    for line in sys.stdin:
        if line.strip() == "rotate":
            new = kms.create_key(KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT")["KeyMetadata"]
            kms.update_alias(AliasName="alias/mcp-connect", TargetKeyId=new["KeyId"])
            print(json.dumps({"arn": new["Arn"]}), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
