"""Hang classes on an ASYNCHRONOUS out-of-tree backend, the form users of NCCL-like backends see on torch
2.15: `asyncstore` (tests/realjobs/scenarios/_async_backend.py) returns from each op at once and completes
it later, so torch's FlightRecorderHook (no completion hook for such a backend) retires every entry when it
is issued, and a rank waits in an op whose entry already reads retired. Only sequence gaps, op kinds and
sizes show a fault.

Post-mortem: the real jobs captured in tests/fixtures/real/hooked_* (tests/realjobs/capture.py --hooked),
read as a user has them: the hooked recorder's pickles, their JSON, torch's own dump files
(`_dump_fr_trace_file`), and the whole capture (gloo's recorder + recorder-asyncstore/ as one job); each on
the three file-time copies (tests/support/filetimes.py). Live: a stuck rank under frexport-launch with
`frexport serve`, and without the agent (PyTorch's own handlers)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frexport.analysis.engine import Options
from frexport.analysis.findings import Diagnosis
from frexport.cli.analyze import diagnose as analyze_loaded
from frexport.cli.analyze_jobs import load_jobs
from frexport.decode.sandbox import Limits
from frexport.sources.worker_server import RELIST_S
from tests.e2e.test_torch_versions import EXPECTED as STALLED
from tests.e2e.test_torch_versions import _explain, _recorders, _stalled
from tests.support import paths
from tests.support.filetimes import copies
from tests.support.torchjob import torch_envs

BACKEND = "asyncstore"
# scenario -> (kind, culprit ranks, group (frexport's name), collective_seq_id) of the first finding
EXPECTED = {
    "hooked_stuck_tp": ("missing_rank", (5,), "asyncstore:2", 5),  # group 2: tp {4-7}
    "hooked_mixed_wait_hooked": ("missing_rank", (2,), "asyncstore:0", 4),
    "hooked_mixed_wait_gloo": ("missing_rank", (2,), "1", 4),  # gloo's group "1" (cpu_meta)
    "hooked_split_group": ("missing_rank", (2,), "asyncstore:0", 4),
    "hooked_size_mismatch": ("size_mismatch", (3,), "asyncstore:0", 4),
    "hooked_op_mismatch": ("desync", (1,), "asyncstore:0", 3),
}
# What a user may hand `frexport analyze`: the hooked recorder's pickles, its JSON, torch's dump files, or
# the whole capture. hooked_mixed_wait_gloo's fault is in the gloo group: the hooked recorder alone (all
# four ranks through seq 4) cannot show it, so only the whole capture is asked there.
VIEWS = ("pickles", "json", "torch_dump", "whole")
CASES = [(s, v) for s in sorted(EXPECTED) for v in VIEWS if v == "whole" or s != "hooked_mixed_wait_gloo"]


def _view(scenario: str, view: str, tmp: Path) -> Path:
    """A directory holding just that view of the capture."""
    src = paths.REAL_FIXTURES / scenario
    if view == "whole":
        return src
    dst = tmp / view
    dst.mkdir()
    files = {"pickles": (src / f"recorder-{BACKEND}").glob("trace_*"),
             "json": (src / f"recorder-{BACKEND}" / "json").glob("trace_*.json"),
             "torch_dump": (src / "torch_dump").glob("nccl_trace_rank_*")}[view]
    for p in files:
        shutil.copy2(p, dst / p.name)
    return dst


def _diagnose(d: Path) -> Diagnosis:
    """`frexport analyze D` in process: its loading (a directory's recorder-<name>/ read with it, as one
    job) and its diagnosis, with the stacks the directory holds."""
    args = argparse.Namespace(prefix=None, workers=1, max_file_bytes=None, follow_symlinks=False)
    jobs = load_jobs([str(d)], args, Limits())
    assert not isinstance(jobs, str) and len(jobs) == 1, jobs
    _, job_paths, loaded = jobs[0]
    return analyze_loaded(loaded, job_paths, Options())[0]


def _first(d: Diagnosis) -> tuple:
    f = d.findings[0] if d.findings else None
    return (f.kind, f.culprit_ranks, f.pg_name, f.collective_seq_id) if f else ("none",)


@pytest.mark.parametrize("scenario,view", CASES)
def test_the_culprit_is_named_on_every_file_time_variant(tmp_path, scenario, view):
    src = _view(scenario, view, tmp_path)
    out = {variant: _diagnose(d) for variant, d in copies(src, tmp_path / "copies")}
    seen = {v: (d.verdict, _first(d)) for v, d in out.items()}
    d = out["captured"]
    assert d.verdict != "healthy" and _first(d) == EXPECTED[scenario], (seen, [f.message for f in d.findings])
    docs = {v: json.dumps(d.to_json(), sort_keys=True) for v, d in out.items()}
    assert len(set(docs.values())) == 1, seen  # the file times change nothing
    if view in ("pickles", "whole"):  # the capture's pickles carry frames (torch's dump file has none)
        site = d.findings[0].call_site or ""
        assert f"/{scenario.rsplit('_wait_', 1)[0]}.py:" in site or "/_hooked.py:" in site, site


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_the_cli_exits_1_and_names_the_culprit_in_the_whole_capture(scenario):
    run = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(paths.REAL_FIXTURES / scenario),
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(run.stdout)
    kind, culprits, group, seq = EXPECTED[scenario]
    f = doc["findings"][0] if doc["findings"] else {}
    pg = f.get("process_group", {})
    named = f"{pg['backend']}:{pg['name']}" if pg.get("backend") not in (None, "gloo") else pg.get("name")
    assert (run.returncode, f.get("kind"), f.get("culprit_ranks"), named, f.get("collective_seq_id")) == \
        (1, kind, list(culprits), group, seq), run.stdout[-3000:] + run.stderr[-2000:]


def test_the_cli_on_each_view_of_the_stuck_tp_job(tmp_path):
    """The 8-rank tp/dp job through the CLI on every view: rank 5, missing from tp's all_gather."""
    for view in ("pickles", "json", "torch_dump"):
        d = _view("hooked_stuck_tp", view, tmp_path)
        run = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(d), "--format", "json"],
                             capture_output=True, text=True, timeout=120)
        doc = json.loads(run.stdout)
        f = doc["findings"][0] if doc["findings"] else {}
        assert (view, run.returncode, doc["verdict"] != "healthy", f.get("kind"), f.get("culprit_ranks"),
                f.get("op")) == (view, 1, True, "missing_rank", [5], "all_gather"), run.stdout[-3000:]


