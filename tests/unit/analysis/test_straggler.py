"""Stragglers: a rank that is consistently the last to arrive, by at least the threshold, is named."""

import random
from bisect import bisect_left
from contextlib import AbstractContextManager
from statistics import median

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frexport.analysis import straggler
from frexport.analysis.membership import Group, build_membership
from frexport.analysis.straggler import CELLS, RECENT, Owed, Straggler, find_stragglers, inherited_waits
from frexport.model.dump import group_name
from frexport.model.rank_trace import FINISHED, GroupTrace
from tests.support.compiled import compiled_or_pure
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


def _stragglers(dumps, backend="gloo", **kw):
    """`backend`: the one `_job` recorded with ("nccl" when it was given durations)."""
    by_rank = traces(dumps)
    name = group_name("0", backend)
    group = build_membership(by_rank).groups[name]
    cols = {r: t.groups[name] for r, t in by_rank.items() if name in t.groups}  # as the engine passes them
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
    [s] = _stragglers(_job(lambda i, r: 0, durations=lambda r: 10.0 if r == 1 else 100.0), backend="nccl")
    assert (s.rank, s.by_duration, s.median_lateness_ns) == (1, True, 90 * MS)


def test_too_few_collectives_or_a_member_without_records_judge_nobody():
    assert _stragglers(_job(lambda i, r: 80 if r == 3 else 0, steps=4)) == []
    dumps = _job(lambda i, r: 80 if r == 3 else 0)
    dumps[1]["entries"] = []  # rank 1 recorded nothing in the group: arrival order cannot be told
    assert _stragglers(dumps) == []


def judged_by(compiled: bool) -> AbstractContextManager[None]:
    """The stragglers' loops in C (analysis/_straggler.c, as built by the dev setup) or in Python alone
    (an install without a compiler): the property tests below hold both to the references."""
    return compiled_or_pure(straggler, "_compiled", compiled)


