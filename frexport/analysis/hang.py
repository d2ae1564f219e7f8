"""Who waits for whom: the wait-for graph of a hang, and its root causes.

Each rank's oldest unfinished op in a group is where it waits. Members of that
group that never issued the op wait elsewhere or nowhere; an edge goes from the
waiting rank to each of them. Following edges through groups leads to the root
causes: a rank that waits for nobody (stuck outside any collective, sleeping,
dead), a rank with no dump, a collective every member joined but that never
finished (mismatched, or stuck in the network), or a cycle (ranks that issued
collectives in different orders across groups). Every rank that reaches a root
is reported as blocked by it, so one fault yields one finding, not one per group.

A scoped analysis (a sidecar that watches only its pod's ranks) knows which ranks
it may judge. A member outside that scope is not "without a dump": it is remote,
an edge to it means "waits for another pod" once the wait has lasted the stall
threshold, and it is never a root cause here; the ranks behind it are blocked.

Time is evidence only where it is a clock. A live pass polls every rank and knows
when it saw each one, so a rank seen long after its peers issued an op, without
it, never issued it. A post-mortem has only file times, which copies and
checkouts move to "now" and `touch` anywhere: a file time no older than the
rank's own newest entry, and close after the op, shows a fresh snapshot (a
healthy job caught ranks a few milliseconds apart, not a hang), but it never
proves that ranks waited long. Where nothing else decides, a root is reported
uncertain (`Root.certain`), and the verdict says "inconclusive". What decides
without a clock: a cycle of waits; a member that finished a collective that
another member never issued, or that its peers still wait in (it failed out);
sizes that cannot add up; a watchdog timeout the recorder wrote. Members that failed out of a
collective another member never issued are that member's victims: they wait for it like the members
still in the collective, whatever it did before it left (died, crashed, exited when its data ran out).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

from frexport.analysis.clock import (
    ALL_IN,
    RECORDER,
    TIMEOUT,
    Latest,
    Waited,
    bound_since,
    dump_bound,
    latest_event,
    longest,
    timeout_bound,
)
from frexport.analysis.membership import Group, Membership
from frexport.model.call_site import Frame
from frexport.model.rank_trace import FINISHED, ISSUED, TIMED_OUT, GroupTrace, RankTrace, proven_done
from frexport.model.signature import Signature

IDLE = "idle"  # waits for nobody and is in no collective: stuck outside collectives, or gone
NO_DUMP = "no_dump"
INSIDE = "inside"  # every member joined the collective it waits in, and it did not finish
CYCLE = "cycle"
REMOTE = "remote"  # a rank outside the analysis' scope (another pod's): the waiters are blocked, blame is elsewhere
LEFT = "left"  # a member finished (failed out of) the collective its peers still wait in


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
    age_ns: int  # from issue to when the rank was last seen (RankTrace.seen_at_ns): the live clock rule
    waited: Waited | None = None  # how long it waited, and against which clock (clock.py): what reports show
    missing: tuple[int, ...] = ()
    no_dump: tuple[int, ...] = ()
    not_yet: tuple[int, ...] = ()
    joined: tuple[int, ...] = ()
    left: tuple[int, ...] = ()  # joined members that finished it while this rank still waits: they failed out
    proven: bool = False  # a clock shows the wait lasted longer than the stall threshold
    # missing members whose own recorder went on past the stall threshold after the op was issued
    # without issuing it: proven absent by the recorder's clock, whatever the file times
    outlived: tuple[int, ...] = ()
    completed: bool = False  # a member finished it and went on: it did complete, this rank was dumped before
    # when its last member issued it (every member did; else 0): only from then on can it be stuck inside.
    # Before, the ranks waited for a late member, and snapshots taken either side of that member's
    # arrival (ranks are polled one by one) show every member in it, the early ones long in it.
    all_in_ns: int = 0
    peer: int | None = None  # p2p: the global rank it sends to or receives from
    # a hook retired the op when it was issued (Outcome.ISSUED): the rank may wait in it or have gone past
    # it, nothing says which. Such a wait counts only where members lack the op (a sequence gap): it is
    # placed at the first op of the gap, and never makes a root "inside" the op.
    issued: bool = False

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
    certain: bool = True  # False: only time would tell, and the dumps hold no clock (see the module doc)
    cycle_path: tuple[int, ...] = ()  # CYCLE: one loop of the wait-for graph through the culprit


def find_waits(traces: dict[int, RankTrace], membership: Membership, stall_after_ns: int,
               clock: bool = False, scope: frozenset[int] | None = None) -> list[Wait]:
    """`clock`: the traces' dump times are when the ranks were seen (live polls), not file times.
    `scope`: the ranks this analysis may judge (None: all); others are remote."""
    waits = []
    collective: dict[tuple[str, int], list[Wait]] = {}
    members: dict[str, frozenset[int]] = {}
    floors: dict[str, int | None] = {}
    for rank, t in traces.items():
        for name, g in t.groups.items():
            i = _oldest_unfinished(g.flags.tobytes())
            k = _oldest_unfinished(bytes(map(_flags, g.p2p))) if g.p2p else None
            if i is None and k is None:
                continue  # (nearly every group of a big job: nothing in flight, no group to look up)
            group = membership.groups.get(membership.group_of.get((rank, name), name))
            if group is None:
                continue
            if rank not in (members.get(group.key) or members.setdefault(group.key, frozenset(group.members))):
                continue  # not one of the group's members (a peer inventing rank 5000 in group 0): it waits for no one
            if i is not None:
                issued = bool(g.flags[i] & ISSUED)
                if issued:
                    if group.key not in floors:
                        floors[group.key] = _floor(group, traces)
                    i = _gap_start(g, i, floors[group.key])
                sig = t.signatures[g.sig[i]]
                w = Wait(rank, group, g.seq[i], False, sig, g.created_ns[i], t.call_site(g.site[i]),
                         bool(g.flags[i] & TIMED_OUT), _age(t, g.created_ns[i]), issued=issued)
                w.proven = _proven(w, t, w.created_ns, stall_after_ns, clock)
                collective.setdefault((group.key, w.seq), []).append(w)
                waits.append(w)
            if k is not None:  # ops to one peer complete in order: the oldest one is where it waits
                op = g.p2p[k]
                w = Wait(rank, group, op.seq, True, t.signatures[op.sig], op.created_ns, t.call_site(op.site),
                         bool(op.flags & TIMED_OUT), _age(t, op.created_ns))
                w.proven = _proven(w, t, w.created_ns, stall_after_ns, clock)
                _classify_p2p(w, op, traces, stall_after_ns, scope, clock)
                _measure(w, traces, (w.rank, *w.joined, *w.missing), clock)
                waits.append(w)
    # Members are classified once per collective, not once per waiting rank: in a 4096-rank default
    # group that is the difference between 4096 and 16 million lookups. The earliest waiter's issue
    # time is the reference: the op has been awaited at least since then.
    for ws in collective.values():
        earliest = min(w.created_ns for w in ws)
        stalled = max(w.age_ns for w in ws) >= stall_after_ns
        classes = _classify_collective(ws[0].group, ws[0].seq, earliest, traces, stall_after_ns, scope,
                                       stalled, clock)
        still, all_in = classes[-2:]
        newest = latest_event(traces, (*still, *classes[0]))  # the same for every waiter: once
        for w in ws:
            w.missing, w.no_dump, w.not_yet, w.joined, w.left, w.completed, w.outlived = classes[:-2]
            if all_in:
                w.all_in_ns = max(all_in, w.created_ns)
                w.proven = _proven(w, traces[w.rank], w.all_in_ns, stall_after_ns, clock)
            _measure(w, traces, (w.rank,), clock, newest)
    # an op known only to be issued that no member lacks says nothing: in flight, done, or hung alike
    return [w for w in waits if not w.issued or w.edges or w.not_yet]


def _floor(group, traces: dict[int, RankTrace]) -> int | None:
    """The lowest newest seq among the members that recorded the group: the last op every one of them
    issued, where their records reach."""
    lasts = [g.seq[-1] for m in group.members if (t := traces.get(m)) is not None
             and (g := t.groups.get(group.name)) is not None and len(g.seq)]
    return min(lasts) if lasts else None


def _gap_start(g: GroupTrace, i: int, floor: int | None) -> int:
    """Where a rank whose frontier is position `i` (an op only known issued) waits for the members
    behind it: the first op past the group's floor, which some member never issued (an asynchronous
    backend lets a rank issue more ops before it blocks)."""
    if floor is None or g.seq[i] <= floor:
        return i
    k = g.position(floor + 1)
    return i if k is None else k


def _measure(w: Wait, traces: dict[int, RankTrace], ranks: tuple[int, ...], clock: bool,
             members: Latest | None = None) -> None:
    """How long `w` waited by the best clock (clock.py). `ranks` (with `members`, the newest event of
    some already looked at): those whose records show it still on: the waiting rank, members still
    in the op, members whose dumps lack it."""
    t = traces[w.rank]
    since = w.all_in_ns or w.created_ns
    w.waited = longest(bound_since(latest_event(traces, ranks, members), since),
                       timeout_bound(t, w.group.name, w.rank) if w.timed_out else None,
                       dump_bound(t, since, w.rank, clock))
    if w.all_in_ns and w.waited is not None and w.waited.clock != TIMEOUT:
        w.waited = w.waited._replace(since=ALL_IN)


def _proven(w: Wait, t: RankTrace, since_ns: int, stall_after_ns: int, clock: bool) -> bool:
    """The watchdog gave up on it, or the rank was seen in it the stall threshold after `since_ns` by a
    dump time that is a clock (a poll; not a file that was there before the sidecar looked)."""
    return w.timed_out or (clock and t.dumped_at_is_clock and _age(t, since_ns) >= stall_after_ns)


def _age(t: RankTrace, created_ns: int) -> int:
    seen = t.seen_at_ns  # not a file time older than the rank's own newest entry (model/rank_trace.py)
    return max(0, seen - created_ns) if seen and created_ns else 0


_UNFINISHED = bytes(0 if v & FINISHED else 1 for v in range(256))


_flags = attrgetter("flags")


def _oldest_unfinished(flags: bytes) -> int | None:
    """The first position not FINISHED among a group's flags (its column's, or its p2p ops'), by a C-speed
    scan: a 16384-rank view looks at every rank's groups each pass, each with its window of sends and recvs."""
    i = flags.translate(_UNFINISHED).find(1)
    return None if i < 0 else i


