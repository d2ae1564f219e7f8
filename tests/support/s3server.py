"""A real S3-compatible server on 127.0.0.1 for tests: moto's `moto_server` (PyPI `moto[server]`).

Chosen because it installs from PyPI with the test extras (no binary download, no container), speaks
S3's REST API over real HTTP, and, with INITIAL_NO_AUTH_ACTION_COUNT, checks every request's
SigV4 signature and access key against its IAM (an unknown key is InvalidAccessKeyId, a wrong
secret SignatureDoesNotMatch), as S3 does. The first few actions run unauthenticated: they
create the user, its key, its policy and the bucket.

    with S3Server() as s3:
        s3.endpoint, s3.bucket, s3.access_key_id, s3.secret_access_key, s3.keys()
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.support.ports import free_port

SETUP_ACTIONS = 4  # CreateUser, CreateAccessKey, PutUserPolicy, CreateBucket


class S3Server:
    def __init__(self, bucket: str = "evidence") -> None:
        binary = shutil.which("moto_server", path=os.path.dirname(os.path.realpath(__import__("sys").executable)))
        binary = binary or shutil.which("moto_server")
        if binary is None:
            pytest.fail("moto_server not found: pip install 'moto[server]' (the test extras do)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_ACTIONS), AWS_DEFAULT_REGION="us-east-1")
        self.proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    pytest.fail("moto_server did not start")
                time.sleep(0.2)
        iam = self._client("iam", "setup", "setup")
        iam.create_user(UserName="frexport")
        key = iam.create_access_key(UserName="frexport")["AccessKey"]
        iam.put_user_policy(UserName="frexport", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3 = self._client("s3", self.access_key_id, self.secret_access_key)
        self.s3.create_bucket(Bucket=bucket)

    def _client(self, service: str, key: str, secret: str):
        import boto3  # moto's own dependency; only the test side uses it

        return boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=key, aws_secret_access_key=secret)

    def keys(self) -> dict[str, bytes]:
        """key -> body of every object in the bucket."""
        out = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = self.s3.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
