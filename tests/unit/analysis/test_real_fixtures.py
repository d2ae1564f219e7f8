"""The diagnosis of real PyTorch 2.13 gloo jobs, captured through the worker server while they hung.

Fixtures: tests/fixtures/real/<scenario>/ (pickles with stack frames, JSON twins under json/,
stacks, scenario.json), made by tests/realjobs/capture.py. PyTorch's own analyzer crashes on every
one of them (gloo writes an empty pg_config); frexport must name the right culprit, whatever the
file names or their order.
"""

import json
import random
import shutil

import pytest

from tests.support import paths

FIXTURES = paths.REAL_FIXTURES

# scenario -> (verdict, kind, culprits, blocked, seq, op, call site (file:line function) or None).
# A rank that has not reached a collective its peers wait in is a suspect, not a proven culprit, in a
# post-mortem: the dumps hold no clock that says how long the peers waited (file times do not).
EXPECTED = {
    "healthy": ("healthy", None, None, None, None, None, None),
    "extra_allreduce": ("inconclusive", "desync", (0,), (), 4, "all_reduce", "extra_allreduce.py:16 <module>"),
    "stuck_before_collective": ("inconclusive", "missing_rank", (2,), (0, 1, 3), 4, "all_reduce",
                                "stuck_before_collective.py:18 train_step"),
    "size_mismatch": ("unhealthy", "size_mismatch", (3,), (), 4, "broadcast", "size_mismatch.py:12 train_step"),
    "dtype_mismatch": ("unhealthy", "dtype_mismatch", (1,), (), 2, "all_reduce", "dtype_mismatch.py:10 train_step"),
    "slow_rank": ("unhealthy", "straggler", (1,), (0, 2, 3), None, "all_reduce", "slow_rank.py:13 train_step"),
    "collective_type_mismatch": ("unhealthy", "desync", (1,), (0, 2, 3), 3, "broadcast",
                                 "collective_type_mismatch.py:10 train_step"),
}


# Without frames only the count of ranks in the collective is left; the first ranks to reach a
# collective are a minority in a healthy job too, so the ones that have not reached it are the suspects.
JSON_EXPECTED = {**EXPECTED, "extra_allreduce": ("inconclusive", "missing_rank", (1, 2, 3), (0,), 4, "all_reduce",
                                                 "")}


def _check(d, scenario, with_frames=True):
    verdict, kind, culprits, blocked, seq, op, site = (EXPECTED if with_frames else JSON_EXPECTED)[scenario]
    assert d.verdict == verdict, [f.message for f in d.findings]
    assert d.ranks == [0, 1, 2, 3] and d.input_errors == []
    if kind is None:
        assert d.findings == [] and d.matched > 0
        return
    assert len(d.findings) == 1, [f.message for f in d.findings]  # one fault, one finding
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.op) == (kind, culprits, blocked, op)
    if seq is not None:
        assert f.collective_seq_id == seq
    if with_frames:
        assert f.call_site is not None and f.call_site.endswith(site), f.call_site
    else:
        assert f.call_site is None  # JSON dumps carry no stacks


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_real_scenario(diagnose, scenario):
    meta = json.loads((FIXTURES / scenario / "scenario.json").read_text())
    assert meta["torch"].startswith("2.13") and meta["captured_ranks"] == [0, 1, 2, 3]
    _check(diagnose(FIXTURES / scenario), scenario)


@pytest.mark.parametrize("scenario", ["stuck_before_collective", "extra_allreduce"])
def test_a_clock_proves_the_hang(diagnose, scenario):
    """With dump times that are when the ranks were seen (the sidecar's polls; here the files' times,
    days after the entries), the suspect of a hang is its culprit."""
    d = diagnose(FIXTURES / scenario, clock=True)
    assert d.verdict == "unhealthy" and d.findings[0].certain
    assert d.findings[0].culprit_ranks == EXPECTED[scenario][2]


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_real_scenario_from_json_twins_only(diagnose, scenario):
    _check(diagnose(FIXTURES / scenario / "json"), scenario, with_frames=False)


@pytest.mark.parametrize("scenario", ["stuck_before_collective", "collective_type_mismatch", "size_mismatch",
                                      "extra_allreduce"])
def test_verdict_survives_renames_and_order(diagnose, tmp_path, scenario):
    """Same dumps, other names, other directory layout and creation order: the same diagnosis."""
    src = FIXTURES / scenario
    results = set()
    for i, prefix in enumerate(["trace_", "nccl_trace_rank_", "host-a_attempt3_rank", "zz"]):
        d = tmp_path / f"v{i}"
        order = list(range(4))
        random.Random(i).shuffle(order)
        for r in order:
            sub = d / f"node{random.Random(i * 10 + r).randint(0, 2)}"
            sub.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / f"trace_{r}", sub / f"{prefix}{r}")
        out = diagnose(d)
        _check(out, scenario)
        results.add(json.dumps(out.to_json(), sort_keys=True))
    assert len(results) == 1


# The same scenario captured on the PyPI (CUDA) wheels users install, run on CPU with gloo:
# tests/realjobs/capture.py --torch .torch/<version>/bin. From 2.14 gloo's placeholder pg_config lists
# the ranks of the last group the process created (here the world): read as nobody's membership.
OTHER_TORCH = {"torch-2.14.1": "2.14.1+cu130", "torch-2.15.0": "2.15.0+cu132"}


@pytest.mark.parametrize("build", sorted(OTHER_TORCH))
@pytest.mark.parametrize("json_only", [False, True], ids=["pickles", "json"])
def test_the_same_hang_on_every_torch(diagnose, build, json_only):
    d = FIXTURES / build / "stuck_before_collective"
    meta = json.loads((d / "scenario.json").read_text())
    assert meta["torch"] == OTHER_TORCH[build] and meta["captured_ranks"] == [0, 1, 2, 3]
    _check(diagnose(d / "json" if json_only else d), "stuck_before_collective", with_frames=not json_only)
