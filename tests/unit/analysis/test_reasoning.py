"""The faults whose culprit must be reasoned out (issue 19), on real torch 2.13 gloo jobs and on
NCCL-shaped synthetic dumps: a cross-group deadlock, a member that left an all_to_all, a crashed
rank beside the survivors' dumps, a healthy job caught mid-run. The diagnosis must not depend on
file names, their order, or their times (a post-mortem's file times are no clock)."""

import os
import random
import shutil
import time

import pytest

from tests.support import paths
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, write

FIXTURES = paths.REAL_FIXTURES
Y2020 = 1_577_836_800 * 10**9


def _copies(src, tmp_path, fmt="pickle"):
    """The dumps under other names, in another order, with file times in 2020 and now."""
    files = sorted(src.glob("trace_*")) if fmt == "pickle" else sorted((src / "json").glob("trace_*.json"))
    for i, (prefix, stamp) in enumerate([("nccl_trace_rank_", Y2020), ("host-b_rank", time.time_ns())]):
        d = tmp_path / f"{fmt}{i}"
        d.mkdir()
        order = list(files)
        random.Random(i).shuffle(order)
        for f in order:
            rank = f.name.split("_")[1].split(".")[0]
            dst = d / f"{prefix}{rank}{'.json' if fmt == 'json' else ''}"
            shutil.copyfile(f, dst)
            os.utime(dst, ns=(stamp, stamp))
        yield d


def _only(d):
    assert len(d.findings) == 1, [(f.kind, f.message) for f in d.findings]
    return d.findings[0]


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_cross_group_deadlock_blames_only_the_rank_out_of_order(diagnose, tmp_path, fmt):
    for d in _copies(FIXTURES / "cross_group_order", tmp_path, fmt):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "unhealthy" and out.ranks == list(range(8))
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.pg_desc) == ("desync", (6,), (0, 1, 2, 3, 4, 5, 7), "tp")
        if fmt == "pickle":
            assert f.reason == ("rank 6 issued cross_group_order.py:13 on group tp where ranks 0-5, 7 issue it on "
                                "the default group; the wait-for graph is a cycle 6 -> 4 -> 6")
        else:  # no frames: where the ranks wait still tells
            assert f.reason == ("rank 6 waits in group tp where ranks 0-5, 7 wait in another group; the wait-for "
                                "graph is a cycle 6 -> 4 -> 6")


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_member_that_left_an_all_to_all_is_its_culprit(diagnose, tmp_path, fmt):
    for d in _copies(FIXTURES / "all_to_all_split_mismatch", tmp_path, fmt):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "unhealthy"
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id) == ("size_mismatch", (1,), (0, 2, 3), 7)
        assert "send 268 elements in all but receive 256" in f.message  # not "sizes match"
        assert "rank 1 sends 68 elements, receives 56" in f.details
        assert "rank 1 finished collective 7 while ranks 0, 2, 3 have not" in f.reason


def test_uneven_but_consistent_all_to_all_is_healthy(diagnose, tmp_path):
    """The same job's earlier steps: splits differ per rank (MoE routing) and add up."""
    for d in _copies(FIXTURES / "all_to_all_split_mismatch", tmp_path):
        out = diagnose(d)
        assert out.matched == 7 and [f.collective_seq_id for f in out.findings] == [7]




@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_crashed_rank_with_an_older_dump_never_issued_the_collective(diagnose, tmp_path, fmt):
    """Rank 3 died; its last dump ends with collective 25, its ring neighbours 0 and 2 failed out of
    collective 26 (gloo retires failed work), rank 1 still waits in it."""
    for d in _copies(FIXTURES / "crashed_rank", tmp_path, fmt):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "unhealthy" and f.certain
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id) == ("missing_rank", (3,), (0, 1, 2), 26)
        assert f.message == ("rank 3 left the job after collective 25 of group 0 (default_pg); ranks 0 and 2 "
                             "failed out of collective 26 (all_reduce), rank 1 waits in it")
        assert "ranks 0 and 2 finished collective 26 without rank 3 while rank 1 still waits in it" in f.reason
        assert f.details[0].startswith("rank 1 waits in all_reduce")  # not "ranks 0-2 wait"

@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_healthy_job_caught_mid_run_is_never_a_desync(diagnose, tmp_path, fmt):
    """Ranks 0-3 and 7 wait in all_reduce 34 while 4-6 still compute. A post-mortem's file times say
    nothing (issue 27: not even that the dumps were fresh), so the ranks still computing are suspects of
    a possible hang and the verdict is inconclusive, whatever the times; two looks decide it."""
    assert diagnose(FIXTURES / "healthy_midrun" / ("" if fmt == "pickle" else "json")).verdict == "inconclusive"
    for d in _copies(FIXTURES / "healthy_midrun", tmp_path, fmt):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "inconclusive" and not f.certain and out.ranks == list(range(8))
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id) == (
            "missing_rank", (4, 5, 6), (0, 1, 2, 3, 7), 34)
        assert "do not say how long the others waited" in f.reason

