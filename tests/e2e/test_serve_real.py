"""`frexport serve` polling a real 4-rank torch 2.13 gloo job that runs with frexport.agent."""

import json
import subprocess
import sys
import time

import pytest

from frexport.analysis.engine import analyze
from frexport.decode.load import load
from tests.support.paths import JOBS
from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob, wait_until

POLL_S, STALL_S = 1.0, 3.0


def _serve(tmp_path, shared, stall_s: float = STALL_S):
    # entries every poll too (status first reads a moving rank's entries every 10 s by default): a
    # rank killed with SIGKILL leaves the entries last read, and these tests look at them
    return Sidecar("--sockets-dir", str(shared), "--evidence-dir", str(tmp_path / "evidence"),
                   "--poll-interval", f"{POLL_S}s", "--entries-interval", f"{POLL_S}s", "--stall-after", f"{stall_s}s",
                   env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}, log=tmp_path / "serve.log")


def _bundles(tmp_path, reason=None):
    d = tmp_path / "evidence"
    if not d.exists():
        return []
    return sorted(p for p in d.iterdir() if not p.name.startswith(".") and (reason is None or reason in p.name))


@pytest.mark.torchjob
def test_healthy_job_is_never_stalled(tmp_path):
    shared = tmp_path / "shared"
    # 10 s, 100x the step: a rank that reaches the first collective seconds after its peers on a loaded machine makes
    # them wait in the first collective, which a 3 s threshold rightly calls a stall
    with TorchJob("train.py", shared, env={"STEPS": "60", "STEP_S": "0.1", "MARK_DIR": str(tmp_path)}) as job, \
            _serve(tmp_path, shared, stall_s=10.0) as sc:
        seen = set()
        while job.proc.poll() is None:
            seen.update(sc.statuses().values())
            time.sleep(0.3)
        assert job.proc.returncode == 0, job.output()
        assert seen <= {"ok"}, seen
        assert sc.value("frexport_collectives_total", pg_desc="default_pg", op="all_reduce", state="retired") >= 60
        assert _bundles(tmp_path) == []  # a clean exit is no incident
        assert sc.stop() < 5.0  # SIGTERM: flushed and gone within 5 s


@pytest.mark.torchjob
def test_stuck_rank_is_named_with_its_stack_in_the_evidence(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": "200", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "15", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env) as job, _serve(tmp_path, shared) as sc:
        job.wait_for(lambda: (tmp_path / "stuck").exists(), what="rank 2 to get stuck")
        stuck_at = float((tmp_path / "stuck").read_text())
        deadline = stuck_at + STALL_S + 2 * POLL_S + 1.0  # + the analysis interval and scrape slack
        while time.time() < deadline + 10 and sc.statuses().get(2) != "stalled":
            time.sleep(0.1)
        detected = time.time()
        statuses = sc.statuses()
        assert statuses == {0: "blocked", 1: "blocked", 2: "stalled", 3: "blocked"}, statuses
        assert detected <= deadline, f"stall named {detected - stuck_at:.1f} s after it began"
        assert sc.value("frexport_rank_stall_seconds", rank=2, pg="0", op="all_reduce", kind="missing_rank") > 0
        job.wait_for(lambda: _bundles(tmp_path, "missing_rank"), timeout=20, what="an evidence bundle")
        bundle = _bundles(tmp_path, "missing_rank")[0]
        stack = (bundle / "stacks" / "rank_2.traceback.txt").read_text()
        assert "in load_batch" in stack and "train.py" in stack  # the line rank 2 sleeps on
        assert "missing_rank" in (bundle / "report.txt").read_text()
        assert {p.name for p in bundle.glob("trace_*")} == {f"trace_{r}" for r in range(4)}
        # The bundle is a dump directory: frexport analyze reads it, with call sites from the frames.
        loaded = load([str(bundle)], workers=1)
        f = analyze(loaded.traces).findings[0]
        assert f.kind == "missing_rank" and f.culprit_ranks == (2,) and f.call_site.endswith("train_step")
        # Its report is that analysis, not the live one from JSON polls: call sites, and where each rank is now.
        train = JOBS / "train.py"
        sleep_line = next(i for i, line in enumerate(train.read_text().splitlines(), 1) if "time.sleep(0.5)" in line)
        report = (bundle / "report.txt").read_text()
        assert f"call site: {train}:" in report and "last recorded an op at default_pg" not in report
        assert f"now: rank 2 is in {train}:{sleep_line} load_batch (time.sleep), outside any collective" in report
        assert "now: ranks 0, 1, 3 are in " in report and "train_step, inside torch.distributed all_reduce" in report
        doc = json.loads((bundle / "report.json").read_text())
        assert doc["findings"][0]["call_site"].startswith(f"{train}:")
        assert doc["ranks_now"]["2"].startswith(f"{train}:{sleep_line} load_batch")
        # no files of errors: only handlers the worker server lists are asked for
        assert not [p for p in (bundle / "stacks").iterdir() if "unavailable" in p.read_text()[:200]]
        # frexport analyze on the bundle says the same
        out = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(bundle)], capture_output=True,
                             text=True, timeout=120)
        assert f"now: rank 2 is in {train}:{sleep_line} load_batch (time.sleep)" in out.stdout


