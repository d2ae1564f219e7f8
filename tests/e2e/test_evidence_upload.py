"""Evidence that outlives the pod: each finished bundle is uploaded to S3-compatible object storage
(a real moto_server on 127.0.0.1, real HTTP, SigV4 checked), from the evidence sink's thread."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from frexport.analysis.findings import Diagnosis
from frexport.cli.serve import build_sidecar
from frexport.config import load_config
from frexport.evidence.bundle import Bundle
from frexport.evidence.sink import EvidenceSink
from frexport.export.evidence import EvidenceWriter
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
        assert uploader.results == {"success": 0, "failed": 1, "refused": 0}
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


# --- issue 28, deliverable 3: a writer of the evidence volume cannot make the upload ship other files


def _uploader(s3, prefix):
    return BundleUploader(Target(s3.endpoint, s3.bucket, s3.access_key_id, s3.secret_access_key, prefix=prefix),
                          job_id="j", pod="p", backoff_s=0.01)


def _swap_file_for_link(bundle: Path, secret: Path) -> None:
    (bundle / "trace_0").unlink()
    (bundle / "trace_0").symlink_to(secret)


def _swap_dir_for_link(bundle: Path, secret: Path) -> None:
    elsewhere = bundle.parent.parent / "copy"
    bundle.rename(elsewhere)
    (elsewhere / "trace_0").unlink()
    (elsewhere / "trace_0").write_bytes(secret.read_bytes())  # the bundle's own manifest, a secret inside
    bundle.symlink_to(elsewhere, target_is_directory=True)


def _swap_stacks_for_link(bundle: Path, secret: Path) -> None:
    stacks = bundle / "stacks"
    for f in stacks.iterdir():
        f.unlink()
    stacks.rmdir()
    stacks.symlink_to(secret.parent, target_is_directory=True)


def _rewrite_content(bundle: Path, secret: Path) -> None:  # a writer of the volume edits a file in place
    (bundle / "report.txt").write_bytes(secret.read_bytes())


@pytest.mark.parametrize("swap", [_swap_file_for_link, _swap_dir_for_link, _swap_stacks_for_link, _rewrite_content])
def test_a_bundle_swapped_after_writing_uploads_nothing_and_says_why(s3, tmp_path, caplog, swap):
    secret = tmp_path / "private" / "tls.key"
    secret.parent.mkdir()
    secret.write_bytes(b"-----BEGIN PRIVATE KEY----- the sidecar's own")
    (secret.parent / "rank_0.traceback.txt").write_bytes(secret.read_bytes())
    p = incident()
    stacks = {0: {"traceback": "Thread 1:\n  File train.py, line 3"}}
    bundle = Path(EvidenceWriter(str(tmp_path / "evidence")).write(
        Bundle("stall", "report\n", {"verdict": "unhealthy"}, p.dumps, {}, stacks)))
    assert (bundle / "stacks" / "rank_0.traceback.txt").is_file()
    prefix = f"swap-{swap.__name__}"
    uploader = _uploader(s3, prefix)
    swap(bundle, secret)
    with caplog.at_level(logging.ERROR):
        assert uploader.upload(str(bundle)) is False
    assert uploader.results == {"success": 0, "failed": 0, "refused": 1}
    assert not [k for k in s3.keys() if k.startswith(prefix + "/")]  # nothing of it, not even the manifest
    assert "refused, nothing of it uploaded" in caplog.text
    assert any(why in caplog.text for why in ("symbolic link", "not what this sidecar wrote", "not a directory"))


def test_a_planted_bundle_with_the_public_marker_is_neither_uploaded_nor_counted(s3, tmp_path, caplog):
    ev = tmp_path / "evidence"
    writer = EvidenceWriter(str(ev), max_bundles=2)
    real = Path(EvidenceSink(writer).write_incident(incident()))
    plant = ev / "00000000T000000Z-plant"  # sorts first: retention would remove it first, or count it
    plant.mkdir()
    forged = json.loads((real / "manifest.json").read_text())
    (plant / "report.txt").write_bytes(b"planted")
    forged.update(files=["report.txt"], sha256={"report.txt": hashlib.sha256(b"planted").hexdigest()},
                  hmac="0" * 64)
    (plant / "manifest.json").write_text(json.dumps(forged))
    with caplog.at_level(logging.INFO):
        assert _uploader(s3, "plant").upload(str(plant)) is False
        second = EvidenceSink(writer).write_incident(incident())
    assert plant.is_dir() and real.is_dir() and Path(second).is_dir()  # max_bundles 2: the plant did not count
    assert "leaves 1 directory alone" in caplog.text and "e.g. 00000000T000000Z-plant:" in caplog.text
    assert not [k for k in s3.keys() if k.startswith("plant/")]


def test_a_key_file_others_can_read_is_not_trusted(tmp_path, caplog):
    ev = tmp_path / "evidence"
    ev.mkdir()
    (ev / ".frexport-bundle-key").write_text("00" * 32)
    os.chmod(ev / ".frexport-bundle-key", 0o644)
    with caplog.at_level(logging.WARNING):
        bundle = EvidenceSink(EvidenceWriter(str(ev))).write_incident(incident())
    assert bundle and "was not this sidecar's" in caplog.text and "not a private file" in caplog.text
    assert (ev / ".frexport-bundle-key").read_text() != "00" * 32  # set aside: a key of its own in its place
    from frexport.export.upload import read_bundle

    assert [rel for rel, _ in read_bundle(bundle)][-1] == "manifest.json"  # this run's own bundles still upload