# --- the same rules on NCCL-shaped dumps (states started/completed, pg_config with members) ---

def _synth_copies(tmp_path, job, world, groups=None):
    dumps = {r: dump(es, world=world, groups={k: v for k, v in (groups or {}).items() if r in v[1]})
             for r, es in job.items()}
    for i, stamp in enumerate([Y2020, time.time_ns()]):
        d = write(tmp_path / f"s{i}", dumps, prefix=["nccl_trace_rank_", "x"][i])
        for p in d.iterdir():
            os.utime(p, ns=(stamp, stamp))
        yield d


def test_nccl_cross_group_deadlock(tmp_path, diagnose):
    """The issue's own example: tp pairs {0,1}, {2,3}; rank 2 issues train.py:41 on tp first."""
    groups = {"1": ("tp", [0, 1]), "2": ("tp", [2, 3])}
    tp = {0: "1", 1: "1", 2: "2", 3: "2"}
    job = {}
    for r in range(4):
        es = []
        for step in range(3):
            es.append(entry(len(es), step + 1, line=41, created=T0 + len(es) * STEP_NS))
            es.append(entry(len(es), step + 1, pg=(tp[r], "tp"), pg_id=1, line=42, created=T0 + len(es) * STEP_NS))
        if r == 2:
            es.append(entry(6, 4, pg=("2", "tp"), pg_id=1, line=41, state="started", created=T0 + 6 * STEP_NS))
        else:
            es.append(entry(6, 4, line=41, state="started", created=T0 + 6 * STEP_NS))
        job[r] = es
    for d in _synth_copies(tmp_path, job, 4, groups):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "unhealthy" and (f.kind, f.culprit_ranks, f.blocked_ranks) == ("desync", (2,), (0, 1, 3))
        assert f.reason == ("rank 2 issued train.py:41 on group tp where ranks 0, 1, 3 issue it on the default "
                            "group; the wait-for graph is a cycle 2 -> 3 -> 2")


def test_nccl_member_that_left_an_all_to_all(tmp_path, diagnose):
    """Rank 3 completed an all_to_all whose totals do not add up while its peers are still in it."""
    job = healthy_job()
    for r in range(4):
        sizes, out = ((8, 2),), ((8, 2),)
        if r == 3:
            out = ((6, 2),)
        job[r].append(entry(10, 11, op="all_to_all", sizes=sizes, out_sizes=out,
                            state="completed" if r == 3 else "started"))
    for d in _synth_copies(tmp_path, job, 4):
        out = diagnose(d)
        f = _only(out)
        assert out.verdict == "unhealthy"
        assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("size_mismatch", (3,), (0, 1, 2))
        assert "send 64 elements in all but receive 60" in f.message


def test_nccl_uneven_consistent_all_to_all_is_healthy(tmp_path, diagnose):
    job = {r: [entry(i, i + 1, op="all_to_all", sizes=((r + 1, 2),), out_sizes=((4 - r, 2),)) for i in range(5)]
           for r in range(4)}
    for d in _synth_copies(tmp_path, job, 4):
        assert diagnose(d).verdict == "healthy"


def test_nccl_member_scheduled_while_peers_started_has_not_launched(tmp_path, diagnose):
    job = healthy_job()
    for r in range(4):
        job[r].append(entry(10, 11, state="scheduled" if r == 1 else "started"))
    for d in _synth_copies(tmp_path, job, 4):
        out = diagnose(d)
        f = _only(out)
        assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("not_completed", (1,), (0, 2, 3))
        assert "never launched" in f.message and "scheduled" in f.reason
        assert out.verdict == "inconclusive"  # how long they waited: the file times do not say
    assert diagnose(d, clock=True).verdict == "unhealthy"


def test_nccl_snapshot_of_ranks_still_computing_is_never_a_desync(tmp_path, diagnose):
    """Two ranks reached collective 11, two are still computing: a suspect at most, never desync."""
    job = healthy_job()
    for r in (0, 1):
        job[r].append(entry(10, 11, state="started"))
    for d in _synth_copies(tmp_path, job, 4):
        out = diagnose(d)
        assert out.verdict == "inconclusive" and all(not f.certain for f in out.findings)
        assert {f.kind for f in out.findings} == {"missing_rank"}
        assert out.findings[0].culprit_ranks == (2, 3)


def test_nccl_collective_completed_by_a_rank_that_went_on_was_issued_by_all(tmp_path, diagnose):
    """Dumps of a running job are not simultaneous: rank 3, dumped last, completed collective 11 and
    issued 12, so rank 2 (dumped first, records ending at 10) did issue 11 after its dump."""
    job = healthy_job()
    for r in (0, 1):
        job[r].append(entry(10, 11, state="started"))
    job[3].append(entry(10, 11))
    job[3].append(entry(11, 12, state="started"))
    for d in _synth_copies(tmp_path, job, 4):
        out = diagnose(d)
        assert out.verdict in ("healthy", "inconclusive") and not any(f.kind == "desync" for f in out.findings)
        assert all(f.collective_seq_id != 11 for f in out.findings)
