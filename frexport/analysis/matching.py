"""Match one process group's collectives across ranks by collective_seq_id.

Ring buffers start at different points on different ranks, so each rank only
speaks for the seq ids it still holds; a seq that fell out of a rank's buffer is
never counted against it. Runs where every rank agrees are compared as whole
array slices (one C-level comparison per rank); only the seq ids where some rank
differs are looked at one by one.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType

from frexport.analysis.findings import DESYNC, DTYPE_MISMATCH, SIZE_MISMATCH
from frexport.model.rank_trace import GroupTrace
from frexport.model.signature import Signature, canonical

SigIds = Sequence[int]  # a rank's canonical signature ids in one group, entry by entry (bytes or an array)


@dataclass
class Disagreement:
    seq: int
    votes: dict[int, int]  # rank -> canonical signature id


@dataclass
class GroupMatch:
    matched: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)


def match_group(cols: dict[int, tuple[GroupTrace, SigIds]]) -> GroupMatch:
    if _compiled is not None:
        out = _compiled.match_group(cols, GroupTrace)
        if out is not NotImplemented:
            matched, found = out
            return GroupMatch(matched, [Disagreement(seq, votes) for seq, votes in found])
    present = {r: c for r, c in cols.items() if len(c[0].seq)}
    result = GroupMatch()
    if len(present) < 2:
        return result
    # The pivot only speeds up equality tests; verdicts come from votes of every rank.
    pivot = max(present, key=lambda r: (len(present[r][0].seq), -r))
    pg, pc = present[pivot]
    p_first, p_last, p_contiguous = pg.seq[0], pg.seq[-1], pg.contiguous()
    suspicious: set[int] = set()
    covered: list[tuple[int, int]] = []  # other ranks' windows inside the pivot's
    outside: Counter[int] = Counter()  # seq outside the pivot's window -> ranks holding it
    for r, (g, c) in present.items():
        if r == pivot:
            continue
        g_first, g_last = g.seq[0], g.seq[-1]
        lo, hi = max(p_first, g_first), min(p_last, g_last)
        if lo <= hi:
            covered.append((lo, hi))
            if p_contiguous and g.contiguous():
                a = pc[lo - p_first: hi - p_first + 1]
                b = c[lo - g_first: hi - g_first + 1]
                if a != b:
                    suspicious.update(lo + i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            else:
                for i, s in enumerate(g.seq):
                    if lo <= s <= hi:
                        j = pg.position(s)
                        if j is None or pc[j] != c[i]:
                            suspicious.add(s)
        if g_first < p_first or g_last > p_last:  # (a column is sorted: else none is outside, the usual case)
            outside.update(_outside(g.seq, p_first, p_last))
    for s, n in outside.items():
        if n >= 2:
            suspicious.add(s)

    for s in sorted(suspicious):
        votes = {}
        for r, (g, c) in present.items():
            j = g.position(s)
            if j is not None:
                votes[r] = c[j]
        if len(votes) >= 2 and len(set(votes.values())) > 1:
            result.disagreements.append(Disagreement(s, votes))
    n_shared = _covered_count(covered, pg) + sum(1 for n in outside.values() if n >= 2)
    result.matched = max(0, n_shared - len(result.disagreements))
    return result


def _outside(seq: array, lo: int, hi: int) -> array:
    """The seq ids of a sorted column that lie outside [lo, hi], found by bisection."""
    return seq[: bisect_left(seq, lo)] + seq[bisect_right(seq, hi):]


def _covered_count(windows: list[tuple[int, int]], pivot: GroupTrace) -> int:
    """How many of the pivot's seq ids at least one other rank also holds."""
    merged: list[list[int]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if pivot.contiguous():
        return sum(hi - lo + 1 for lo, hi in merged)
    return sum(1 for s in pivot.seq if any(lo <= s <= hi for lo, hi in merged))


def mismatch_kind(expected: Signature, actual: Signature) -> str:
    """The finding kind of a disagreement, the first in PyTorch's order: op type, then sizes, then dtypes."""
    if len(expected) != len(actual) or any(a.op != b.op for a, b in zip(expected, actual)):
        return DESYNC
    ce, ca = canonical(expected), canonical(actual)
    if any(x[1:3] != y[1:3] for x, y in zip(ce, ca)):
        return SIZE_MISMATCH
    return DTYPE_MISMATCH


# analysis/_matching.c: match_group in one call (a job-level view matches ~6000 groups a pass at 16384 ranks; the
# Python's glue, a few lookups and calls per member, was ~5 % of its analysis)
_compiled: ModuleType | None
try:
    _compiled = import_module("frexport.analysis._matching")
except ImportError:  # installed without a compiler: match_group above in Python
    _compiled = None
