"""The (rank, group) tails the analysis reads of every trace each pass, in model/_rows.c where it is built:
placement's passed_through and behind, and the live statuses' ranks their peers passed by, each held to its
Python loop on traces of every shape a recorder writes (ops completed, retired at issue, unfinished, groups
a rank never joined, seqs that skip, values near the int64 bounds)."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frexport.analysis.placement import behind, passed_through
from frexport.live.diagnosis import _passed_by_peers
from frexport.model import rank_trace
from frexport.model.rank_trace import FINISHED, ISSUED, TIMED_OUT, GroupTrace, RankTrace
from tests.support.compiled import compiled_or_pure

FLAGS = [0, FINISHED, FINISHED | ISSUED, ISSUED, TIMED_OUT, FINISHED | TIMED_OUT]
T0 = 1_700_000_000_000_000_000


def _traces(rng: random.Random, world: int, names: int, extreme: bool) -> list[RankTrace]:
    out = []
    for r in range(world):
        big = extreme and rng.random() < 0.3
        t = RankTrace(r, "x", "json", None, (), rng.choice([None, 0, T0 + rng.randrange(200) * 10**9]), 0, (), (),
                      None, rng.choice([None, 0, T0 + rng.randrange(200) * 10**9]))
        for k in rng.sample(range(names), rng.randrange(names + 1)):  # (in its own order: the dict's matters)
            g = t.groups[f"g{k}"] = GroupTrace(f"g{k}", "", k)
            seq = (2**63 - 13) if big else rng.randrange(-2, 5)
            for _ in range(rng.randrange(6)):
                g.seq.append(seq)
                g.flags.append(rng.choice(FLAGS))
                g.created_ns.append(rng.choice([-(2**63), 0]) if big and rng.random() < 0.3 else
                                    T0 + rng.randrange(100) * 10**9)  # (equal seqs, other times: ties show)
                seq += rng.choice([1, 1, 1, 2, -3 if not big else 1])  # (a seq that goes back: hostile input)
        out.append(t)
    return out


def _same(fn, *args):
    with compiled_or_pure(rank_trace, "_rows", True):
        compiled = fn(*args)
    with compiled_or_pure(rank_trace, "_rows", False):
        assert compiled == fn(*args)


@given(st.integers(0, 2**32), st.integers(1, 12), st.integers(1, 4), st.booleans(),
       st.sampled_from([0, 10**9, 10**12, 2**62, None]))
def test_the_tails_in_c_are_the_python_loops(seed, world, names, extreme, stall_ns):
    rng = random.Random(seed)
    traces = _traces(rng, world, names, extreme)
    if stall_ns is None:  # exactly how long after a completion a rank was seen: the threshold's edge
        stall_ns = rng.choice([t.seen_at_ns or 0 for t in traces]) - rng.choice(
            [c for t in traces for g in t.groups.values() for c in g.created_ns] or [0])
    by_rank = {t.rank: t for t in traces}
    _same(passed_through, by_rank)
    _same(behind, by_rank)
    _same(behind, by_rank, {f"g{k}": rng.randrange(-2, 8) for k in range(names) if rng.random() < 0.7})
    _same(_passed_by_peers, traces, stall_ns)
    if not extreme:  # the usual values: the C loops answer them (a wrong answer cannot hide behind Python's)
        assert rank_trace.compiled_passed_through(traces) is not NotImplemented
        assert rank_trace.compiled_behind(list(by_rank), traces, passed_through(by_rank)) is not NotImplemented
        assert rank_trace.compiled_passed_by_peers(traces, [t.seen_at_ns for t in traces], stall_ns) \
            is not NotImplemented


def test_a_trace_group_or_name_of_another_class_is_left_to_python():
    """Only an exact RankTrace, GroupTrace and str are read in C: a subclass's attributes could run Python code."""
    class Other(GroupTrace):
        pass

    t = _traces(random.Random(1), 2, 1, False)
    t[0].groups["g9"] = Other("g9", "", 9)
    t[0].groups["g9"].seq.append(1)
    t[0].groups["g9"].flags.append(FINISHED)
    t[0].groups["g9"].created_ns.append(T0)
    assert rank_trace.compiled_passed_through(t) is NotImplemented
    assert rank_trace.compiled_passed_by_peers(t, [None, None], 0) is NotImplemented

    class Name(str):  # (its hash and equality could be Python code)
        pass

    t = _traces(random.Random(1), 2, 1, False)
    t[1].groups[Name("g7")] = GroupTrace("g7", "", 7)
    assert rank_trace.compiled_passed_through(t) is NotImplemented
    assert rank_trace.compiled_behind([0, 1], t, {}) is NotImplemented
    assert rank_trace.compiled_passed_by_peers(t, [None, None], 0) is NotImplemented


@pytest.mark.parametrize("failed", [True, False])
def test_a_failed_op_is_not_a_completion_the_peers_passed(failed):
    """diagnosis._passed_by_peers with ops a member failed out of (hang.py): never the C loop's answer."""
    a = RankTrace(0, "x", "json", None, (), T0 + 100 * 10**9, 0, (), (), None, None)
    b = RankTrace(1, "x", "json", None, (), T0 + 100 * 10**9, 0, (), (), None, None)
    for t, seqs in ((a, [1, 2]), (b, [1])):
        g = t.groups["g"] = GroupTrace("g", "", 0)
        for s in seqs:
            g.seq.append(s)
            g.flags.append(FINISHED)
            g.created_ns.append(T0 + s * 10**9)
    # rank 1 is 98 s past rank 0's completion of seq 2, which it never issued: passed by, unless that op failed
    assert _passed_by_peers([a, b], 10**9, {("g", 0, 2)} if failed else frozenset()) == (set() if failed else {1})
