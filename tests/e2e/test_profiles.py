"""Profiles of a straggler and native stacks of a rank stuck below Python, in real torch gloo jobs
(torchrun under frexport-launch, tests/jobs/train_loader.py), through `frexport serve` and `frexport profile`."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob, torch_envs

AGENT_INTERVAL_S = 20  # the agent's own bound, short here so one job serves the sidecar and the CLI


def _bundles(d, reason):
    return sorted(p for p in d.iterdir() if not p.name.startswith(".") and reason in p.name) if d.exists() else []


def _chrome_trace(path):
    """The file as Perfetto reads it: (gzip'd) JSON with a traceEvents list of timed events."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert events and all(isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) for e in events)
    return events


def _profile_cli(shared, out, *args):
    return subprocess.run([sys.executable, "-m", "frexport", "profile", "--sockets-dir", str(shared), *args, str(out)],
                          capture_output=True, text=True, timeout=180)


_LINE = re.compile(r"rank 1: (\d+\.\d\d) s a step in DataLoader\.__next__, rank 0: (\d+\.\d\d) s")


@pytest.mark.torchjob
def test_a_straggler_in_its_data_loader_is_profiled_with_a_peer_and_the_report_says_where(tmp_path):
    shared, evidence = tmp_path / "shared", tmp_path / "evidence"
    env = {"LOADER_SLOW_RANK": "1", "LOADER_SLOW_S": "0.3", "MARK_DIR": str(tmp_path),
           "FREXPORT_AGENT_PROFILE_INTERVAL": str(AGENT_INTERVAL_S)}
    with TorchJob("train_loader.py", shared, nproc=2, env=env) as job:
        job.wait_for(lambda: job.sockets_ready() and (tmp_path / "started_1").exists(), what="the first step")
        with Sidecar("--sockets-dir", str(shared), "--evidence-dir", str(evidence), "--poll-interval", "1s",
                     "--entries-interval", "1s", "--stall-after", "30s",
                     env={"FREXPORT_ANALYSIS__INTERVAL": "1s", "FREXPORT_EVIDENCE__PROFILE__DURATION": "3s"},
                     log=tmp_path / "serve.log") as sc:
            job.wait_for(lambda: _bundles(evidence, "straggler-profile"), timeout=150,
                         what=f"a straggler profile bundle; sidecar log:\n{sc.output()}")
            asked_at = time.monotonic()
        bundle = _bundles(evidence, "straggler-profile")[0]
        for r in (0, 1):
            _chrome_trace(bundle / "profiles" / f"rank_{r}.pt.trace.json.gz")
        meta = json.loads((bundle / "profiles" / "profiles.json").read_text())
        assert (meta["slow_rank"], meta["peer_rank"]) == (1, 0)
        report = (bundle / "report.txt").read_text()
        m = _LINE.search(report)
        assert m, report
        assert 0.2 <= float(m.group(1)) <= 0.45 and float(m.group(2)) < 0.05, m.group(0)  # 0.3 s a batch
        assert "straggler" in report
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert "profiles/rank_1.pt.trace.json.gz" in manifest["files"]

        # on request, once the agent's interval since the sidecar's profile has passed
        time.sleep(max(0.0, AGENT_INTERVAL_S + 1 - (time.monotonic() - asked_at)))
        out = tmp_path / "cli"
        done = _profile_cli(shared, out, "--rank", "1", "--peer", "0", "--duration", "2s")
        assert done.returncode == 0, done.stderr
        assert _LINE.search(done.stdout), done.stdout
        _chrome_trace(out / "profiles" / "rank_1.pt.trace.json.gz")
        # and the agent's own bound refuses the rank again within its interval, whoever asks
        refused = _profile_cli(shared, tmp_path / "again", "--rank", "1", "--duration", "1s")
        assert refused.returncode == 1 and f"one profile per {AGENT_INTERVAL_S} s" in refused.stderr, refused.stderr
        assert not (tmp_path / "again" / "profiles" / "rank_1.pt.trace.json.gz").exists()


@pytest.mark.torchjob
@pytest.mark.parametrize("version", [v for v in torch_envs() if v != "2.13"])
def test_frexport_profile_shows_the_data_loader_on_every_torch(tmp_path, version):
    shared = tmp_path / "shared"
    env = {"LOADER_SLOW_RANK": "1", "LOADER_SLOW_S": "0.3", "MARK_DIR": str(tmp_path),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    with TorchJob("train_loader.py", shared, nproc=2, env=env, bin_dir=torch_envs()[version]) as job:
        job.wait_for(lambda: job.sockets_ready() and (tmp_path / "started_1").exists(), timeout=120,
                     what="the first step")
        done = _profile_cli(shared, tmp_path / "out", "--rank", "1", "--peer", "0", "--duration", "2s")
        assert done.returncode == 0, done.stderr + job.output()
        m = _LINE.search(done.stdout)
        assert m and float(m.group(1)) >= 0.2 and float(m.group(2)) < 0.05, done.stdout
        _chrome_trace(tmp_path / "out" / "profiles" / "rank_0.pt.trace.json.gz")


@pytest.mark.torchjob
def test_a_rank_waiting_in_a_gloo_collective_has_its_native_frame_in_the_bundle(tmp_path):
    tool = next((t for t in ("py-spy", "gdb") if shutil.which(t)), None)
    if tool is None:
        pytest.skip("neither py-spy nor gdb is on PATH: the sidecar cannot take native stacks here")
    shared, evidence = tmp_path / "shared", tmp_path / "evidence"
    env = {"WAIT_RANK": "1", "WAIT_STEP": "5", "MARK_DIR": str(tmp_path)}
    with TorchJob("train_loader.py", shared, nproc=2, env=env) as job, \
            Sidecar("--sockets-dir", str(shared), "--evidence-dir", str(evidence), "--poll-interval", "1s",
                    "--entries-interval", "1s", "--stall-after", "3s",
                    env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s", "FREXPORT_EVIDENCE__NATIVE_STACKS": "4"},
                    log=tmp_path / "serve.log") as sc:
        job.wait_for(lambda: (tmp_path / "waiting_1").exists(), timeout=90, what="rank 1 to wait")
        job.wait_for(lambda: _bundles(evidence, "missing_rank"), timeout=150,
                     what=f"an incident bundle; sidecar log:\n{sc.output()}")
        bundle = _bundles(evidence, "missing_rank")[0]
        native = (bundle / "stacks" / "rank_1.native.txt").read_text()
        assert native.startswith("# native stacks of rank 1 (pid ") and f" by {tool}: " in native.splitlines()[0]
        assert "c10d::Work::wait" in native
        assert (bundle / "stacks" / "rank_0.native.txt").exists()  # the culprit's too: it sleeps in Python
        report = (bundle / "report.txt").read_text()
        assert "native stack: rank 1 waits in c10d::Work::wait (libtorch_cpu.so, in pthread_cond_wait)" in report
        assert f"native stack: rank 0 ({tool}): its main thread does not wait in torch" in report
        doc = json.loads((bundle / "report.json").read_text())
        assert doc["native_stacks"]["1"]["frame"] == "c10d::Work::wait"