# The straightforward version the sliced one replaced: the same verdicts, row by row.
def _reference(group: Group, cols: dict[int, GroupTrace], min_lateness_ns: int,
                    min_samples: int = 5, min_late_fraction: float = 0.6,
                    inherited: dict[int, dict[int, int]] | None = None) -> list[Straggler]:
    members = [r for r in group.members if r in cols and len(cols[r].seq)]
    if len(members) < 2 or len(members) < len(group.members):
        return []
    lo = max(cols[r].first_seq for r in members)
    hi = min(cols[r].last_seq for r in members)
    if lo > hi:
        return []
    rows: list[tuple[int, dict[int, tuple[int, int]]]] = []
    recent = max(2 * min_samples, min(RECENT, CELLS // len(members)))
    cols_of = [cols[r] for r in members]
    for s in range(max(lo, hi - recent + 1), hi + 1):
        row = {}
        for r, g in zip(members, cols_of):
            i = s - g.seq[0]
            if not (0 <= i < len(g.seq) and g.seq[i] == s):
                i = g.position(s)
            if i is None or not g.flags[i] & FINISHED or not g.created_ns[i]:
                break
            row[r] = (g.created_ns[i], g.duration_us[i])
        else:
            rows.append((s, row))
    if len(rows) < min_samples:
        return []
    by_duration = all(v[1] >= 0 for _, row in rows for v in row.values())
    lateness: dict[int, list[int]] = {r: [] for r in members}
    last_count = {r: 0 for r in members}
    first_late: dict[int, int] = {}
    for s, row in rows:
        # arrival on a common axis: later is larger
        arrival = {r: (-row[r][1] * 1000 if by_duration else row[r][0]) - (inherited or {}).get(r, {}).get(s, 0)
                   for r in members}
        last_count[max(members, key=lambda r: (arrival[r], -r))] += 1
        ordered = sorted(arrival.values())
        for r in members:
            late = arrival[r] - _median_without(ordered, arrival[r])
            lateness[r].append(late)
            if late >= min_lateness_ns:
                first_late.setdefault(r, s)
    out = []
    for r in members:
        late = median(lateness[r])
        fraction = last_count[r] / len(rows)
        if late >= min_lateness_ns and fraction >= min_late_fraction:
            out.append(Straggler(r, group, int(late), fraction, len(rows), first_late.get(r, rows[0][0]), by_duration))
    return out


def _median_without(ordered: list[int], value: int) -> float:
    """Median of `ordered` (sorted) with one occurrence of `value` removed, in O(log n)."""
    p = bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(i: int) -> int:
        return ordered[i] if i < p else ordered[i + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


@pytest.mark.parametrize("compiled", [True, False])
@given(st.integers(0, 2**32), st.integers(2, 9), st.integers(3, 40), st.booleans(), st.booleans())
def test_the_sliced_columns_judge_as_the_row_by_row_reference(compiled, seed, world, steps, timed, gaps):
    rng = random.Random(seed)
    late_rank = rng.randrange(world)

    def late(i, r):  # whole milliseconds: ties in arrival happen
        return rng.choice([0, 30, 60, 120]) if r == late_rank and rng.random() < 0.8 else rng.randrange(40)

    dumps = _job(late, world, steps, (lambda r: rng.choice([5.0, 50.0, 120.0])) if timed else None)
    if gaps:  # an unfinished collective, a missing enqueue time, a rank whose columns skip a seq
        d = dumps[rng.randrange(world)]
        es = list(d["entries"])
        j = rng.randrange(len(es))
        es[j] = {**es[j], "state": "scheduled", "retired": False} if rng.random() < 0.5 else \
            {**es[j], "time_created_ns": 0}
        if rng.random() < 0.3 and len(es) > 3:
            del es[rng.randrange(1, len(es) - 1)]
        d["entries"] = es
    by_rank = traces(dumps)
    name = group_name("0", "nccl" if timed else "gloo")
    group = build_membership(by_rank).groups[name]
    cols = {r: t.groups[name] for r, t in by_rank.items() if name in t.groups}
    # lateness inherited from a wait just before: some ranks, at some seqs (lateness.py takes it off)
    inherited = {r: {s: rng.choice([1, 20 * MS, 90 * MS]) for s in range(steps + 2) if rng.random() < 0.5}
                 for r in range(world) if rng.random() < 0.5}
    owed = _owed(group.members, inherited, steps + 2)
    for threshold, fraction in ((-10**18, 0.0), (0, 0.0), (10 * MS, 0.6), (THRESHOLD_NS, 0.6)):  # (every median shown)
        for laid_out, written in ((None, None), (owed, inherited)):
            with judged_by(compiled):
                found = find_stragglers(group, cols, threshold, min_late_fraction=fraction, inherited=laid_out)
            assert found == _reference(group, cols, threshold, min_late_fraction=fraction, inherited=written)


def _owed(members, by_rank: dict[int, dict[int, int]], width: int, base: int = 0) -> Owed:
    """rank -> seq -> wait, laid out as inherited_waits lays it out (seqs base..base+width-1)."""
    return Owed(base, width, [by_rank.get(r, {}).get(base + j, 0) for r in members for j in range(width)])


def _written(inherited: dict[str, Owed], groups) -> dict:
    """inherited_waits' answer as the references write it: key -> rank -> seq -> wait, where not 0."""
    out: dict = {}
    for group, _ in groups:
        o = inherited.get(group.key)
        for i, r in enumerate(group.members if o else ()):
            row = {o.base + j: w for j, w in enumerate(o.waits[i * o.width:(i + 1) * o.width]) if w}
            if row:
                out.setdefault(group.key, {})[r] = row
    return out


# The straightforward version of inherited_waits: cell by cell, what each rank waited at each seq, then
# each rank's collectives in order of issue.
def _inherited_reference(groups: list[tuple[Group, dict[int, GroupTrace]]]) -> dict:
    waited: dict[tuple[str, int, int], int] = {}
    timeline: dict[int, list[tuple[int, str, int]]] = {}
    for group, cols in groups:
        members = [r for r in group.members if r in cols and len(cols[r].seq)]
        if len(members) < 2 or len(members) < len(group.members):
            continue
        hi = min(cols[r].last_seq for r in members)
        lo = hi - max(10, min(RECENT, CELLS // len(members)))
        issued: dict[int, list[tuple[int, int, int]]] = {}
        for r in members:
            g = cols[r]
            for seq, created, flags, duration in zip(g.seq, g.created_ns, g.flags, g.duration_us):
                if lo <= seq <= hi and created and flags & FINISHED:
                    issued.setdefault(seq, []).append((r, created, duration))
                    timeline.setdefault(r, []).append((created, group.key, seq))
        for seq, rows in issued.items():
            if len(rows) < len(members):
                continue
            if all(d >= 0 for _, _, d in rows):
                waits = {r: (d - min(x[2] for x in rows)) * 1000 for r, _, d in rows}
            else:
                waits = {r: max(x[1] for x in rows) - t for r, t, _ in rows}
            waited.update({(group.key, seq, r): w for r, w in waits.items() if w > 0})
    out: dict = {}
    for r, events in timeline.items():
        events.sort()
        for (_, k0, s0), (_, k1, s1) in zip(events, events[1:]):
            if waited.get((k0, s0, r), 0):
                out.setdefault(k1, {}).setdefault(r, {})[s1] = waited[(k0, s0, r)]
    return out


@pytest.mark.parametrize("compiled", [True, False])
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(2, 12), st.sampled_from(["none", "some", "all"]),
       st.floats(0, 0.3))
def test_inherited_waits_as_the_cell_by_cell_reference(compiled, seed, n, steps, timed, odd):
    """An n x n tp x dp grid whose ranks' columns start at different seqs; `odd`: the share of cells
    made unusual (unfinished, no enqueue time, no duration, a seq skipped or repeated), so that both the
    members-in-step and the general reading are taken."""
    rng = random.Random(seed)
    world = max(2, n * n)
    groups = [(Group(f"tp{i}", f"tp{i}", "tp", tuple(range(i * n, i * n + n))), {}) for i in range(n)] + \
             [(Group(f"dp{j}", f"dp{j}", "dp", tuple(range(j, world, n))), {}) for j in range(n)]
    groups = [g for g in groups if len(g[0].members) >= 2] or [(Group("w", "w", "", tuple(range(world))), {})]
    for group, cols in groups:
        for r in group.members:
            start = rng.choice([0, 0, 0, rng.randrange(steps)])
            g = cols[r] = GroupTrace(group.name, group.desc, 0)
            for s in range(start, steps):
                if rng.random() < odd / 3:
                    continue  # a seq this rank skipped
                for _ in range(2 if rng.random() < odd / 5 else 1):  # (once in a while, twice)
                    g.seq.append(s)
                    g.created_ns.append(0 if rng.random() < odd / 3 else T0 + s * STEP_NS + rng.randrange(4) * MS)
                    g.flags.append(0 if rng.random() < odd / 3 else FINISHED)
                    timed_here = timed == "all" or (timed == "some" and rng.random() < 0.5)
                    g.duration_us.append(rng.choice([50, 500, 5000]) if timed_here else -1)
        if rng.random() < 0.2:
            del cols[group.members[-1]]  # a member without its columns: the group is not judged
    with judged_by(compiled):
        assert _written(inherited_waits(groups), groups) == _inherited_reference(groups)


# Values at the columns' int64 bounds: a wait or an arrival past 64 bits (durations of ~300 years, enqueue
# times on both sides of the epoch, owed waits from such times), where Python's ints go on and C cannot.
EXTREME = [-(2**63), -(2**62), -1, 0, 1, 5, 2**40, 2**62, 2**63 - 1]


@pytest.mark.parametrize("compiled", [True, False])
@given(st.integers(0, 2**32), st.integers(2, 5), st.integers(5, 12), st.booleans())
def test_values_at_the_int64_bounds_judge_as_the_references(compiled, seed, world, steps, timed):
    rng = random.Random(seed)
    groups = [(Group("a", "a", "", tuple(range(world))), {}), (Group("b", "b", "", tuple(range(world))), {})]
    for group, cols in groups:
        for r in group.members:
            g = cols[r] = GroupTrace(group.name, group.desc, 0)
            for s in range(steps):
                g.seq.append(s)
                usual = T0 + s * STEP_NS + rng.randrange(9) * MS
                g.created_ns.append(rng.choice(EXTREME) if rng.random() < 0.3 else usual)
                done = rng.random() > 0.15  # (an op not finished yet has no duration: not a sample)
                g.flags.append(FINISHED if done else 0)
                g.duration_us.append((rng.choice(EXTREME[3:]) if rng.random() < 0.3 else rng.randrange(9000))
                                     if timed and done else -1)
    with judged_by(compiled):
        inherited = inherited_waits(groups)
        found = [find_stragglers(group, cols, threshold, min_late_fraction=0.0, inherited=inherited.get(group.key))
                 for group, cols in groups for threshold in (-10**30, 0, THRESHOLD_NS)]
    written = _written(inherited, groups)
    assert written == _inherited_reference(groups)
    assert found == [_reference(group, cols, threshold, min_late_fraction=0.0, inherited=written.get(group.key))
                     for group, cols in groups for threshold in (-10**30, 0, THRESHOLD_NS)]


class _Other(GroupTrace):
    """Another class than the columns': never read in C (its attributes could be Python code)."""


def _ragged(rng: random.Random, world: int, steps: int, gaps: bool, timed: bool) -> dict[int, GroupTrace]:
    """One group's columns, each member's from its own first seq to its own last (some ahead of the others),
    seqs in order; `gaps`: some members skip a seq, also below the seqs the others reached."""
    cols = {}
    for r in range(world):
        g = cols[r] = GroupTrace("g", "g", 0)
        for s in range(rng.randrange(3), steps + rng.randrange(4)):
            if gaps and g.seq and rng.random() < 0.1:  # (a member the engine judges has a seq at least)
                continue
            g.seq.append(s)
            g.created_ns.append(0 if rng.random() < 0.05 else T0 + s * STEP_NS + rng.randrange(4) * MS)
            g.flags.append(0 if rng.random() < 0.05 else FINISHED)
            g.duration_us.append(rng.choice([50, 500, 5000]) if timed and rng.random() < 0.95 else -1)
    return cols


@given(st.integers(0, 2**32), st.integers(2, 9), st.integers(8, 40), st.booleans(), st.booleans(), st.booleans())
def test_the_counts_read_in_place_are_the_sliced_ones(seed, world, steps, gaps, timed, owing):
    """_straggler.counts_of reads each member's columns where they lie: it answers exactly where every member's
    seqs are contiguous (a member that skipped one, even below the seqs judged, leaves it to the slices)."""
    rng = random.Random(seed)
    cols = _ragged(rng, world, steps, gaps, timed)
    members = list(range(world))
    lo, hi = max(cols[r].first_seq for r in members), min(cols[r].last_seq for r in members)
    first = max(lo, hi - RECENT + 1)
    n = hi - first + 1
    # (a window of waits that starts and ends anywhere: seqs judged outside it owe nothing)
    owed = _owed(members, {r: {s: rng.choice([1, 20 * MS]) for s in range(steps + 4) if rng.random() < 0.5}
                           for r in members}, rng.randrange(1, steps + 4), base=rng.randrange(steps)) if owing else None
    group = [cols[r] for r in members]
    compiled = straggler._compiled.counts_of(group, first, n, owed, members, FINISHED, GroupTrace)
    # seqs past a member's columns are never read, nor a GroupTrace of another class (None: the slices' path)
    assert straggler._compiled.counts_of(group, hi, n + 1, owed, members, FINISHED, GroupTrace) is None
    assert straggler._compiled.counts_of(group, first, n, owed, members, FINISHED, _Other) is None
    if not all(cols[r].contiguous() for r in members):
        assert compiled is None
        return
    with judged_by(False):
        sliced = straggler._counted(*straggler._sampled(cols, members, first, n), first, members, owed)
    assert compiled == sliced


@given(st.integers(0, 2**32), st.integers(2, 9), st.integers(3, 40), st.booleans(), st.booleans())
def test_a_group_is_chunked_in_c_cell_by_cell_as_the_reference(seed, world, steps, gaps, timed):
    """_straggler.chunks_of answers wherever each member's seqs are in order (the inherited waits' test above
    takes its Python path wherever it does not: a wrong answer there could hide behind that path)."""
    rng = random.Random(seed)
    cols = _ragged(rng, world, steps, gaps, timed)
    members = list(range(world))
    recent = max(10, min(RECENT, CELLS // world))
    got = straggler._compiled.chunks_of([cols[r] for r in members], recent, FINISHED, GroupTrace)
    assert got is not None
    assert straggler._compiled.chunks_of([cols[r] for r in members], recent, FINISHED, _Other) is None
    hi = min(cols[r].last_seq for r in members)
    cells = {r: [(s, c, d) for s, c, f, d in zip(g.seq, g.created_ns, g.flags, g.duration_us)
                 if hi - recent <= s <= hi and c and f & FINISHED] for r, g in cols.items()}
    by_seq: dict[int, list[tuple[int, int, int]]] = {}
    for r in members:
        for s, c, d in cells[r]:
            by_seq.setdefault(s, []).append((r, c, d))
    waits = {}
    for s, rows in by_seq.items():
        if len(rows) == world:
            timed_all = all(d >= 0 for _, _, d in rows)
            waits.update({(r, s): (d - min(x[2] for x in rows)) * 1000 if timed_all else max(x[1] for x in rows) - c
                          for r, c, d in rows})
    assert [tuple(map(list, chunk)) for chunk in got] == \
        [([s for s, _, _ in cells[r]], [c for _, c, _ in cells[r]], [waits.get((r, s), 0) for s, _, _ in cells[r]])
         for r in members]


def test_a_column_out_of_order_is_left_to_python():
    """A member whose seqs go back (a hostile peer's) can hold, inside the window bisection cuts, a seq far
    outside it: never an index in C (it was one, far past its buffers), the Python path reads it."""
    cols = {}
    for r in range(3):
        g = cols[r] = GroupTrace("g", "g", 0)
        for s in range(13):
            g.seq.append(10**15 if (r, s) == (0, 11) else s)  # (bisection's cut of 2..12 still holds it)
            g.created_ns.append(T0 + s * STEP_NS + r * MS)
            g.flags.append(FINISHED)
            g.duration_us.append(-1)
    members = [0, 1, 2]
    assert straggler._compiled.chunks_of([cols[r] for r in members], 10, FINISHED, GroupTrace) is None
    groups = [(Group("g", "g", "", tuple(members)), cols)]
    with judged_by(False):
        pure = inherited_waits(groups)
    assert {k: (*o[:2], list(o.waits)) for k, o in inherited_waits(groups).items()} == \
        {k: (*o[:2], list(o.waits)) for k, o in pure.items()}


@pytest.mark.parametrize("case", ["all", "one missing", "one empty", "one not a GroupTrace", "alone"])
def test_the_members_read_in_c_are_those_python_reads(case):
    """straggler._present, asked of every group twice a pass: each member's columns and the seqs every member
    holds, or nothing where a member recorded none (the group is not judged); compiled or not, the same."""
    cols = {}
    for r in range(4):
        kind = _Other if case == "one not a GroupTrace" and r == 2 else GroupTrace
        g = cols[r] = kind("g", "g", 0)
        g.seq.extend(range(r, 20 - r))
    if case == "one missing":
        del cols[1]
    if case == "one empty":
        del cols[3].seq[:]
    members = (0,) if case == "alone" else (0, 1, 2, 3)
    got = []
    for compiled in (True, False):
        with judged_by(compiled):
            got.append(straggler._present(members, cols))
    assert got[0] == got[1]
    assert (got[0] is None) == (case in ("one missing", "one empty", "alone"))
    if got[0] is not None:
        assert got[0][1:] == (3, 16) and [g.pg_name for g in got[0][0]] == ["g"] * 4