def _classify_collective(group: Group, seq: int, created_ns: int, traces: dict[int, RankTrace],
                         stall_after_ns: int, scope: frozenset[int] | None = None,
                         stalled: bool = True, clock: bool = False) -> tuple:
    """(missing, no_dump, not_yet, joined, left, completed, outlived, still, all_in_ns) of a collective's
    members; all_in_ns: when its last member issued it, where every member's record shows it (else 0)."""
    no_dump: list[int]
    not_yet: list[int]
    missing, no_dump, not_yet, joined, left, still, outlived = [], [], [], [], [], [], []
    fresh: list[int] = []  # seen too soon after it was issued to say they never will issue it
    all_in = 0
    moved_on = False
    name = group.name
    for m in group.members:
        t = traces.get(m)
        if t is None:
            (no_dump if _absence_counts(m, stalled, scope, clock) else not_yet).append(m)
            continue
        g = t.groups.get(name)
        i = g.position(seq) if g is not None and len(g.seq) else None
        if i is not None or (g is not None and len(g.seq) and seq < g.seq[0]):
            assert g is not None  # (for mypy) i is a position in g, or g's first seq is after it
            joined.append(m)  # issued it (or it fell out of its ring buffer, so it did issue it)
            if i is not None:
                all_in = max(all_in, g.created_ns[i])
            if i is not None and not g.flags[i] & FINISHED:
                still.append(m)
            # (an op only known issued that the member went past: it issued it, nothing more is known)
            if i is not None and proven_done(g.flags[i]):
                left.append(m)
                # it recorded ops after finishing this one: it completed, not failed (a collective
                # completes only once every member issued it), so members that lack it or still
                # wait in it were dumped earlier (dumps of a running job are never simultaneous)
                moved_on = moved_on or i < len(g.seq) - 1 or (t.last_created_ns or 0) > g.created_ns[i]
        elif _fresh(t, created_ns, stall_after_ns, clock):
            fresh.append(m)
        elif not t.groups:  # its dump holds no entry (a recorder emptied as its process exited): no record
            (no_dump if _absence_counts(m, stalled, None, clock) else not_yet).append(m)
        elif g is None and (t.first_created_ns is None or t.first_created_ns > created_ns):
            not_yet.append(m)  # its buffer does not reach back that far: cannot tell
        else:
            missing.append(m)
            if _outlived(t, created_ns, stall_after_ns):
                outlived.append(m)
    if fresh and stalled and left and not moved_on:
        # Members finished it without the fresh ones while others waited past the threshold: they failed
        # out of it, and a collective fails when a member vanishes (or on the watchdog's timeout). A member
        # that vanished is never seen again, so it would look fresh for good: here it is a candidate like
        # any member that lacks the op (engine `_vanished_root` and departure.py pick among them).
        missing = [m for m in group.members if m in set(missing) | set(fresh)]
    else:
        not_yet += fresh
    if missing or no_dump or not_yet:
        all_in = 0
    if moved_on:
        return (), tuple(no_dump), tuple(missing + not_yet), tuple(joined), (), True, (), tuple(still), all_in
    return (tuple(missing), tuple(no_dump), tuple(not_yet), tuple(joined), tuple(left), False, tuple(outlived),
            tuple(still), all_in)