# PyTorch's own analyzer on the same pickles, for the benchmark's comparison. What it said (2.15.0): every
# group with a sequence gap, the culprit's tp group first; no root cause ranked (the dp gaps of the victims
# 4, 6, 7 and of rank 5 are listed alike). Their pg_config is filled (unlike gloo's), so it runs.
FR_TRACE_SAYS = {("2:tp", 5, frozenset({5})), ("3:dp", 5, frozenset({4})), ("4:dp", 5, frozenset({5})),
                 ("5:dp", 5, frozenset({6})), ("6:dp", 5, frozenset({7}))}
_GAP = re.compile(r"Not all ranks joining collective, sequence number: (\d+)\n.*?\ngroup info: (\S+)\n.*?"
                  r"missing ranks: \{([\d, ]+)\}", re.S)


@pytest.mark.torchjob
def test_pytorchs_fr_trace_on_the_stuck_tp_pickles(tmp_path):
    envs = torch_envs()
    if "2.15.0" not in envs:
        pytest.fail("no .torch/2.15.0 environment: run scripts/setup.sh")
    flat = _view("hooked_stuck_tp", "pickles", tmp_path)  # fr_trace reads every file below its dir (json/ too)
    run = subprocess.run([str(envs["2.15.0"] / "python"), "-m", "torch.distributed.flight_recorder.fr_trace",
                          str(flat), "--prefix", "trace_"], capture_output=True, text=True, timeout=300)
    text = run.stdout + run.stderr  # (it reports through logging: on stderr)
    said = {(g, int(seq), frozenset(int(r) for r in ranks.split(","))) for seq, g, ranks in _GAP.findall(text)}
    first = _GAP.search(text)
    assert run.returncode == 0 and said == FR_TRACE_SAYS, text[-5000:]
    assert first is not None and first.group(2) == "2:tp", text[:3000]
    # it warns once per entry that it does not know the backend: "unrecognized comm library 'asyncstore'"
    assert "unrecognized comm library 'asyncstore'" in text


