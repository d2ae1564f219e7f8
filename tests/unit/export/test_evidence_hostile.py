"""Evidence bundles in a directory others can write to, and bundles larger than max_bytes. Real files."""

import json
import logging
import os
import shutil
import time

from frexport.decode.read import decode_bytes
from frexport.evidence.bundle import Bundle
from frexport.export import evidence
from frexport.export.evidence import EvidenceWriter
from tests.support.synth import dump, entry


def _bundle(raw_bytes=0, ranks=4):
    data = json.dumps(dump([entry(1, 1)], world=ranks)).encode()
    dumps = {r: decode_bytes(data, f"trace_{r}", rank=r) for r in range(ranks)}
    raw = {r: bytes([r]) * raw_bytes for r in range(ranks)} if raw_bytes else {}
    return Bundle("missing_rank", "report\n", {"verdict": "unhealthy"}, dumps, raw,
                  {0: {"traceback": "Thread 1:\n  File x.py"}})


def _size(path):
    return sum(os.lstat(os.path.join(d, n)).st_size for d, _, ns in os.walk(path) for n in ns)


def test_a_bundle_keeps_within_max_bytes_and_says_what_it_left_out(tmp_path, caplog):
    w = EvidenceWriter(str(tmp_path / "ev"), max_bytes=1 << 20)
    with caplog.at_level(logging.WARNING, logger="frexport"):
        path = w.write(_bundle(raw_bytes=400_000))
    assert path and _size(path) <= 1 << 20
    manifest = json.loads(open(os.path.join(path, "manifest.json")).read())
    assert manifest["omitted_over_max_bytes"] == [2, 3] and "trace_0" in manifest["files"]
    assert "ranks 2, 3 left out" in caplog.text


def test_planted_symlinks_do_not_redirect_a_bundle(tmp_path):
    ev, outside = tmp_path / "ev", tmp_path / "outside"
    ev.mkdir()
    outside.mkdir()
    now = time.time()
    for dt in range(-1, 4):  # every temp name the old scheme could have used in the next seconds
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + dt))
        os.symlink(outside, ev / f".{stamp}-missing_rank.tmp")
    os.symlink(outside, ev / "stacks")
    path = EvidenceWriter(str(ev)).write(_bundle())
    assert path and os.path.realpath(path).startswith(str(ev))
    assert list(outside.iterdir()) == []


def test_fake_bundles_never_make_a_fresh_one_be_deleted(tmp_path):
    ev = tmp_path / "ev"
    for i in range(20):  # names that sort after any real bundle, each with a manifest
        d = ev / f"99999999T{i:06d}Z-fake"
        d.mkdir(parents=True)
        (d / "manifest.json").write_text("{}")
    w = EvidenceWriter(str(ev), max_bundles=2)
    first = w.write(_bundle())
    second = w.write(_bundle())
    third = w.write(_bundle())
    assert os.path.isdir(third) and os.path.isdir(second) and not os.path.exists(first)
    assert len([p for p in ev.iterdir() if p.name.startswith("9999")]) == 20  # not ours: left alone


def test_retention_on_python_3_10_whose_rmtree_takes_no_dir_fd(tmp_path, monkeypatch):
    """requires-python is >=3.10, and rmtree's dir_fd came in 3.11 (found by mypy): there the oldest
    bundle is removed by its path, not a TypeError out of write()."""
    real = shutil.rmtree

    def rmtree_3_10(path, ignore_errors=False, onerror=None):
        return real(path, ignore_errors=ignore_errors, onerror=onerror)

    monkeypatch.setattr(evidence.shutil, "rmtree", rmtree_3_10)
    monkeypatch.setattr(evidence.sys, "version_info", (3, 10, 14, "final", 0))
    w = EvidenceWriter(str(tmp_path / "ev"), max_bundles=2)
    first, second, third = w.write(_bundle()), w.write(_bundle()), w.write(_bundle())
    assert os.path.isdir(third) and os.path.isdir(second) and not os.path.exists(first)


