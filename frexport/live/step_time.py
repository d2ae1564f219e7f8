"""The job's step time, which the stall threshold follows when `analysis.stall_after` is unset (the default).

A rank's period is the median gap between repeats of its most frequent op (pg_name, profiling_name,
input_sizes) among its newest 512 entries; the job's step time is the median of the ranks' periods.
Read afresh each pass, that was ~0.3 s of a job view's pass at 4096 ranks (a quarter of its analysis),
for snapshots that mostly hold the entries of the last one. So each rank's entries are followed: a
snapshot that holds the same window (a hung rank's) costs nothing; one that holds the last window's
tail plus new entries reads only the new ones, and counts the window's ops as small ints; any other
(a restart, a reordered dump) is read afresh. The periods are the ones a fresh reading gives
(tests/unit/live/test_step_time.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, eq, itemgetter, sub
from statistics import median

from frexport.model.dump import Entry, RankDump
from frexport.model.entry_runs import fields_at, runs
from frexport.model.rank_trace import leading_same

WINDOW = 512  # entries per rank the step time is estimated from


_OP = fields_at("pg_name", "profiling_name", "input_sizes")  # an op, as its repeats are told apart
_CREATED = attrgetter("time_created_ns")
MAX_OPS = 4096  # distinct ops a rank's table holds before it starts afresh (sizes that change all the time)


class _OpIds(dict):
    """op -> a small int, given the first time the op is seen: a window's ops are counted as ints, which
    hash for free, instead of as tuples of sizes hashed again every pass."""

    def __missing__(self, op: tuple) -> int:
        self[op] = n = len(self)
        return n


@dataclass
class _Followed:
    """One rank's window, its entries' ops (as ids) and enqueue times, and the period they give."""

    window: tuple[Entry, ...] = ()
    ids: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    op_ids: _OpIds = field(default_factory=_OpIds)
    period: float | None = None

    def move_to(self, window: tuple[Entry, ...]) -> None:
        kept = self._kept(window)
        if kept is not None and kept == len(self.window) == len(window):
            self.window = window  # the same entries (a hung rank's, in a new slice)
            return
        if kept is None or len(self.op_ids) > MAX_OPS:  # not the last window's continuation: read afresh
            kept, self.ids, self.created = 0, [], []
            if len(self.op_ids) > MAX_OPS:
                self.op_ids = _OpIds()
        left, added = len(self.window) - kept, window[kept:]
        # an op id per run of one op (entries come in runs, busy ranks' long ones)
        new_ids = chain.from_iterable(repeat(self.op_ids[op], n) for op, n in runs(added, _OP))
        self.ids = self.ids[left:] + list(new_ids)
        self.created = self.created[left:] + list(map(_CREATED, added))
        self.window = window
        self.period = _period(self.ids, self.created)

    def _kept(self, window: tuple[Entry, ...]) -> int | None:
        """How many entries the new window keeps from the end of the last one (as its own first ones, the
        same objects), None if it does not continue it."""
        old = self.window
        if not old or not window or window[0].record_id > old[-1].record_id:
            return None  # (a busy rank's window is all new at each pass: not looked for among the old)
        try:
            j = old.index(window[0])  # (by equality: the identity check below decides)
        except ValueError:
            return None
        kept = len(old) - j
        if kept > len(window) or leading_same(window, old, j) < kept:
            return None
        return kept


def _period(ids: list[int], created: list[int]) -> float | None:
    """The median gap between repeats of the most frequent op (the first to appear among equals: a
    Counter keeps the order in which its keys first appear)."""
    if not ids:
        return None
    counts = Counter(ids)
    top = max(counts.items(), key=itemgetter(1))[0]
    ts = created if len(counts) == 1 else list(compress(created, map(eq, ids, repeat(top))))
    gaps = sorted(map(sub, ts[1:], ts))  # (in C; the gaps that are not positive are cut off the front)
    gaps = gaps[bisect_right(gaps, 0):]
    return median(gaps) / 1e9 if gaps else None  # (its own sort of a sorted list is one pass)


class StepTime:
    """Each rank's period, followed from pass to pass; `step_s` gives the job's."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._ranks: dict[int, _Followed] = {}

    def step_s(self, dumps: dict[int, RankDump]) -> float | None:
        followed: dict[int, _Followed] = {}
        for rank, d in dumps.items():
            f = self._ranks.get(rank) or _Followed()
            window = d.entries[-self.window:]
            if window is not f.window:  # (a tuple's full slice is itself: a hung rank's window is the last one)
                f.move_to(window)
            followed[rank] = f
        self._ranks = followed  # a rank no snapshot holds now keeps no entries alive
        periods = [f.period for f in followed.values() if f.period is not None]
        return median(periods) if periods else None