# ---- live -------------------------------------------------------------------------------------------------
ENVS = torch_envs()
HOOK_VERSIONS = [v for v in sorted(ENVS) if v not in ("2.13", "2.14.1")]  # the hook attaches from 2.15
STUCK_STEP = 10  # _stalled's: rank 2 issued asyncstore collectives 1-10; its peers issued 11 and wait in it


def _group(samples, name: str, pg: str) -> dict[int, float]:
    return {int(s.labels["rank"]): s.value for s in samples if s.name == name and s.labels.get("pg") == pg}


@pytest.mark.torchjob
@pytest.mark.parametrize("version", HOOK_VERSIONS or ["none"])
def test_a_stuck_rank_of_an_async_hooked_backend_is_named_live(tmp_path, version):
    """train_hooked_async.py under frexport-launch, `frexport serve` beside it: rank 2 stalled, its peers
    blocked (their asyncstore entries of the op they wait in already retired), and no rank's
    last-completed collective is one that rank 2 never issued."""
    if version == "none":
        pytest.fail("no torch >= 2.15 environment under .torch/: run scripts/setup.sh")
    with _stalled(tmp_path, "train_hooked_async.py", ENVS[version]) as (_job, sc, _shared):
        claimed: dict[int, float] = {}
        deadline = time.monotonic() + 6  # several polls: a claim at any of them is wrong
        while time.monotonic() < deadline:
            for rank, v in _group(sc.samples(), "frexport_pg_last_completed_collective", "asyncstore:0").items():
                claimed[rank] = max(v, claimed.get(rank, v))
            time.sleep(0.5)
        statuses, samples = sc.statuses(), sc.samples()
        explained = "" if statuses == STALLED else _explain(sc, statuses)
    assert statuses == STALLED, (version, explained)
    enqueued = _group(samples, "frexport_pg_last_enqueued_collective", "asyncstore:0")
    assert enqueued == {0: STUCK_STEP + 1, 1: STUCK_STEP + 1, 2: STUCK_STEP, 3: STUCK_STEP + 1}, enqueued
    assert all(v <= STUCK_STEP for v in claimed.values()), claimed  # rank 2 never issued STUCK_STEP + 1
    assert _recorders(samples) == {(r, rec, "frexport.agent") for r in range(4) for rec in ("gloo", BACKEND)}


@pytest.mark.torchjob
@pytest.mark.parametrize("version", HOOK_VERSIONS or ["none"])
def test_a_stuck_rank_of_an_async_hooked_backend_without_the_agent(tmp_path, version):
    """The same job with PyTorch's worker server only. Its handlers list no recorders, so an out-of-tree
    backend's is read where the user names the backend (`serve --recorder asyncstore`; torch's own
    backends are probed by name): rank 2 stalled, its peers blocked, read through PyTorch's handlers."""
    if version == "none":
        pytest.fail("no torch >= 2.15 environment under .torch/: run scripts/setup.sh")
    wanted = {(r, "asyncstore", "pytorch") for r in range(4)}
    with _stalled(tmp_path, "train_hooked_async_worker_server.py", ENVS[version], launch=False,
                  serve_args=("--recorder", "asyncstore")) as (_j, sc, _s):
        statuses = sc.statuses()
        # a recorder probed before its first group is probed again RELIST_S later: on a loaded machine the
        # statuses can settle first (rank 2's peers' records name it), so its recorder is waited for
        deadline = time.monotonic() + RELIST_S + 10
        while not wanted <= _recorders(sc.samples()) and time.monotonic() < deadline:
            time.sleep(0.5)
        samples = sc.samples()
        explained = _explain(sc, statuses)
    recorders = _recorders(samples)
    assert statuses == STALLED, (version, sorted(recorders), explained)
    assert wanted <= recorders, sorted(recorders)