def _absence_counts(m: int, stalled: bool, scope: frozenset[int] | None, clock: bool) -> bool:
    """Whether a member with no record at all is waited for. Once the wait is a stall, always. Before,
    only where its absence is final: a rank this analysis watches (no snapshot: its process is down),
    or a dump set read after the fact. Live, a rank of another pod, or one the job-level view's peers
    have not sent yet, is absent from a healthy job too: every collective spanning pods has such
    members, and at a job's start one pod is heard of before another."""
    return stalled or (m in scope if scope is not None else not clock)


def _outlived(t: RankTrace, created_ns: int, stall_after_ns: int) -> bool:
    """The rank's own recorder wrote an event at least the stall threshold after the op was issued,
    and its dump (taken after that event) lacks the op: it went on that long without issuing it.
    As in the live rule (a rank polled that long after, without it), only the rank's own records
    count: another rank's later events say nothing of when this rank was dumped."""
    return bool(t.last_event_ns and created_ns and t.last_event_ns - created_ns >= stall_after_ns)


def _classify_p2p(w: Wait, op, traces: dict[int, RankTrace], stall_after_ns: int,
                  scope: frozenset[int] | None = None, clock: bool = False) -> None:
    me_local = w.group.members.index(w.rank) if w.rank in w.group.members else None
    peer_local = op.dst if op.op == "send" else op.src
    peer = w.group.global_rank(peer_local)
    if peer is None or peer == w.rank:
        return
    w.peer = peer
    t = traces.get(peer)
    if t is None:
        if _absence_counts(peer, w.age_ns >= stall_after_ns, scope, clock):
            w.no_dump = (peer,)
        else:
            w.not_yet = (peer,)
        return
    want = "recv" if op.op == "send" else "send"
    g = t.groups.get(w.group.name)
    for other in g.p2p if g else ():
        other_peer = other.src if want == "recv" else other.dst
        if other.op == want and other_peer == me_local and not other.flags & FINISHED:
            w.joined = (w.rank, peer)
            w.all_in_ns = max(w.created_ns, other.created_ns)
            w.proven = _proven(w, traces[w.rank], w.all_in_ns, stall_after_ns, clock)
            return
    if _fresh(t, w.created_ns, stall_after_ns, clock):
        w.not_yet = (peer,)
    else:
        w.missing = (peer,)
        if _outlived(t, w.created_ns, stall_after_ns):
            w.outlived = (peer,)


