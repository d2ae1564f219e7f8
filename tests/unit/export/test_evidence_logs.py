"""A bundle carries the last lines its focus ranks printed (logs/rank_<r>.log), signed like its other
files and within evidence.max_bytes."""

import json
import os
from dataclasses import replace

from frexport.export.bundle_files import bundle_key, open_bundle, verified_files
from frexport.export.evidence import EvidenceWriter
from tests.unit.export.test_evidence_hostile import _bundle, _size

WORDS = "[node7:3] 2026-05-01T12:03:07.412Z err| RuntimeError: loss is NaN at step 5\n"


def test_the_logs_are_written_signed_and_read_back_verified(tmp_path):
    w = EvidenceWriter(str(tmp_path / "ev"))
    path = w.write(replace(_bundle(), logs={3: WORDS}))
    assert open(os.path.join(path, "logs", "rank_3.log")).read() == WORDS
    dfd = os.open(str(tmp_path / "ev"), os.O_RDONLY)
    try:
        bfd, manifest, _ = open_bundle(dfd, os.path.basename(path), bundle_key(str(tmp_path / "ev")))
        files = dict(verified_files(bfd, manifest, 1 << 20))
        os.close(bfd)
    finally:
        os.close(dfd)
    assert files["logs/rank_3.log"] == WORDS.encode()


def test_logs_over_max_bytes_are_left_out_and_the_bundle_keeps_its_bound(tmp_path):
    w = EvidenceWriter(str(tmp_path / "ev"), max_bytes=1 << 20)
    path = w.write(replace(_bundle(), logs={1: "x" * (2 << 20), 3: WORDS}))
    manifest = json.loads(open(os.path.join(path, "manifest.json")).read())
    assert "logs/rank_3.log" in manifest["files"] and "logs/rank_1.log" not in manifest["files"]
    assert _size(path) <= 1 << 20
