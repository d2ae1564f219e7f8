"""Which rank of a deadlock cycle is out of order.

Ranks that issue collectives on several groups in different orders block each other: each waits
in a group for a rank that waits in another group. Every rank of the cycle waits, but only the
one whose order differs from the order every other rank follows is the cause. It shows in two
ways: where the ranks wait (most ranks, cycle or not, wait in one group; the culprit in another),
and, with stack frames, where it issued the op: at a call site the others issue on another group.
"""

from __future__ import annotations

from collections import Counter

from frexport.analysis.hang import Wait
from frexport.model.call_site import Frame
from frexport.model.rank_trace import RankTrace


def role(w: Wait) -> str:
    """A group as the code names it: tp groups on different ranks are different groups in one role."""
    return w.group.desc or w.group.name


def role_text(r: str) -> str:
    return "the default group" if r == "default_pg" else f"group {r}"


def out_of_order(cycle: tuple[int, ...], waits: list[Wait]) -> tuple[int, ...]:
    """The cycle ranks that wait in another group than the one most waiting ranks wait in; () if
    that does not single out a strict subset of the cycle."""
    where: dict[int, str] = {}
    for w in sorted(waits, key=lambda w: (w.created_ns, w.rank)):
        if w.edges and not w.p2p:
            where.setdefault(w.rank, role(w))
    counts = Counter(where.values()).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return ()
    usual = counts[0][0]
    odd = tuple(r for r in cycle if where.get(r, usual) != usual)
    return odd if 0 < len(odd) < len(cycle) else ()


def site_roles(traces: dict[int, RankTrace], site: Frame, skip: set[int]) -> dict[str, list[int]]:
    """role -> ranks that recorded an op at `site` in a group of that role (each rank once, its most used)."""
    out: dict[str, list[int]] = {}
    for rank, t in sorted(traces.items()):
        if rank in skip or site not in t.call_sites:
            continue
        k = t.call_sites.index(site)
        uses: Counter[str] = Counter()
        for g in t.groups.values():
            n = sum(1 for s in g.site if s == k)
            if n:
                uses[g.pg_desc or g.pg_name] += n
        if uses:
            out.setdefault(uses.most_common(1)[0][0], []).append(rank)
    return out
