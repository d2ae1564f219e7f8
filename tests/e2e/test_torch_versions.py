"""The live stall, end to end, on every torch a user runs: 2.13.0+cpu and the PyPI (CUDA) wheels of
2.14.1 and 2.15.0 run on CPU with gloo (scripts/setup.sh installs them under .torch/). On the CUDA
wheels the legacy NCCL recorder exists and is empty for gloo groups: a sidecar that read it saw four
healthy ranks while rank 2 hung (issue 25)."""

import json
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from frexport.analysis.engine import analyze
from frexport.decode.load import load
from frexport.sources.http_client import Target, request
from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob, torch_envs

POLL_S, STALL_S = 1.0, 3.0
ENVS = torch_envs()
EXPECTED = {0: "blocked", 1: "blocked", 2: "stalled", 3: "blocked"}


@contextmanager
def _stalled(tmp_path, script: str, bin_dir, launch: bool = True, serve_args: tuple[str, ...] = ()):
    """A 4-rank job whose rank 2 hangs before its 11th step, with `frexport serve` beside it: yields the
    job, the sidecar and the sockets dir once the sidecar names rank 2 stalled and its peers blocked (or
    20 s after it could). Not at the first pass that calls rank 2 stalled: on a loaded machine the
    ranks are seen a poll apart, and what one pass makes of snapshots taken seconds apart is not the
    answer the test is about; the settled one is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {"STEPS": "200", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "10", "MARK_DIR": str(tmp_path),
           "SOCKETS_DIR": str(shared)}
    with TorchJob(script, shared, env=env, bin_dir=bin_dir, launch=launch) as job, \
            Sidecar("--sockets-dir", str(shared), "--poll-interval", f"{POLL_S}s", "--stall-after", f"{STALL_S}s",
                    *serve_args, env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}, log=tmp_path / "serve.log") as sc:
        job.wait_for(lambda: (tmp_path / "stuck").exists(), timeout=120, what="rank 2 to get stuck")
        stuck_at = float((tmp_path / "stuck").read_text())
        while time.time() < stuck_at + STALL_S + 20 and sc.statuses() != EXPECTED:
            time.sleep(0.2)
        yield job, sc, shared


def _explain(sc: Sidecar, statuses: dict) -> str:
    """What the sidecar found, for a failing assertion's message: its findings and its log's tail."""
    findings = sorted((s.labels["kind"], s.labels["pg"], s.value) for s in sc.samples()
                      if s.name == "frexport_findings")
    return f"statuses {statuses}; findings {findings}; log:\n" + "\n".join(sc.output().splitlines()[-40:])


def _recorders(samples) -> set[tuple]:
    """(rank, recorder, via) of frexport_rank_recorder_info."""
    return {(int(s.labels["rank"]), s.labels["recorder"], s.labels["via"]) for s in samples
            if s.name == "frexport_rank_recorder_info" and s.value == 1}


@pytest.mark.torchjob
@pytest.mark.parametrize("agent", [True, False], ids=["agent", "pytorch-handlers"])
@pytest.mark.parametrize("version", sorted(ENVS))
def test_a_stuck_rank_is_named_on_every_torch(tmp_path, version, agent):
    script = "train.py" if agent else "train_worker_server.py"
    with _stalled(tmp_path, script, ENVS[version], launch=agent) as (_job, sc, _shared):
        statuses, samples = sc.statuses(), sc.samples()
        explained = "" if statuses == EXPECTED else _explain(sc, statuses)
    assert statuses == EXPECTED, (version, explained)
    # the sidecar says which recorder it reads: gloo's, not the (empty) NCCL one of the CUDA wheels
    via = "frexport.agent" if agent else "pytorch"
    assert _recorders(samples) == {(r, "gloo", via) for r in range(4)}


HOOK_VERSIONS = [v for v in sorted(ENVS) if v not in ("2.13", "2.14.1")]  # the hook attaches from 2.15


@pytest.mark.torchjob
@pytest.mark.parametrize("version", HOOK_VERSIONS or ["none"])
def test_a_hooked_backend_and_gloo_in_one_rank_are_both_read(tmp_path, version):
    """The default group on an out-of-tree backend (torch records it with its FlightRecorderHook, as it
    records nccl2) and a gloo subgroup: each rank holds two recorders, and the stall shows in the
    hooked one's group."""
    if version == "none":
        pytest.fail("no torch >= 2.15 environment under .torch/: run scripts/setup.sh")
    with _stalled(tmp_path, "train_hooked.py", ENVS[version]) as (_job, sc, shared):
        # a recorder is listed once it holds a group (its first op): a rank slow to its first gloo op under
        # load lists it at the next relist (sources/worker_server.py RELIST_S), not at the first
        want = {(r, rec, "frexport.agent") for r in range(4) for rec in ("gloo", "storecomm")}
        deadline = time.monotonic() + 30
        while _recorders(sc.samples()) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        samples = sc.samples()
        statuses = sc.statuses()
        snap = tmp_path / "snap"
        out = subprocess.run([sys.executable, "-m", "frexport", "snapshot", str(snap), "--sockets-dir", str(shared)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        # PyTorch's own dump of the hooked recorder, written on the rank's side where its timeout dump
        # goes (the agent sets TORCH_FR_DUMP_TEMP_FILE=<dir>/dumps/trace_): what a bundle asks for
        for r in range(4):
            resp = request(Target(unix_path=str(shared / f"rank-{r}.sock")), "POST",
                           "/handler/fr_dump_file?backend=storecomm", timeout=30)
            assert resp.status == 200, resp.body
    # torch answers "dump initiated" and writes the file a moment later: wait for all four, whole
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        written = load([str(shared / "dumps")], workers=1)
        if sorted(t.rank for t in written.traces) == [0, 1, 2, 3]:
            break
        time.sleep(0.2)
    assert sorted(t.rank for t in written.traces) == [0, 1, 2, 3], written.errors
    f = analyze(written.traces).findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name) == ("missing_rank", (2,), "storecomm:0"), f
    # each recorder a dump directory of its own; the hooked one's, read post-mortem, names rank 2
    assert {p.name for p in snap.glob("trace_*")} == {p.name for p in (snap / "recorder-storecomm").glob("trace_*")} \
        == {f"trace_{r}" for r in range(4)}
    loaded = load([str(snap / "recorder-storecomm")], workers=1)
    f = analyze(loaded.traces).findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name) == ("missing_rank", (2,), "storecomm:0"), f
    assert f.call_site.endswith("train_step")
    assert _recorders(samples) == want
    groups = {(s.labels["pg"], s.labels["backend"]) for s in samples
              if s.name == "frexport_pg_last_enqueued_collective"}
    assert groups == {("storecomm:0", "storecomm"), ("1", "gloo")}, groups
    assert statuses == EXPECTED, statuses


@pytest.mark.torchjob
def test_a_torch_whose_api_the_agent_does_not_know_is_read_through_pytorchs_handlers(tmp_path):
    """The agent registers nothing of its own there, says so (stderr, rank-<N>.json), and the sidecar
    reads PyTorch's handlers: the stall is still named, and the metric says through whom."""
    version = max(ENVS, key=lambda v: tuple(map(int, v.split("."))))
    with _stalled(tmp_path, "train_unknown_torch.py", ENVS[version]) as (job, sc, shared):
        statuses, samples = sc.statuses(), sc.samples()
        output = job.output()
        explained = "" if statuses == EXPECTED else _explain(sc, statuses)
    assert statuses == EXPECTED, explained
    assert _recorders(samples) == {(r, "gloo", "pytorch") for r in range(4)}
    assert "frexport.agent: this torch's Flight Recorder API is not one the agent knows" in output
    modes = {json.loads((shared / f"rank-{r}.json").read_text())["mode"] for r in range(4)}
    assert modes == {"worker_server_pytorch_handlers"}
