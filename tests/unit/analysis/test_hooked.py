"""Backends torch 2.15 records with its FlightRecorderHook, in both forms the hook writes (entries built
from its source: tests/support/synth.py `hook_entry`; the real jobs are in tests/e2e/test_hooked_jobs.py).

Without completion hooks (mpi, ucc, out-of-tree and Python backends) every entry is retired when issued:
a hang is a sequence gap, the members behind are the suspects and the members ahead blocked, exactly
as a missing rank reads on gloo. With them (nccl2, nccl-lazy) a hung op stays unretired and no entry
ever reads `started`: never "not launched" for want of a start."""

import pytest

from frexport.analysis.engine import Options, analyze
from frexport.decode.sandbox import Limits
from frexport.live.diagnosis import BLOCKED, OK, STALLED, statuses_of
from tests.support.synth import STEP_NS, T0, dump, entry, hook_entry, traces, write

TP = {"1": ("tp", [0, 1, 2, 3]), "2": ("tp", [4, 5, 6, 7])}
DP = {"3": ("dp", [0, 4]), "4": ("dp", [1, 5]), "5": ("dp", [2, 6]), "6": ("dp", [3, 7])}


def _tp_dp_job(stuck: int | None, steps: int = 8, at: int = 6, ahead: int = 1, push: bool = False,
               backend: str = "ucc") -> dict[int, dict]:
    """8 ranks, tp 2 x 4, dp 4 x 2, every group on a hooked backend; each step a tp all_gather then a dp
    all_reduce. `stuck` never issues step `at`'s all_gather (host code); on an asynchronous backend the
    others may issue `ahead` more ops before they block."""
    out = {}
    for r in range(8):
        tp = "1" if r < 4 else "2"
        dp = str(3 + r % 4)
        es, rid = [], 0
        for step in range(1, steps + 1):
            if r == stuck and step >= at:
                break
            if r != stuck and step > at + ahead - 1:
                break
            created = T0 + step * STEP_NS + r * 1000
            done = step < at or (push and stuck is not None and (r < 4) != (stuck < 4))  # the other tp group
            es.append(hook_entry(rid, step, push=push, done=done, backend=backend, op="all_gather",
                                 pg=(tp, "tp"), pg_id=1, sizes=((4,),), out_sizes=((4,),) * 4, created=created))
            rid += 1
            if step < at:
                es.append(hook_entry(rid, step, push=push, done=done, backend=backend, pg=(dp, "dp"), pg_id=2,
                                     created=created + 500))
                rid += 1
        out[r] = dump(es, world=8, groups={**TP, **DP})
    return out


def test_issue_only_a_sequence_gap_names_the_member_behind_as_the_suspect():
    d = analyze(list(traces(_tp_dp_job(stuck=5)).values()))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name, f.collective_seq_id, f.op, f.root_cause, f.certain) == \
        ("missing_rank", (5,), "ucc:2", 6, "all_gather", True, False), f.message
    assert {4, 6, 7} <= set(f.blocked_ranks)
    assert "rank 5 has not issued all_gather (collective 6 of group ucc:2 (tp))" in f.message
    assert "issued" in f.message.split("that", 1)[1], f.message
    assert all(g.culprit_ranks != (4,) for g in d.findings), "a rank ahead is never the culprit"


def test_issue_only_ranks_ahead_that_issued_more_ops_point_at_the_first_op_of_the_gap():
    d = analyze(list(traces(_tp_dp_job(stuck=5, ahead=3)).values()))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.collective_seq_id) == ("missing_rank", (5,), 6), f.message


def test_issue_only_a_clock_makes_the_gap_certain_live():
    dumps = _tp_dp_job(stuck=5)
    seen = T0 + 60 * 10**9  # every rank polled a minute after the gap opened
    tr = list(traces(dumps, seen_at_ns=seen).values())
    d = analyze(tr, options=Options(stall_after_s=5, clock=True))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.certain) == ("missing_rank", (5,), True), f.message
    statuses = statuses_of(d, tr, 5 * 10**9)
    assert statuses[5] == STALLED and {statuses[r] for r in (4, 6, 7)} == {BLOCKED}, statuses


@pytest.mark.parametrize("push", [False, True])
def test_every_member_at_the_same_newest_op_is_healthy(push):
    """Issue-only: nothing says whether the last op finished, and nobody lacks it: healthy (a job between
    collectives looks the same). With completion pushed, the last op completed."""
    dumps = _tp_dp_job(stuck=None, at=9, push=push)
    tr = list(traces(dumps, seen_at_ns=T0 + 60 * 10**9).values())
    for options in (Options(), Options(stall_after_s=5, clock=True)):
        d = analyze(tr, options=options)
        assert d.findings == [], [f.message for f in d.findings]
        assert set(statuses_of(d, tr, 5 * 10**9).values()) == {OK}


