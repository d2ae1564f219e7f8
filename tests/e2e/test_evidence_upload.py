"""Evidence that outlives the pod: each finished bundle is uploaded to S3-compatible object storage
(a real moto_server on 127.0.0.1, real HTTP, SigV4 checked), from the evidence sink's thread."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from frexport.analysis.findings import Diagnosis
from frexport.cli.serve import build_sidecar
from frexport.config import load_config
from frexport.export.evidence import EvidenceSink, EvidenceWriter
from frexport.export.upload import BundleUploader, Target
from frexport.live.diagnosis import BLOCKED, STALLED, LiveResult
from frexport.live.sink import Pass
from tests.support.s3server import S3Server
from tests.unit.export.prometheus.scenario import FIRST, STALL, default_pg, snapshot


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def incident() -> Pass:
    result = LiveResult(Diagnosis([0, 1, 2, 3], [STALL]), {0: BLOCKED, 1: BLOCKED, 2: STALLED, 3: BLOCKED},
                        stall_after_s=30.0, new_root_causes=[STALL])
    dumps = {r: snapshot(default_pg(r, range(11 if r != 2 else 10)), r, FIRST) for r in range(4)}
    return Pass(FIRST, [], result, result, dumps)


def sample(registry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, labels)


def wait_for(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_bundle_arrives_under_the_prefix(s3, tmp_path, monkeypatch):
    """Configured as a user would (frexport's config, credentials from the environment, i.e. a
    Secret), wired by `frexport serve`'s builder; the metric is on the sidecar's /metrics registry."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_access_key)
    monkeypatch.setenv("POD_NAME", "train-0-abcde")
    evidence = tmp_path / "evidence"
    cfg = load_config(overrides={"job_id": "train", "sources.dump_dirs": [{"path": str(tmp_path)}],
                                 "evidence.dir": str(evidence), "evidence.pyspy": False,
                                 "evidence.upload.endpoint": s3.endpoint, "evidence.upload.bucket": s3.bucket,
                                 "evidence.upload.prefix": "frexport/prod/"})
    sidecar, registry = build_sidecar(cfg)
    sink = next(s for s in sidecar.sinks if isinstance(s, EvidenceSink))
    sink.start()
    try:
        sink.consume(incident())
        wait_for(lambda: sample(registry, "frexport_evidence_uploads_total", result="success") == 1)
    finally:
        sink.stop(10)
    (bundle,) = [p for p in evidence.iterdir() if not p.name.startswith(".")]
    local = {str(p.relative_to(bundle)): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    assert {"manifest.json", "report.txt", "report.json", "trace_0", "trace_3"} <= set(local)
    remote = s3.keys()
    base = f"frexport/prod/train/train-0-abcde/{bundle.name}/"
    assert remote == {base + rel: body for rel, body in local.items()}
    assert sample(registry, "frexport_evidence_uploads_total", result="failed") == 0


def test_a_bad_credential_is_counted_failed_and_logged(s3, tmp_path, caplog):
    writer = EvidenceWriter(str(tmp_path))
    for key, secret in (("AKIANOTAKEY00000000", "x"), (s3.access_key_id, "not-the-secret")):
        uploader = BundleUploader(Target(s3.endpoint, s3.bucket, key, secret, prefix="bad"), job_id="j",
                                  pod="p", backoff_s=0.01)
        sink = EvidenceSink(writer, after_write=uploader.upload)
        with caplog.at_level(logging.ERROR):
            bundle = sink.write_incident(incident())
            t0 = time.monotonic()
            assert uploader.upload(bundle) is False
        assert time.monotonic() - t0 < 5  # a 403 is not retried
        assert uploader.results == {"success": 0, "failed": 1}
    assert "InvalidAccessKeyId" in caplog.text and "SignatureDoesNotMatch" in caplog.text
    assert not [k for k in s3.keys() if k.startswith("bad/")]


def test_a_hanging_store_never_blocks_the_loop(tmp_path):
    """An endpoint that accepts and never answers: consume() (the loop's call) returns at once, the
    sink's thread waits out the timeout and retries, then counts the upload failed."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        hole.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(hole.accept()[0])
            except OSError:
                pass
    threading.Thread(target=accept, daemon=True).start()
    target = Target(f"http://127.0.0.1:{hole.getsockname()[1]}", "b", "k", "s")
    uploader = BundleUploader(target, retries=1, timeout_s=3.0, backoff_s=0.1)
    sink = EvidenceSink(EvidenceWriter(str(tmp_path)), after_write=uploader.upload)
    sink.start()
    try:
        slowest = 0.0
        for _ in range(20):
            t0 = time.monotonic()
            sink.consume(incident())
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.05)
        # waiting on the store would cost its 3 s timeout; not waiting costs milliseconds (a loaded
        # CI machine stretches those, so the bound tells the two apart, not how fast consume() is)
        assert slowest < 1.0, f"consume() took {slowest:.3f}s"
        wait_for(lambda: uploader.results["failed"] >= 1, timeout=30)
        assert len(accepted) >= 2  # the first try and its retry
    finally:
        sink.stop(10)
        stop.set()
        hole.close()
        for c in accepted:
            c.close()
    assert Path(tmp_path).iterdir()  # the bundle stays on disk either way