@pytest.mark.torchjob
def test_slow_rank_is_straggling_not_stalled(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": "40", "STEP_S": "0.0", "SLOW_RANK": "1", "SLOW_S": "0.3", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env) as job, _serve(tmp_path, shared) as sc:
        seen = {}
        while job.proc.poll() is None:
            for rank, status in sc.statuses().items():
                seen.setdefault(rank, set()).add(status)
            time.sleep(0.3)
        assert job.proc.returncode == 0, job.output()
        assert "straggling" in seen.get(1, set()), seen
        assert not any(s & {"stalled", "blocked", "desynced"} for s in seen.values()), seen
        assert all(s <= {"ok"} for r, s in seen.items() if r != 1), seen


@pytest.mark.torchjob
def test_killed_job_leaves_its_last_snapshots(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": "1000", "STEP_S": "0.05", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env) as job, _serve(tmp_path, shared) as sc:
        job.wait_for(lambda: sc.value("frexport_source_up", source="socket:rank-3") == 1.0, what="polling")
        time.sleep(2 * POLL_S)
        job.kill()  # SIGKILL: sockets stay behind, nobody answers
        wait_until(lambda: _bundles(tmp_path, "ranks-down"), timeout=20, what="a bundle after the kill")
        bundle = _bundles(tmp_path, "ranks-down")[0]
        assert {p.name for p in bundle.glob("trace_*")} == {f"trace_{r}" for r in range(4)}
        loaded = load([str(bundle)], workers=1)
        assert sorted(t.rank for t in loaded.traces) == [0, 1, 2, 3] and loaded.errors == []
        assert all(t.n_entries > 5 for t in loaded.traces)
        assert sc.value("frexport_source_up", source="socket:rank-0") == 0.0


def _stall_series(sc):
    return [s for s in sc.samples() if s.name == "frexport_rank_stall_seconds"]


@pytest.mark.torchjob
def test_a_job_killed_while_stalled_is_down_not_stalled_also_at_the_next_start(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": "200", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "10", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env) as job, _serve(tmp_path, shared) as sc:
        job.wait_for(lambda: sc.statuses().get(2) == "stalled", timeout=60, what="rank 2 stalled")
        assert _stall_series(sc)
        job.kill()  # SIGKILL mid-hang: sockets stay behind, nobody answers
        killed = time.monotonic()
        wait_until(lambda: set(sc.statuses().values()) == {"down"}, timeout=15, what="every rank down")
        assert time.monotonic() - killed < 2 * POLL_S + 3.0  # at once: the next poll and analysis pass
        assert sc.statuses() == {r: "down" for r in range(4)}
        assert _stall_series(sc) == []  # FrexportRankStalled stops paging; FrexportSourceDown speaks
        assert not [s for s in sc.samples() if s.name == "frexport_oldest_pending_collective_age_seconds"]
        assert sc.value("frexport_source_up", source="socket:rank-2") == 0.0
        # the last diagnosis stays in the bundle written when the stall was seen
        # (the job is dead by now: job.wait_for would give up at once)
        wait_until(lambda: _bundles(tmp_path, "missing_rank"), timeout=20, what="the stall's bundle")
        assert "rank 2 never issued" in (_bundles(tmp_path, "missing_rank")[0] / "report.txt").read_text()
    # a sidecar started after the job died: its sockets are recognised as dead, not up, not stalled
    with Sidecar("--sockets-dir", str(shared), "--evidence-dir", str(tmp_path / "evidence2"),
                 "--poll-interval", f"{POLL_S}s", "--stall-after", f"{STALL_S}s",
                 env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}) as later:
        wait_until(lambda: later.statuses() == {r: "down" for r in range(4)}, timeout=15, what="ranks down")
        assert all(later.value("frexport_source_up", source=f"socket:rank-{r}") == 0.0 for r in range(4))
        assert later.value("frexport_source_up", source=f"sockets:{shared}") == 1.0
        assert _stall_series(later) == []
        time.sleep(2.0)
        assert not (tmp_path / "evidence2").exists() or not list((tmp_path / "evidence2").iterdir())