def _fresh(t: RankTrace, created_ns: int, stall_after_ns: int, clock: bool) -> bool:
    """The rank was seen too soon after the op was issued to say it never will issue it.

    A dump time older than the rank's own newest recorded event is not when the dump was taken (a
    file touched into the past, live or after the fact), so it says nothing: the rank is not fresh,
    only a suspect unless other evidence decides (see `Root.certain`). A rank whose own recorder
    went on past the threshold is never fresh, whatever its dump time. A dump time close after the
    op shows a fresh snapshot whether or not it is a clock."""
    if not (clock and t.dumped_at_is_clock):
        return False  # a post-mortem's file times are no clock: they decide nothing, fresh or old
    if _outlived(t, created_ns, stall_after_ns) or not t.dump_time_trusted:
        return False
    assert t.dumped_at_ns is not None  # (for mypy) dump_time_trusted: the rank has a dump time
    return t.dumped_at_ns - created_ns < stall_after_ns


def root_causes(waits: list[Wait], traces: dict[int, RankTrace], stall_after_ns: int,
                scope: frozenset[int] | None = None, clock: bool = False) -> list[Root]:
    # The wait-for graph, with its edges shared: every waiter of one collective waits for the same
    # members (classified once per collective, one tuple), so a rank's edges go through that tuple, a
    # hub, to the members. In a 4096-rank hang the millions of rank-to-rank edges are a few hundred hubs.
    hubs: dict[tuple, tuple[int, ...]] = {}  # hub -> the ranks waited for
    out: dict[int, dict[tuple, None]] = {}  # waiting rank -> its hubs (ordered)
    # target rank -> the op that shows best that it is the one missing: the one where the fewest
    # members are missing (in a hang the culprit's own group waits for it alone, while wider groups
    # miss everyone blocked behind it too), then the oldest
    first_edge: dict[int, Wait] = {}
    left_edge: dict[int, Wait] = {}  # member that failed out -> the collective its peers still wait in
    evidence: dict[int, bool] = {}  # target -> its absence is proven (by a clock, or by peers failing out)
    settled: dict[tuple, bool] = {}  # hub -> the evidence it gave so far: later waiters of it add no edge
    for w in sorted(waits, key=lambda w: (len(w.edges), w.created_ns, w.rank)):
        if w.missing or w.no_dump:
            # the tuples are shared by the collective's waiters and alive as long as `waits`: ids are keys
            hub = ("wait", id(w.missing), id(w.no_dump))
            # peers finished a collective this member never issued: they failed out of it (a collective
            # cannot complete without every member), so the member is not merely late
            _edge(hub, w, w.edges, w.proven or bool(w.left), hubs, out, settled, evidence, first_edge,
                  w.outlived)
            # the members that finished it failed out of it for want of those members: victims that wait
            # for them too (however the absent member went: died, crashed, or exited when its data ran out)
            for m in () if w.p2p else w.left:
                out.setdefault(m, {})[hub] = None
        if not w.p2p and not w.edges and not w.not_yet and w.left and not _seen_soon_after_all_in(w, traces, clock,
                                                                                                   stall_after_ns):
            _edge(("left", id(w.left)), w, w.left, w.proven, hubs, out, settled, evidence, left_edge)
    inside: dict[int, Wait] = {}
    for w in waits:
        if (not w.edges and not w.not_yet and not w.left and not w.completed and w.rank in traces
                and not _seen_soon_after_all_in(w, traces, clock, stall_after_ns)):
            prev = inside.get(w.rank)
            if prev is None or w.created_ns < prev.created_ns:
                inside[w.rank] = w

    roots: list[Root] = []
    waiting = set(out)
    targets = set().union(*hubs.values())
    for m in sorted(targets - waiting):
        if m not in traces:
            roots.append(Root(NO_DUMP if scope is None or m in scope else REMOTE, (m,), first_edge[m]))
        elif m in left_edge and m not in first_edge:
            roots.append(Root(LEFT, (m,), left_edge[m], certain=evidence[m]))
        elif m in inside:
            roots.append(Root(INSIDE, (m,), inside[m], certain=_stuck_long(inside[m], stall_after_ns)))
        else:
            roots.append(Root(IDLE, (m,), first_edge[m], certain=evidence[m]))
    for r in sorted(set(inside) - waiting - targets):
        roots.append(Root(INSIDE, (r,), inside[r], certain=_stuck_long(inside[r], stall_after_ns)))
    for cycle in _closed_cycles(hubs, out):
        # every rank of a closed cycle is blocked in an op that waits for another rank of it: no clock
        # is needed to know that none of them can move
        # (a cycle may run through members that failed out of collectives only: their left_edge)
        w = min((e for m in sorted(cycle) if (e := first_edge.get(m) or left_edge.get(m)) is not None),
                key=lambda w: (w.created_ns, w.rank))
        root = Root(CYCLE, tuple(sorted(cycle)), w)
        roots.append(root)

    waiters: dict[tuple, list[int]] = {}  # hub -> the ranks that wait through it
    for a, hs in out.items():
        for hub in hs:
            waiters.setdefault(hub, []).append(a)
    hubs_of: dict[int, list[tuple]] = {}  # target -> the hubs that lead to it
    for hub, ms in hubs.items():
        for m in ms:
            hubs_of.setdefault(m, []).append(hub)
    for root in roots:
        seen: set[int] = set()
        expanded: set[tuple] = set()
        stack = list(root.ranks)
        while stack:
            for hub in hubs_of.get(stack.pop(), ()):
                if hub not in expanded:  # each hub's waiters are looked at once per root, not once per edge
                    expanded.add(hub)
                    for a in waiters[hub]:
                        if a not in seen:
                            seen.add(a)
                            stack.append(a)
        root.blocked = tuple(sorted(seen - set(root.ranks)))
        direct = {a for r in root.ranks for hub in hubs_of.get(r, ()) for a in waiters[hub]}
        root.waited_by = tuple(sorted(direct - set(root.ranks)))
    return roots


