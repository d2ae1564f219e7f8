"""Who waits for whom: the wait-for graph of a hang, and its root causes.

Each rank's oldest unfinished op in a group is where it waits. Members of that
group that never issued the op wait elsewhere or nowhere; an edge goes from the
waiting rank to each of them. Following edges through groups leads to the root
causes: a rank that waits for nobody (stuck outside any collective, sleeping,
dead), a rank with no dump, a collective every member joined but that never
finished (mismatched, or stuck in the network), or a cycle (ranks that issued
collectives in different orders across groups). Every rank that reaches a root
is reported as blocked by it, so one fault yields one finding, not one per group.

A rank only counts as "never issued" an op if it was seen alive (its dump time)
long enough after its peers issued it: a snapshot of a healthy job catches
ranks a few milliseconds apart, which is not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass

from frexport.analysis.membership import Group, Membership
from frexport.model.call_site import Frame
from frexport.model.rank_trace import FINISHED, TIMED_OUT, RankTrace
from frexport.model.signature import Signature

IDLE = "idle"  # waits for nobody and is in no collective: stuck outside collectives, or gone
NO_DUMP = "no_dump"
INSIDE = "inside"  # every member joined the collective it waits in, and it did not finish
CYCLE = "cycle"


@dataclass
class Wait:
    rank: int
    group: Group
    seq: int
    p2p: bool
    sig: Signature
    created_ns: int
    site: Frame | None
    timed_out: bool
    age_ns: int  # how long the rank had been waiting when it was last seen
    missing: tuple[int, ...] = ()
    no_dump: tuple[int, ...] = ()
    not_yet: tuple[int, ...] = ()
    joined: tuple[int, ...] = ()

    @property
    def edges(self) -> tuple[int, ...]:
        return self.missing + self.no_dump


@dataclass
class Root:
    kind: str  # IDLE, NO_DUMP, INSIDE, CYCLE
    ranks: tuple[int, ...]
    wait: Wait  # the op the root ranks failed to issue (IDLE, NO_DUMP) or are stuck in (INSIDE, CYCLE)
    blocked: tuple[int, ...] = ()
    waited_by: tuple[int, ...] = ()  # ranks that wait for the root ranks directly


def find_waits(traces: dict[int, RankTrace], membership: Membership, stall_after_ns: int) -> list[Wait]:
    waits = []
    collective: dict[tuple[str, int], list[Wait]] = {}
    for rank, t in traces.items():
        for name, g in t.groups.items():
            group = membership.groups.get(membership.group_of.get((rank, name), name))
            if group is None:
                continue
            i = _oldest_unfinished(g.flags)
            if i is not None:
                sig = t.signatures[g.sig[i]]
                w = Wait(rank, group, g.seq[i], False, sig, g.created_ns[i], t.call_site(g.site[i]),
                         bool(g.flags[i] & TIMED_OUT), _age(t, g.created_ns[i]))
                collective.setdefault((group.key, w.seq), []).append(w)
                waits.append(w)
            for op in g.p2p:
                if not op.flags & FINISHED:
                    w = Wait(rank, group, op.seq, True, t.signatures[op.sig], op.created_ns, t.call_site(op.site),
                             bool(op.flags & TIMED_OUT), _age(t, op.created_ns))
                    _classify_p2p(w, op, traces, stall_after_ns)
                    waits.append(w)
                    break  # ops to one peer complete in order: the oldest one is where it waits
    # Members are classified once per collective, not once per waiting rank: in a 4096-rank default
    # group that is the difference between 4096 and 16 million lookups. The earliest waiter's issue
    # time is the reference: the op has been awaited at least since then.
    for ws in collective.values():
        earliest = min(w.created_ns for w in ws)
        classes = _classify_collective(ws[0].group, ws[0].seq, earliest, traces, stall_after_ns)
        for w in ws:
            w.missing, w.no_dump, w.not_yet, w.joined = classes
    return waits


def _age(t: RankTrace, created_ns: int) -> int:
    seen = t.seen_at_ns
    return max(0, seen - created_ns) if seen and created_ns else 0


_UNFINISHED = bytes(0 if v & FINISHED else 1 for v in range(256))


def _oldest_unfinished(flags) -> int | None:
    i = flags.tobytes().translate(_UNFINISHED).find(1)  # a C-speed scan of the flag column
    return None if i < 0 else i


def _classify_collective(group: Group, seq: int, created_ns: int, traces: dict[int, RankTrace],
                         stall_after_ns: int) -> tuple[tuple[int, ...], ...]:
    missing, no_dump, not_yet, joined = [], [], [], []
    name = group.name
    for m in group.members:
        t = traces.get(m)
        if t is None:
            no_dump.append(m)
            continue
        g = t.groups.get(name)
        if g is not None and len(g.seq) and (seq < g.seq[0] or g.position(seq) is not None):
            joined.append(m)  # issued it (or it fell out of its ring buffer, so it did issue it)
        elif not _seen_long_after(t, created_ns, stall_after_ns):
            not_yet.append(m)
        elif g is None and (t.first_created_ns is None or t.first_created_ns > created_ns):
            not_yet.append(m)  # its buffer does not reach back that far: cannot tell
        else:
            missing.append(m)
    return tuple(missing), tuple(no_dump), tuple(not_yet), tuple(joined)


def _classify_p2p(w: Wait, op, traces: dict[int, RankTrace], stall_after_ns: int) -> None:
    me_local = w.group.members.index(w.rank) if w.rank in w.group.members else None
    peer_local = op.dst if op.op == "send" else op.src
    peer = w.group.global_rank(peer_local)
    if peer is None or peer == w.rank:
        return
    t = traces.get(peer)
    if t is None:
        w.no_dump = (peer,)
        return
    want = "recv" if op.op == "send" else "send"
    g = t.groups.get(w.group.name)
    for other in g.p2p if g else ():
        other_peer = other.src if want == "recv" else other.dst
        if other.op == want and other_peer == me_local and not other.flags & FINISHED:
            w.joined = (w.rank, peer)
            return
    if _seen_long_after(t, w.created_ns, stall_after_ns):
        w.missing = (peer,)
    else:
        w.not_yet = (peer,)


def _seen_long_after(t: RankTrace, created_ns: int, stall_after_ns: int) -> bool:
    seen = t.seen_at_ns
    return bool(seen) and seen - created_ns >= stall_after_ns


def root_causes(waits: list[Wait], traces: dict[int, RankTrace], stall_after_ns: int) -> list[Root]:
    edges: dict[int, set[int]] = {}
    # target rank -> the op that shows best that it is the one missing: the one where the fewest
    # members are missing (in a hang the culprit's own group waits for it alone, while wider groups
    # miss everyone blocked behind it too), then the oldest
    first_edge: dict[int, Wait] = {}
    for w in sorted(waits, key=lambda w: (len(w.edges), w.created_ns, w.rank)):
        for m in w.edges:
            edges.setdefault(w.rank, set()).add(m)
            first_edge.setdefault(m, w)
    inside = {}
    for w in waits:
        if not w.edges and not w.not_yet and w.age_ns >= stall_after_ns and w.rank in traces:
            prev = inside.get(w.rank)
            if prev is None or w.created_ns < prev.created_ns:
                inside[w.rank] = w

    roots: list[Root] = []
    waiting = set(edges)
    targets = {m for ms in edges.values() for m in ms}
    for m in sorted(targets - waiting):
        w = first_edge[m]
        if m not in traces:
            roots.append(Root(NO_DUMP, (m,), w))
        elif m in inside:
            roots.append(Root(INSIDE, (m,), inside[m]))
        else:
            roots.append(Root(IDLE, (m,), w))
    for r in sorted(set(inside) - waiting - targets):
        roots.append(Root(INSIDE, (r,), inside[r]))
    for cycle in _closed_cycles(edges):
        w = min((first_edge[m] for m in cycle if m in first_edge), key=lambda w: (w.created_ns, w.rank))
        roots.append(Root(CYCLE, tuple(sorted(cycle)), w))

    reverse: dict[int, set[int]] = {}
    for a, bs in edges.items():
        for b in bs:
            reverse.setdefault(b, set()).add(a)
    for root in roots:
        seen: set[int] = set()
        stack = list(root.ranks)
        while stack:
            for a in reverse.get(stack.pop(), ()):
                if a not in seen:
                    seen.add(a)
                    stack.append(a)
        root.blocked = tuple(sorted(seen - set(root.ranks)))
        root.waited_by = tuple(sorted(set().union(*(reverse.get(r, set()) for r in root.ranks)) - set(root.ranks)))
    return roots


def _closed_cycles(edges: dict[int, set[int]]) -> list[set[int]]:
    """Strongly connected components with more than one rank and no edge leaving them."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    comps: list[set[int]] = []
    counter = [0]

    def visit(v: int) -> None:  # iterative Tarjan would be longer; depth is bounded by the world size
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                x = stack.pop()
                on_stack.discard(x)
                comp.add(x)
                if x == v:
                    break
            comps.append(comp)

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * (len(edges) + 100)))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return [c for c in comps if len(c) > 1 and all(edges.get(v, set()) <= c for v in c)]