def test_a_bundle_left_half_written_by_a_killed_writer_is_swept_once_abandoned(tmp_path):
    """A sidecar stopped mid-bundle leaves `.bundle-*` behind; retention counts only finished bundles,
    so over restarts they would fill the volume. Old ones go with the next bundle; a recent one (a
    writer at work) and a planted symlink's target stay."""
    ev, outside = tmp_path / "ev", tmp_path / "outside"
    (ev / ".bundle-abandoned" / "stacks").mkdir(parents=True)
    (ev / ".bundle-abandoned" / "trace_0").write_bytes(b"x" * 1000)
    (ev / ".bundle-at-work").mkdir()
    outside.mkdir()
    (outside / "keep").write_text("mine")
    os.symlink(outside, ev / ".bundle-planted")
    old = time.time() - 2 * 3600
    os.utime(ev / ".bundle-abandoned", (old, old))
    os.utime(ev / ".bundle-planted", (old, old), follow_symlinks=False)
    assert EvidenceWriter(str(ev)).write(_bundle())
    assert not (ev / ".bundle-abandoned").exists()
    assert (ev / ".bundle-at-work").is_dir() and (outside / "keep").read_text() == "mine"


def test_a_bundle_swapped_in_or_renamed_is_never_uploaded_nor_deleted_for_its_name(tmp_path):
    """The signature covers the bundle's name (issue 38 point 5): an older signed bundle swapped in
    under the incident's name is refused by the upload (it was uploaded under the incident's name,
    reported as a success); the incident's bundle renamed to look half-written is not swept away."""
    import pytest

    from frexport.export.bundle_files import NotOurs
    from frexport.export.upload import read_bundle

    ev = tmp_path / "ev"
    w = EvidenceWriter(str(ev), max_bundles=10)
    older, incident = w.write(_bundle()), w.write(_bundle())
    assert read_bundle(incident)  # as written: verified
    shutil.rmtree(incident)
    os.rename(older, incident)
    with pytest.raises(NotOurs, match="renamed or swapped in"):
        read_bundle(incident)
    hidden = ev / ".bundle-renamed"
    os.rename(incident, hidden)
    old = time.time() - 2 * 3600
    os.utime(hidden, (old, old))
    assert w.write(_bundle())
    assert (hidden / "manifest.json").exists()  # signed by this sidecar: not a half-written bundle


def test_a_planted_key_changes_nothing_and_costs_one_line(tmp_path, caplog):
    """A key file that is not the sidecar's (planted, world-readable) stopped retention for good (15
    bundles kept against max_bundles 3): it is set aside, the sidecar's own key made, retention goes on."""
    from frexport.export import bundle_files

    ev = tmp_path / "ev"
    ev.mkdir()
    planted = ev / bundle_files.KEY_NAME
    planted.write_text("00" * 32)
    planted.chmod(0o644)
    with caplog.at_level(logging.INFO, logger="frexport"):
        for _ in range(6):  # a sidecar restarted between bundles: each start loads the key anew
            bundle_files._keys.clear()
            assert EvidenceWriter(str(ev), max_bundles=3).write(_bundle())
    kept = [p.name for p in ev.iterdir() if not p.name.startswith(".")]
    assert len(kept) == 3, kept
    assert sum("was not this sidecar's" in r.message for r in caplog.records) == 1
    assert (os.stat(ev / bundle_files.KEY_NAME).st_mode & 0o077) == 0


def test_thousands_of_planted_directories_cost_one_line_not_one_each(tmp_path, caplog):
    ev = tmp_path / "ev"
    for i in range(5000):
        (ev / f"planted-{i:05d}").mkdir(parents=True)
    w = EvidenceWriter(str(ev), max_bundles=50)
    with caplog.at_level(logging.INFO, logger="frexport"):
        for _ in range(3):
            assert w.write(_bundle())
    lines = [r for r in caplog.records if "retention leaves" in r.message]
    assert len(lines) <= 3 and "5000 directories" in lines[0].message, [r.message for r in lines][:5]
