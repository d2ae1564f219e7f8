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

from bisect import bisect_left
from dataclasses import dataclass
from statistics import median

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


def find_stragglers(group: Group, cols: dict[int, GroupTrace], min_lateness_ns: int,
                    min_samples: int = 5, min_late_fraction: float = 0.6) -> list[Straggler]:
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
        arrival = {r: -row[r][1] * 1000 if by_duration else row[r][0] for r in members}
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