def _seen_soon_after_all_in(w: Wait, traces: dict[int, RankTrace], clock: bool, stall_after_ns: int) -> bool:
    """The waiting rank was seen too soon after the op's last member issued it to say it is stuck in it:
    a collective in flight, or (members that finished it) one this rank finished just after its snapshot."""
    t = traces.get(w.rank)
    return t is not None and _fresh(t, w.all_in_ns or w.created_ns, stall_after_ns, clock)


def _stuck_long(w: Wait, stall_after_ns: int) -> bool:
    """A collective every member issued lasted past the stall threshold: by a clock (the watchdog, a
    live poll), or by the recorder of a member still in it that wrote an event that much later."""
    return w.proven or bool(w.waited and w.waited.clock == RECORDER and w.waited.ns >= stall_after_ns)


def _edge(hub: tuple, w: Wait, ranks: tuple[int, ...], proven: bool, hubs: dict, out: dict, settled: dict,
          evidence: dict[int, bool], first: dict[int, Wait], outlived: tuple[int, ...] = ()) -> None:
    """w.rank waits for `ranks` through `hub`. Waits come oldest first, so the first one through a hub
    names it in `first`; a later one only adds its evidence, once, where the earlier ones had none
    (`outlived`, the members proven absent by their own recorders, is the hub's: one per collective)."""
    hubs[hub] = ranks
    out.setdefault(w.rank, {})[hub] = None
    before = settled.get(hub)
    if before is None:
        for m in ranks:
            first.setdefault(m, w)
            evidence[m] = evidence.get(m, False) or proven or m in outlived
        settled[hub] = proven
    elif proven and not before:
        for m in ranks:
            evidence[m] = True
        settled[hub] = True


