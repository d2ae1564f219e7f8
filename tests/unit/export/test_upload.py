"""The uploader's SigV4 signature equals botocore's for the same PutObject; config validation."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from frexport.config import load_config, validate
from frexport.export.upload import Target, sign_put

NOW = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_signature_matches_botocore():
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    t = Target("https://minio.example:9000", "evidence", "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", region="eu-west-1",
               session_token="tok")
    body = b"\x80\x02}q\x00."
    url, headers = sign_put(t, "jobs/train/pod-0/20260501T120000Z-missing_rank/stacks/rank_2.traceback.txt", body, NOW)
    req = AWSRequest("PUT", url, data=body,
                     headers={k: v for k, v in headers.items() if k in ("x-amz-content-sha256",)})
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW):
        S3SigV4Auth(Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", "tok"), "s3", "eu-west-1").add_auth(req)
    assert headers["authorization"] == req.headers["Authorization"]
    assert url == "https://minio.example:9000/evidence/jobs/train/pod-0/20260501T120000Z-missing_rank/stacks/" \
                  "rank_2.traceback.txt"
    vurl, _ = sign_put(Target("https://s3.amazonaws.com", "b", "k", "s", path_style=False), "x", b"", NOW)
    assert vurl == "https://b.s3.amazonaws.com/x"


def test_upload_config_is_checked():
    base = {"sources.dump_dirs": [{"path": "/d"}], "evidence.dir": "/e"}
    ok = load_config(env={}, overrides={**base, "evidence.upload.endpoint": "http://s3:9000",
                                        "evidence.upload.bucket": "b", "evidence.upload.access_key_id": "k",
                                        "evidence.upload.secret_access_key": "s"})
    assert validate(ok) == []
    bad = load_config(env={}, overrides={"sources.dump_dirs": [{"path": "/d"}],
                                         "evidence.upload.endpoint": "s3:9000"})
    problems = " ".join(validate(bad))
    for text in ("expected http(s)://", "bucket: required", "needs evidence.dir"):
        assert text in problems
