"""Stragglers: ranks that consistently reach collectives after their peers.

For each recent collective that every member of a group recorded, a rank's
lateness is how much later than the median of the others it arrived. With NCCL
timing, arrival is read from durations: a collective ends at about the same
moment everywhere, so the late rank is the one that waited least (lateness =
others' median duration - its duration), which needs no clock agreement between
hosts. Otherwise (gloo) it is the enqueue time, time_created_ns. A rank that is
the last to arrive in most collectives, by a margin, holds the group back.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from itertools import islice, pairwise, repeat
from operator import lt
from statistics import median
from types import ModuleType
from typing import NamedTuple

from frexport.analysis.membership import Group
from frexport.model.rank_trace import FINISHED, GroupTrace

RECENT = 32  # collectives per group to judge from: stragglers matter now, and it bounds the cost
CELLS = 4_000  # rows x members per group, so a 4096-rank default group costs as much as a small one


@dataclass(frozen=True)
class Straggler:
    rank: int
    group: Group
    median_lateness_ns: int
    late_fraction: float
    samples: int
    first_seq: int
    by_duration: bool


class Owed(NamedTuple):
    """What each member of one group inherited (inherited_waits), seq by seq over the group's recent window:
    member i's at seq s is waits[i * width + s - base], 0 outside the window. Flat, as the C loops read it (a
    dict per group and member was ~1.4 million entries a pass in a 16384-rank job view)."""

    base: int
    width: int
    waits: Sequence[int]

    def at(self, i: int, seq: int) -> int:
        j = seq - self.base
        return self.waits[i * self.width + j] if 0 <= j < self.width else 0


def inherited_waits(groups: list[tuple[Group, dict[int, GroupTrace]]]) -> dict[str, Owed]:
    """group key -> what each member waited, in the collective it issued just before each of the group's
    recent ones (in any group), for its last member to arrive. A rank that waits for a late peer reaches
    its next collective late by as much: lateness it inherits, not its own (a tp peer of a
    data-starved rank is late to its own dp collectives). The wait is read from durations where every
    member has one (NCCL timing: its duration beyond the shortest member's, the last to arrive), else
    from enqueue times (from its issue to its last member's); over the recent collectives of every
    group whose members all recorded them, in each rank's order of issue."""
    keys = sorted({group.key for group, _ in groups})
    order = {k: i for i, k in enumerate(keys)}  # (the events sort by it as by the key itself)
    shapes: list[tuple[int, int, int]] = [(0, 0, 0)] * len(keys)  # per key: (base, width, members)
    chunks: dict[int, list[_Chunk]] = {}  # rank -> its recent collectives, group by group
    for group, cols in groups:
        present = _present(group.members, cols)
        if present is None:
            continue
        members, (columns, _, hi) = group.members, present
        # one more than the window judged: the collective before the first one judged counts too
        recent = max(2 * 5, min(RECENT, CELLS // len(members)))
        key = order[group.key]
        shapes[key] = (hi - recent, recent + 1, len(members))
        chunked = None if _compiled is None else _compiled.chunks_of(columns, recent, FINISHED, GroupTrace)
        if chunked is not None:  # (None: seqs that repeat or go back, or a value past 64 bits: below)
            for i, (r, (seqs, created, waited)) in enumerate(zip(members, chunked)):
                chunks.setdefault(r, []).append((key, i, seqs, created, waited))
            continue
        lo = hi - recent
        windows = [_window(cols[r], lo, hi) for r in members]
        in_step = _waits_in_step(windows)
        if in_step is not None:  # every collective of the window counts
            for i, (r, (seqs, created, _, _), waited) in enumerate(zip(members, windows, in_step)):
                chunks.setdefault(r, []).append((key, i, seqs, created, waited))
            continue
        for i, (r, (seqs, created, finished, _), by_seq) in enumerate(zip(members, windows, _waits(windows))):
            kept = [(s, c, by_seq.get(s, 0)) for s, c, f in zip(seqs, created, finished) if c and f]
            chunks.setdefault(r, []).append((key, i, [s for s, _, _ in kept], [c for _, c, _ in kept],
                                             [w for _, _, w in kept]))
    waits = None if _compiled is None else _compiled.timeline(chunks, shapes)
    if waits is None:  # (None: a value past 64 bits, which Python's ints take)
        waits = _timeline(chunks, shapes)
    return {k: Owed(base, width, w) for k, (base, width, m), w in zip(keys, shapes, waits) if m}


_Chunk = tuple[int, int, Sequence[int], Sequence[int], Sequence[int]]  # key's and member's index, seqs, issued, waited


def _timeline(chunks: dict[int, list[_Chunk]], shapes: list[tuple[int, int, int]]) -> list[list[int]]:
    """Each rank's collectives sorted by issue (then key, seq): a wait is inherited by the next one. Per key,
    its members' owed waits as Owed lays them out (a seq outside the window is never asked for)."""
    out = [[0] * (width * m) for _, width, m in shapes]
    for rank_chunks in chunks.values():
        events = [e for key, i, seqs, created, waited in rank_chunks
                  for e in zip(created, repeat(key), seqs, waited, repeat(i))]
        events.sort()
        for (_, _, _, w, _), (_, k1, s1, _, i1) in pairwise(events):
            base, width, _ = shapes[k1]
            if w and 0 <= s1 - base < width:
                out[k1][i1 * width + s1 - base] = w
    return out


_Window = tuple[Sequence[int], Sequence[int], bytes, Sequence[int]]  # seqs, issued, finished (0/1), durations in us


def _window(g: GroupTrace, lo: int, hi: int) -> _Window:
    """A rank's columns over the seqs lo..hi (a group's seqs are sorted)."""
    cut = slice(bisect_left(g.seq, lo), bisect_right(g.seq, hi))
    return g.seq[cut], g.created_ns[cut], g.flags[cut].tobytes().translate(_FINISHED_BYTE), g.duration_us[cut]


def _waits_in_step(windows: list[_Window]) -> list[Sequence[int]] | None:
    """Each member's waits, seq by seq, where every member holds the same seqs, each once, finished
    and with its enqueue time (the usual case): the members' columns side by side; else None."""
    seqs = windows[0][0]
    if not all(map(lt, seqs, islice(seqs, 1, None))) or any(
            w[0] != seqs or 0 in w[1] or 0 in w[2] for w in windows):
        return None
    if not seqs:
        return [() for _ in windows]
    if _compiled is not None:
        waits = _compiled.waits_in_step([w[1] for w in windows], [w[3] for w in windows])
        if waits is not None:
            return waits
    return list(zip(*map(_waits_at, zip(*(w[1] for w in windows)), zip(*(w[3] for w in windows)))))


def _waits(windows: list[_Window]) -> list[dict[int, int]]:
    """Each member's waits by seq, at the seqs all of them finished with an enqueue time (any layout)."""
    issued: dict[int, list[tuple[int, int, int]]] = {}  # seq -> (member, issued, duration in us)
    for m, (seqs, created, finished, durations) in enumerate(windows):
        for seq, c, f, d in zip(seqs, created, finished, durations):
            if c and f:
                issued.setdefault(seq, []).append((m, c, d))
    out: list[dict[int, int]] = [{} for _ in windows]
    for seq, rows in issued.items():
        if len(rows) < len(windows):
            continue
        ms, created, durations = zip(*rows)
        for m, w in zip(ms, _waits_at(created, durations)):
            out[m][seq] = w
    return out


def _present(members: Sequence[int], cols: dict[int, GroupTrace]) -> tuple[list[GroupTrace], int, int] | None:
    """Each member's columns, in the members' order, and the highest first and lowest last seq among them;
    None where a member has none or no rows (a group is judged only where every member recorded it). In one
    C loop where it is built: a job-level view asks it of every group twice a pass (~65000 members at
    16384 ranks, each read in three Python loops before)."""
    if _compiled is not None:
        out = _compiled.present(members, cols, GroupTrace)
        if out is not NotImplemented:
            return out
    if len(members) < 2 or not all(r in cols and len(cols[r].seq) for r in members):
        return None
    columns = [cols[r] for r in members]
    return columns, max(g.first_seq for g in columns), min(g.last_seq for g in columns)


def _waits_at(issued: Sequence[int], durations: Sequence[int]) -> list[int]:
    """How long each member waited in one collective for its last member: its duration beyond the
    shortest where every member has one, else from its issue to the last member's."""
    shortest = min(durations)
    if shortest >= 0:
        return [(d - shortest) * 1000 for d in durations]
    last = max(issued)
    return [last - c for c in issued]


def find_stragglers(group: Group, cols: dict[int, GroupTrace], min_lateness_ns: int,
                    min_samples: int = 5, min_late_fraction: float = 0.6,
                    inherited: Owed | None = None) -> list[Straggler]:
    """`inherited`: what each member inherited at each seq (`inherited_waits`), taken off its arrival."""
    present = _present(group.members, cols)
    if present is None:
        return []
    columns, lo, hi = present
    members = list(group.members)
    if lo > hi:
        return []
    recent = max(2 * min_samples, min(RECENT, CELLS // len(members)))
    first = max(lo, hi - recent + 1)
    n = hi - first + 1
    # a seq is a sample where every member finished it and has its enqueue time
    counted = None if _compiled is None else \
        _compiled.counts_of(columns, first, n, inherited, members, FINISHED, GroupTrace)
    sampled = None
    if counted is None:  # (seqs not contiguous, or a value past 64 bits: the members' columns as slices)
        sampled = _sampled(cols, members, first, n)
        counted = _counted(*sampled, first, members, inherited)
    n_samples, by_duration, counts = counted
    if n_samples < min_samples:
        return []
    last_count = {r: 0 for r in members}
    for r, count in zip(members, counts):
        last_count[r] += count
    k = len(members) - 1  # the others of a member: its lateness is against their median
    half = k // 2
    # only a member the last to arrive often enough can be one: the lateness of the others is not needed (in
    # most groups there is none, and judging ~1600 groups' lateness was most of a job-level view's stragglers)
    late = [i for i, r in enumerate(members) if last_count[r] / n_samples >= min_late_fraction]
    if not late:
        return []
    created, durations, samples = sampled or _sampled(cols, members, first, n)
    arrivals = _arrivals(created, durations, samples, first, by_duration, inherited)
    rows: list[list[float]] = []  # per sample, each late member's lateness
    for arrival in arrivals:
        # the median of the others: the sorted arrivals without one `a`, which is above o[i] exactly
        # when removing it leaves o[i] in place
        o = sorted(arrival)
        mine = [arrival[i] for i in late]
        if k % 2:
            o_h, o_h1 = o[half], o[half + 1]
            rows.append([a - (o_h if a > o_h else o_h1) for a in mine])
        else:
            o_h0, o_h = o[half - 1], o[half]
            above, between, below = (o_h0 + o_h) / 2, (o_h0 + o[half + 1]) / 2, (o_h + o[half + 1]) / 2
            rows.append([a - (above if a > o_h else between if a > o_h0 else below) for a in mine])
    out = []
    for i, lateness in zip(late, zip(*rows)):
        median_late = median(lateness)
        if median_late >= min_lateness_ns:
            first_late = next(j for j, x in zip(samples, lateness) if x >= min_lateness_ns)  # (its median is)
            r = members[i]
            out.append(Straggler(r, group, int(median_late), last_count[r] / n_samples, n_samples,
                                 first + first_late, by_duration))
    return out


def _sampled(cols: dict[int, GroupTrace], members: list[int], first: int,
             n: int) -> tuple[list[Sequence[int]], list[Sequence[int]], list[int]]:
    """Each member's enqueue times and durations over seqs first..first+n-1, and the samples among them."""
    created, durations = [], []
    every = int.from_bytes(b"\x01" * n, "little")  # byte j: seq first + j usable on every member so far
    for r in members:
        usable, c, d = _columns(cols[r], first, n)
        every &= int.from_bytes(usable, "little")
        created.append(c)
        durations.append(d)
    return created, durations, [j for j, ok in enumerate(every.to_bytes(n, "little")) if ok]


def _counted(created: list[Sequence[int]], durations: list[Sequence[int]], samples: list[int], first: int,
             members: list[int], owed: Owed | None) -> tuple[int, bool, list[int]]:
    """(samples, by duration, how often each member arrived last)."""
    if _compiled is not None and samples:
        usable = bytearray(len(created[0]))
        for j in samples:
            usable[j] = 1
        counted = _compiled.last_counts(created, durations, bytes(usable), owed, first, members)
        if counted is not None:  # (None: a value past 64 bits, which Python's ints take)
            return len(samples), counted[0], counted[1]
    by_duration = all(d[j] >= 0 for d in durations for j in samples)
    counts = [0] * len(members)
    for arrival in _arrivals(created, durations, samples, first, by_duration, owed):
        latest = max(arrival)
        counts[min(range(len(members)), key=lambda i: (arrival[i] != latest, members[i]))] += 1
    return len(samples), by_duration, counts


def _arrivals(created: list[Sequence[int]], durations: list[Sequence[int]], samples: list[int], first: int,
              by_duration: bool, owed: Owed | None) -> list[list[int]]:
    """Per sample, each member's arrival on a common axis (later is larger), less what it owes."""
    arrivals = []
    for j in samples:
        arrival = [-d[j] * 1000 for d in durations] if by_duration else [c[j] for c in created]
        if owed:
            arrival = [a - owed.at(i, first + j) for i, a in enumerate(arrival)]
        arrivals.append(arrival)
    return arrivals


_FINISHED_BYTE = bytes(1 if v & FINISHED else 0 for v in range(256))


def _columns(g: GroupTrace, first: int, n: int) -> tuple[bytes | bytearray, Sequence[int], Sequence[int]]:
    """(usable, enqueue times, durations) of seqs first..first+n-1 in one rank's group columns; usable:
    one byte per seq, 1 where the rank finished it and recorded when it was enqueued."""
    i0 = first - g.seq[0]
    usable: bytes | bytearray
    created: Sequence[int]
    durations: Sequence[int]
    if g.contiguous():  # the common case: slices (first and the last seq lie within the columns)
        cut = slice(i0, i0 + n)
        usable, created, durations = g.flags[cut].tobytes().translate(_FINISHED_BYTE), g.created_ns[cut], \
            g.duration_us[cut]
    else:
        usable, created, durations = bytearray(n), [0] * n, [0] * n
        for j in range(n):
            i = g.position(first + j)
            if i is not None:
                usable[j] = 1 if g.flags[i] & FINISHED else 0
                created[j], durations[j] = g.created_ns[i], g.duration_us[i]
        usable = bytes(usable)
    if 0 in created:  # no enqueue time: not a sample
        usable = bytes(u if c else 0 for u, c in zip(usable, created))
    return usable, created, durations


def _load_compiled() -> ModuleType | None:
    try:
        return import_module("frexport.analysis._straggler")
    except ImportError:  # installed without a compiler: the loops above in Python
        return None


# analysis/_straggler.c: the loops over every recent collective and member of every group (a job-level
# view judges ~1600 groups a pass; in Python they were a third of its analysis at 4096 ranks)
_compiled = _load_compiled()