def test_issue_only_a_rank_behind_is_stalled_not_desynced_live():
    """Ranks that went past an op only known issued never 'completed' it: the rank behind is not read
    as passed by its peers (desynced), it is the stalled one."""
    dumps = {r: dump([hook_entry(i, i + 1, push=False, backend="custom", created=T0 + i * STEP_NS + r)
                      for i in range(5 if r == 2 else 7)], world=4) for r in range(4)}
    tr = list(traces(dumps, seen_at_ns=T0 + 60 * 10**9).values())
    d = analyze(tr, options=Options(stall_after_s=5, clock=True))
    statuses = statuses_of(d, tr, 5 * 10**9)
    assert statuses == {0: BLOCKED, 1: BLOCKED, 2: STALLED, 3: BLOCKED}, [f.message for f in d.findings]
    assert (d.findings[0].kind, d.findings[0].culprit_ranks, d.findings[0].collective_seq_id) == \
        ("missing_rank", (2,), 6)


def test_push_a_hung_op_stays_unretired_and_is_never_not_launched():
    """nccl2: the op every member issued and nobody finished is not completed (below PyTorch), with no
    member called 'never launched' for want of a start the hook never records."""
    d = analyze(list(traces(_tp_dp_job(stuck=None, at=6, push=True, backend="nccl2")).values()))
    kinds = {(f.kind, f.culprit_ranks) for f in d.findings}
    assert kinds == {("not_completed", ())}, [f.message for f in d.findings]


def test_push_a_sequence_gap_names_the_rank_behind():
    d = analyze(list(traces(_tp_dp_job(stuck=5, push=True, backend="nccl2")).values()))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name, f.collective_seq_id) == ("missing_rank", (5,), "nccl2:2", 6)


def test_nccl2_retiring_at_issue_in_a_mixed_group_is_never_a_timeout():
    """A group whose default backend pushes no completion makes the hook retire its nccl2 ops at issue
    (FlightRecorderHook.hpp, push_completion_): issued, not timed out."""
    dumps = {r: dump([hook_entry(i, i + 1, push=False, backend="nccl2") for i in range(5)], world=4)
             for r in range(4)}
    assert analyze(list(traces(dumps).values())).findings == []


def test_a_size_mismatch_on_a_hooked_backend():
    dumps = {r: dump([hook_entry(i, i + 1, push=False, backend="custom", op="broadcast",
                                 sizes=((32,),) if (r == 3 and i == 2) else ((16,),)) for i in range(5)], world=4)
             for r in range(4)}
    f = analyze(list(traces(dumps).values())).findings[0]
    assert (f.kind, f.culprit_ranks, f.collective_seq_id) == ("size_mismatch", (3,), 3)


def test_gloo_beside_a_hooked_backend_each_group_by_its_own_rule():
    """A rank of two recorders: the wait in gloo's group is read as on gloo, the hooked group's ops
    that everyone issued say nothing."""
    out = {}
    for r in range(4):
        es = [hook_entry(i, i + 1, push=False, backend="custom") for i in range(4)]
        es += [entry(10 + i, i + 1, backend="gloo", pg=("1", "cpu"), pg_id=1, state="scheduled",
                     retired=not (i == 3), duration_ms=None) for i in range(4 if r != 2 else 3)]
        out[r] = dump(es, world=4, groups={"1": ("cpu", [0, 1, 2, 3])})
    f = analyze(list(traces(out).values())).findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name, f.collective_seq_id) == ("missing_rank", (2,), "1", 4)


def _two_recorders(root, stuck_in_gloo: bool) -> None:
    """4 ranks, each with gloo's recorder (group 1, in `root`) and a hooked backend's (group 0, in
    root/recorder-custom/, as `frexport snapshot` writes them). Each step: a hooked all_reduce, then a
    gloo one. Rank 2 stops before step 4's hooked op, or (`stuck_in_gloo`) waits in step 4's gloo op that
    its peers never issue, because they issued the hooked op of step 5 first: a wait across backends."""
    gloo, hooked = {}, {}
    for r in range(4):
        hs, gs = [], []
        for step in range(1, 6):
            t = T0 + step * STEP_NS + r * 1000
            in_hooked = step < 4 or (r != 2 and (step == 4 or stuck_in_gloo))
            if stuck_in_gloo and r == 2 and step == 4:
                in_hooked = True
            if stuck_in_gloo and r == 2 and step == 5:
                in_hooked = False
            if in_hooked:
                hs.append(hook_entry(len(hs), step, push=False, backend="custom", created=t))
            in_gloo = step < 4 or (stuck_in_gloo and r == 2 and step == 4)
            if in_gloo:
                gs.append(entry(len(gs), step, backend="gloo", pg=("1", "cpu"), pg_id=1, state="scheduled",
                                retired=step < 4, duration_ms=None, created=t + 500))
        hooked[r] = dump(hs, world=4)
        gloo[r] = dump(gs, groups={"1": ("cpu", [0, 1, 2, 3])})
    write(root, gloo, prefix="trace_")
    write(root / "recorder-custom", hooked, prefix="trace_")


