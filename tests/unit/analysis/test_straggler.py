"""Stragglers: a rank that is consistently the last to arrive, by at least the threshold, is named."""

from frexport.analysis.membership import build_membership
from frexport.analysis.straggler import find_stragglers
from tests.support.synth import STEP_NS, T0, dump, entry, traces

MS = 1_000_000
THRESHOLD_NS = 50 * MS


def _job(late_ms, world: int = 4, steps: int = 10, durations=None) -> dict:
    """late_ms(step, rank) -> how late the rank issues that step; durations(rank) -> NCCL duration (ms)."""
    out = {}
    for r in range(world):
        entries = []
        for i in range(steps):
            created = T0 + i * STEP_NS + int(late_ms(i, r) * MS)
            if durations is None:  # gloo: enqueue times only
                entries.append(entry(i, i + 1, created=created, backend="gloo", state="scheduled", retired=True))
            else:
                entries.append(entry(i, i + 1, created=created, duration_ms=durations(r)))
        out[r] = dump(entries, world=world)
    return out


def _stragglers(dumps, **kw):
    by_rank = traces(dumps)
    group = build_membership(by_rank).groups["0"]
    cols = {r: t.groups["0"] for r, t in by_rank.items() if "0" in t.groups}  # as the engine passes them
    return find_stragglers(group, cols, THRESHOLD_NS, **kw)


def test_a_rank_last_in_every_collective_by_more_than_the_threshold_is_named():
    [s] = _stragglers(_job(lambda i, r: 80 if r == 3 else r))
    assert (s.rank, s.late_fraction, s.samples, s.by_duration, s.first_seq) == (3, 1.0, 10, False, 1)
    assert 75 * MS <= s.median_lateness_ns <= 80 * MS


def test_last_in_60_percent_of_collectives_is_enough_and_in_40_percent_is_not():
    assert [s.rank for s in _stragglers(_job(lambda i, r: 80 if r == 2 and i < 6 else 0))] == [2]
    assert _stragglers(_job(lambda i, r: 80 if r == 2 and i < 4 else 0)) == []


def test_late_by_less_than_the_threshold_is_not_a_straggler():
    assert _stragglers(_job(lambda i, r: 30 if r == 3 else 0)) == []


def test_late_but_not_the_last_most_of_the_time_is_not_a_straggler():
    """Rank 3 is 100 ms behind the median everywhere, but rank 0 arrives later still in half the steps."""
    [s] = _stragglers(_job(lambda i, r: {3: 100, 0: 150 if i % 2 else 160}.get(r, 0)))
    assert s.rank == 0  # last in every step: rank 3 never is
    assert _stragglers(_job(lambda i, r: {3: 100, 0: 150 if i % 2 else 0}.get(r, 0))) == []


def test_with_nccl_durations_the_late_rank_is_the_one_that_waited_least():
    """Clocks of different hosts need not agree: a collective ends at about the same moment everywhere."""
    [s] = _stragglers(_job(lambda i, r: 0, durations=lambda r: 10.0 if r == 1 else 100.0))
    assert (s.rank, s.by_duration, s.median_lateness_ns) == (1, True, 90 * MS)


def test_too_few_collectives_or_a_member_without_records_judge_nobody():
    assert _stragglers(_job(lambda i, r: 80 if r == 3 else 0, steps=4)) == []
    dumps = _job(lambda i, r: 80 if r == 3 else 0)
    dumps[1]["entries"] = []  # rank 1 recorded nothing in the group: arrival order cannot be told
    assert _stragglers(dumps) == []