def cycle_path(edges_of: dict[int, set[int]], start: int) -> tuple[int, ...]:
    """The shortest loop of the wait-for graph from `start` back to it (breadth first, lowest ranks first)."""
    prev: dict[int, int] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for a in frontier:
            for b in sorted(edges_of.get(a, ())):
                if b == start:
                    path = [a]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return (start, *reversed(path[:-1]), start) if len(path) > 1 else (start, a, start)
                if b not in prev:
                    prev[b] = a
                    nxt.append(b)
        frontier = nxt
    return ()


def _closed_cycles(hubs: dict[tuple, tuple[int, ...]], out: dict[int, dict[tuple, None]]) -> list[set[int]]:
    """Strongly connected components of the wait-for graph with more than one rank and no edge leaving
    them. Tarjan's algorithm over ranks and hubs (a rank's edges go through its hubs): ranks are
    mutually reachable through hubs exactly when they are through their direct edges."""
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    comps: list[set] = []

    def successors(v) -> Iterator:
        return iter(hubs[v] if isinstance(v, tuple) else out.get(v, ()))

    # iterative, so a ring of thousands of ranks needs no recursion limit (and no closure that refers
    # to itself: a reference cycle per analysis pass for the garbage collector to find)
    for root in sorted(out):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        path = [(root, successors(root))]
        while path:
            v, todo = path[-1]
            for w in todo:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    path.append((w, successors(w)))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:  # v's successors are all seen: v is done
                path.pop()
                if path:
                    parent = path[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.add(x)
                        if x == v:
                            break
                    comps.append(comp)
    closed = []
    for comp in comps:
        ranks = {v for v in comp if not isinstance(v, tuple)}
        if len(ranks) > 1 and all(set(hubs[h]) <= ranks for v in ranks for h in out.get(v, ())):
            closed.append(ranks)
    return closed
