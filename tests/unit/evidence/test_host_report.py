"""A bundle's report says what its profiles and native stacks show, from the bundle's own files."""

import json
import shutil

from frexport.evidence.host_report import host_report
from frexport.evidence.profiles import profile_meta
from tests.support.paths import REAL_FIXTURES


def _bundle(tmp_path, got):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "stacks").mkdir()
    for r in (0, 1):
        shutil.copy(REAL_FIXTURES / "profile_loader_straggler" / f"rank_{r}.pt.trace.json.gz",
                    tmp_path / "profiles" / f"rank_{r}.pt.trace.json.gz")
    (tmp_path / "profiles" / "profiles.json").write_text(json.dumps(profile_meta(1, 0, 3.0, got)))
    return tmp_path


def test_the_comparison_and_the_native_frame_are_in_the_report(tmp_path):
    d = _bundle(tmp_path, {0: ("frexport_profile", b"x"), 1: ("frexport_profile", b"x")})
    head = "# native stacks of rank 1 (pid 1720) by py-spy: py-spy dump --native --pid 1720 at T\n"
    (d / "stacks" / "rank_1.native.txt").write_text(head + (REAL_FIXTURES / "native_stacks/pyspy_1.txt").read_text())
    (d / "stacks" / "rank_0.native.txt").write_text((REAL_FIXTURES / "native_stacks/gdb_0.txt").read_text())
    lines, doc = host_report(str(d))
    assert lines[0].startswith("profiles: rank 1: 0.20 s a step in DataLoader.__next__, rank 0: 0.00 s")
    assert "native stack: rank 0 (gdb): its main thread does not wait in torch" in lines
    assert ("native stack: rank 1 waits in c10d::Work::wait (libtorch_cpu.so, in pthread_cond_wait) under "
            "all_reduce (torch/distributed/distributed_c10d.py:3252) (py-spy, stacks/rank_1.native.txt)") in lines
    assert doc["profiles"]["comparison"]["function"] == "DataLoader.__next__"
    assert doc["native_stacks"]["1"]["frame"] == "c10d::Work::wait"


def test_a_missing_or_broken_profile_is_said_not_fatal(tmp_path):
    d = _bundle(tmp_path, {0: ("frexport_profile", "http_status: one profile per 600 s"),
                           1: ("frexport_profile", b"x")})
    (d / "profiles" / "rank_1.pt.trace.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    (d / "stacks" / "rank_2.native.txt").write_text("# native stacks of rank 2 (pid 9): none taken at T: neither "
                                                     "py-spy nor gdb is on the sidecar's PATH\n")
    lines, _ = host_report(str(d))
    assert "profiles: rank 0: no profile (http_status: one profile per 600 s)" in lines
    assert any(line.startswith("profiles: rank 1: profiles/rank_1.pt.trace.json.gz is not a readable trace")
               for line in lines)
    assert any(line.startswith("native stack: rank 2: none (") and "neither py-spy nor gdb" in line
               for line in lines)


def test_a_bundle_without_either_adds_nothing(tmp_path):
    assert host_report(str(tmp_path)) == ([], {})