def _analyze_paths(paths):
    import argparse

    from frexport.cli.analyze_jobs import load_jobs
    args = argparse.Namespace(prefix=None, workers=1, max_file_bytes=None, follow_symlinks=False)
    return load_jobs([str(p) for p in paths], args, Limits(require_memory_limit=False))


def test_a_snapshot_directory_of_two_recorders_is_one_job_and_names_the_culprit(tmp_path):
    _two_recorders(tmp_path, stuck_in_gloo=False)
    jobs = _analyze_paths([tmp_path])
    assert len(jobs) == 1
    traces = jobs[0][2].traces
    assert sorted(t.rank for t in traces) == [0, 1, 2, 3]
    assert all(set(t.groups) == {"1", "custom:0"} for t in traces)
    f = analyze(traces).findings[0]
    assert (f.kind, f.culprit_ranks, f.pg_name, f.collective_seq_id) == ("missing_rank", (2,), "custom:0", 4)


def test_each_recorder_in_a_directory_of_its_own_is_one_job_not_two(tmp_path):
    _two_recorders(tmp_path / "snap", stuck_in_gloo=False)
    jobs = _analyze_paths([tmp_path / "snap" / "recorder-custom", tmp_path / "snap" / "trace_0",
                           tmp_path / "snap" / "trace_1", tmp_path / "snap" / "trace_2", tmp_path / "snap" / "trace_3"])
    assert len(jobs) == 1, [j[0] for j in jobs]
    f = analyze(jobs[0][2].traces).findings[0]
    assert (f.culprit_ranks, f.pg_name) == ((2,), "custom:0")


def test_a_wait_across_backends_is_found(tmp_path):
    """Rank 2 waits in gloo for peers that wait in the hooked group for it: a deadlock across backends,
    visible only with both recorders read as one rank."""
    _two_recorders(tmp_path, stuck_in_gloo=True)
    traces = _analyze_paths([tmp_path])[0][2].traces
    d = analyze(traces)
    assert d.findings and d.findings[0].root_cause, [f.message for f in d.findings]
    f = d.findings[0]
    assert f.kind == "desync" and 2 in f.culprit_ranks + f.blocked_ranks and "cycle" in f.reason, f.message
    alone = analyze(_analyze_paths([tmp_path / "recorder-custom"])[0][2].traces)
    assert [g.culprit_ranks for g in alone.findings] == [(2,)]  # one recorder alone sees half the story


def test_issue_only_every_rank_stuck_inside_one_collective_shows_only_in_the_stacks():
    """Every rank issued the same last op and blocks in it (a network hang): the recorder of a backend that
    reports no completion reads like a job between collectives. The ranks' stacks, inside the call, are
    the only evidence, and the verdict is not healthy (a suspect: one look cannot time it)."""
    from frexport.decode.stacks import parse_traceback

    dumps = {r: dump([hook_entry(i, i + 1, push=False, backend="custom") for i in range(5)], world=4)
             for r in range(4)}
    tr = list(traces(dumps).values())
    assert analyze(tr).findings == []
    text = ('Thread 0x1 (most recent call first):\n'
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2950 in '
            'all_reduce\n'
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
            '  File "/job/train.py", line 10 in step\n')
    d = analyze(tr, stacks={r: parse_traceback(text) for r in range(4)})
    assert d.verdict == "inconclusive" and d.findings[0].blocked_ranks == (0, 1, 2, 3), \
        [f.message for f in d.findings]
    assert "all_reduce" in d.findings[0].message


def test_issue_only_two_looks_in_which_no_member_moved_make_the_gap_certain():
    """Post-mortem the gap is a suspect; two looks the stall threshold apart in which no member of the
    group issued anything prove the hang (a rank still computing would have issued the op)."""
    from frexport.analysis.looks import HUNG, decide, progress

    tr = list(traces(_tp_dp_job(stuck=5)).values())
    d = analyze(tr)
    assert d.verdict == "inconclusive" and d.findings[0].culprit_ranks == (5,)
    groups = progress(tr, tr)  # the second look: nothing moved
    assert {g.pg_name: g.state for g in groups}["ucc:2"] == HUNG
    out = decide(d, groups, 6.0, 5.0)
    assert out.findings[0].certain and out.verdict == "unhealthy", out.findings[0].message
