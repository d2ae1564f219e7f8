"""The wait-for graph of a hang: who waits for whom, and which ranks are the root causes."""

import random

from hypothesis import given
from hypothesis import strategies as st

from frexport.analysis.hang import (
    CYCLE,
    IDLE,
    INSIDE,
    LEFT,
    NO_DUMP,
    REMOTE,
    Root,
    Wait,
    _closed_cycles,
    _fresh,
    _stuck_long,
    find_waits,
    root_causes,
)
from frexport.analysis.membership import Group, build_membership
from frexport.model.rank_trace import RankTrace
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job
from tests.support.synth import traces as decode

STALL_AFTER_NS = 5 * 10**9
ISSUED = T0 + 10 * STEP_NS  # when the stuck collective (seq 11) was issued


def _roots(dumps: dict[int, dict], seen_after_s: float, known: set[int] | None = None):
    by_rank = decode(dumps, seen_at_ns=ISSUED + int(seen_after_s * 1e9))
    # the traces' dump times are when a sidecar polled them: a clock
    waits = find_waits(by_rank, build_membership(by_rank, known), STALL_AFTER_NS, clock=True)
    return waits, root_causes(waits, by_rank, STALL_AFTER_NS, clock=True)


def _stuck(job, ranks, seq=11, **kw):
    for r in ranks:
        job[r].append(entry(len(job[r]), seq, state="started", created=ISSUED, **kw))


def test_a_rank_missing_from_the_collective_its_peers_wait_in_is_the_root_cause():
    job = healthy_job(world=4)
    _stuck(job, [0, 1, 3])
    waits, roots = _roots({r: dump(es, world=4) for r, es in job.items()}, seen_after_s=10)
    assert sorted(w.rank for w in waits) == [0, 1, 3] and all(w.missing == (2,) for w in waits)
    [root] = roots
    assert (root.kind, root.ranks, root.blocked, root.wait.seq) == (IDLE, (2,), (0, 1, 3), 11)


def test_a_rank_seen_too_soon_after_its_peers_is_not_yet_missing():
    """One snapshot catches healthy ranks milliseconds apart: that is not a hang."""
    job = healthy_job(world=4)
    _stuck(job, [0, 1, 3])
    waits, roots = _roots({r: dump(es, world=4) for r, es in job.items()}, seen_after_s=1)
    assert roots == [] and all(w.not_yet == (2,) and w.missing == () for w in waits)


def test_a_member_without_a_dump_is_named_as_such():
    job = healthy_job(world=4)
    _stuck(job, [0, 1, 3])
    del job[2]
    _, [root] = _roots({r: dump(es, world=4) for r, es in job.items()}, seen_after_s=10)
    assert (root.kind, root.ranks, root.blocked) == (NO_DUMP, (2,), (0, 1, 3))


def test_every_member_joined_and_it_did_not_finish_the_fault_is_below_pytorch():
    job = healthy_job(world=2)
    _stuck(job, [0, 1])
    waits, roots = _roots({r: dump(es, world=2) for r, es in job.items()}, seen_after_s=10)
    assert all(w.joined == (0, 1) and not w.timed_out for w in waits)
    assert sorted((r.kind, r.ranks) for r in roots) == [(INSIDE, (0,)), (INSIDE, (1,))]


def test_an_nccl_entry_retired_without_completing_is_a_timed_out_wait():
    job = healthy_job(world=2)
    for r in (0, 1):
        job[r].append(entry(10, 11, state="scheduled", retired=True, created=ISSUED))
    waits, _ = _roots({r: dump(es, world=2) for r, es in job.items()}, seen_after_s=10)
    assert [(w.rank, w.seq, w.timed_out) for w in waits] == [(0, 11, True), (1, 11, True)]


def test_a_gloo_retired_entry_is_over_not_a_wait():
    job = healthy_job(world=2, backend="gloo", state="scheduled", retired=True)
    waits, roots = _roots({r: dump(es, world=2) for r, es in job.items()}, seen_after_s=10)
    assert (waits, roots) == ([], [])


def test_blocking_is_followed_through_other_groups_to_the_one_culprit():
    """Ranks 0 and 1 wait for 2 and 3 in the default group; rank 2 waits for 3 in their tp group:
    rank 3 is the one root cause and it blocks everyone, one finding instead of one per group."""
    job = healthy_job(world=4)
    _stuck(job, [0, 1])
    job[2].append(entry(10, 1, pg=("5", "tp"), pg_id=1, state="started", created=ISSUED))
    groups = {"5": ("tp", [2, 3])}
    _, roots = _roots({r: dump(es, world=4, groups=groups) for r, es in job.items()}, seen_after_s=10)
    [root] = roots
    assert (root.kind, root.ranks, root.blocked, root.waited_by) == (IDLE, (3,), (0, 1, 2), (0, 1, 2))
    assert root.wait.group.name == "nccl:5"  # named by the group that waits for rank 3 alone


def test_collectives_issued_in_different_orders_across_groups_are_a_cycle():
    job = {0: [entry(0, 1, state="started", created=ISSUED)],
           1: [entry(0, 1, pg=("5", "pp"), pg_id=1, state="started", created=ISSUED)]}
    _, roots = _roots({r: dump(es, world=2, groups={"5": ("pp", [0, 1])}) for r, es in job.items()},
                      seen_after_s=10)
    assert [(r.kind, r.ranks) for r in roots] == [(CYCLE, (0, 1))]


# The wait-for graph with one edge per pair of ranks, as it was before edges went through shared hubs:
# the reference the hub version must agree with.
def _reference_roots(waits: list[Wait], traces: dict[int, RankTrace], stall_after_ns: int,
                     scope: frozenset[int] | None = None) -> list[Root]:
    edges: dict[int, set[int]] = {}
    # target rank -> the op that shows best that it is the one missing: the one where the fewest
    # members are missing (in a hang the culprit's own group waits for it alone, while wider groups
    # miss everyone blocked behind it too), then the oldest
    first_edge: dict[int, Wait] = {}
    left_edge: dict[int, Wait] = {}  # member that failed out -> the collective its peers still wait in
    evidence: dict[int, bool] = {}  # target -> its absence is proven (by a clock, or by peers failing out)
    for w in sorted(waits, key=lambda w: (len(w.edges), w.created_ns, w.rank)):
        for m in w.edges:
            edges.setdefault(w.rank, set()).add(m)
            first_edge.setdefault(m, w)
            # peers finished a collective this member never issued: they failed out of it (a collective
            # cannot complete without every member), so the member is not merely late
            evidence[m] = evidence.get(m, False) or w.proven or bool(w.left) or m in w.outlived
        for v in w.left if w.edges and not w.p2p else ():  # failed out for want of them: victims that wait too
            edges.setdefault(v, set()).update(w.edges)
        soon = w.rank in traces and _fresh(traces[w.rank], w.all_in_ns or w.created_ns, stall_after_ns, True)
        if not w.p2p and not w.edges and not w.not_yet and w.left and not soon:
            for m in w.left:
                edges.setdefault(w.rank, set()).add(m)
                left_edge.setdefault(m, w)
                evidence[m] = evidence.get(m, False) or w.proven
    inside = {}
    for w in waits:
        if (not w.edges and not w.not_yet and not w.left and not w.completed and w.rank in traces
                and not _fresh(traces[w.rank], w.all_in_ns or w.created_ns, stall_after_ns, True)):
            prev = inside.get(w.rank)
            if prev is None or w.created_ns < prev.created_ns:
                inside[w.rank] = w

    roots: list[Root] = []
    waiting = set(edges)
    targets = {m for ms in edges.values() for m in ms}
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
    for cycle in _reference_cycles(edges):
        # every rank of a closed cycle is blocked in an op that waits for another rank of it: no clock
        # is needed to know that none of them can move
        # (a cycle may run through members that failed out of collectives only: their left_edge)
        w = min((e for m in sorted(cycle) if (e := first_edge.get(m) or left_edge.get(m)) is not None),
                key=lambda w: (w.created_ns, w.rank))
        root = Root(CYCLE, tuple(sorted(cycle)), w)
        roots.append(root)

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


def _reference_cycles(edges: dict[int, set[int]]) -> list[set[int]]:
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


@given(st.integers(0, 2**32))
def test_the_graph_through_hubs_finds_the_roots_of_the_graph_of_pairs(seed):
    """Random waits shaped as find_waits makes them: the waiters of one collective share its tuples;
    p2p waits, members that failed out or outlived the wait, ranks without a dump, cycles and fresh
    ranks all occur."""
    rng = random.Random(seed)
    world = rng.randrange(2, 12)
    group = Group("0", "0", "default_pg", tuple(range(world)))
    traces = {}
    for r in range(world):
        if rng.random() < 0.9:  # the others left no dump
            traces[r] = RankTrace(r, "x", "json", None, (), T0 + rng.choice([0, 2, 10]) * 10**9, 1, (), (), T0, T0)
    waits = []
    for _ in range(rng.randrange(0, 7)):
        ranks = rng.sample(range(world), rng.randrange(1, world + 1))
        shared = tuple(sorted(rng.sample(range(world), rng.randrange(0, min(4, world + 1)))))
        no_dump = tuple(m for m in shared if m not in traces)
        missing = tuple(m for m in shared if m in traces)
        outlived = tuple(m for m in missing if rng.random() < 0.3)
        # members that finished it have a dump
        left = tuple(sorted(rng.sample(sorted(traces), min(len(traces), 1)))) if rng.random() < 0.3 else ()
        p2p = rng.random() < 0.2
        for r in ranks:
            w = Wait(r, group, rng.randrange(1, 4), p2p, (), T0 - rng.choice([0, 1, 20]) * 10**9, None, False,
                     rng.choice([0, 10 * 10**9]))
            w.proven = rng.random() < 0.15
            if rng.random() < 0.3:  # every member issued it, the last one later
                w.all_in_ns = w.created_ns + rng.choice([0, 5, 15]) * 10**9
            if p2p:  # a p2p wait's tuples are its own
                w.missing, w.no_dump = tuple(missing[:1]), tuple(no_dump[:1])
                w.outlived = tuple(m for m in w.missing if m in outlived)
            else:
                w.missing, w.no_dump, w.left, w.outlived = missing, no_dump, left, outlived
                w.not_yet = () if rng.random() < 0.8 else (rng.randrange(world),)
                w.completed = rng.random() < 0.1
            waits.append(w)
    for scope in (None, frozenset(range(world // 2))):
        got = root_causes(waits, traces, STALL_AFTER_NS, scope, clock=True)
        want = _reference_roots(waits, traces, STALL_AFTER_NS, scope)

        def key(root):
            return (root.kind, root.ranks, id(root.wait), root.blocked, root.waited_by, root.certain)

        assert sorted(map(key, got)) == sorted(map(key, want))


def test_ranks_that_each_failed_out_of_what_the_other_waits_in_are_one_cycle_not_a_crash():
    """Rank 1 finished (failed out of) collective 1 of group a that rank 0 still waits in, rank 0 did the
    same in group b: a cycle made of such edges only (it crashed the analysis: no wait named it)."""
    groups = {"a": ("a", [0, 1]), "b": ("b", [0, 1])}
    a, b = dict(pg=("a", "a"), pg_id=1), dict(pg=("b", "b"), pg_id=2)
    job = {0: [entry(0, 1, state="started", created=ISSUED, **a), entry(1, 1, created=ISSUED + 1000, **b)],
           1: [entry(0, 1, state="started", created=ISSUED, **b), entry(1, 1, created=ISSUED + 1000, **a)]}
    waits, roots = _roots({r: dump(es, world=2, groups=groups) for r, es in job.items()}, seen_after_s=10)
    assert sorted((w.rank, w.group.name, w.left) for w in waits) == [(0, "nccl:a", (1,)), (1, "nccl:b", (0,))]
    assert [(r.kind, r.ranks) for r in roots] == [(CYCLE, (0, 1))]


def test_a_ring_of_thousands_of_ranks_waiting_on_each_other_is_one_cycle():
    # each rank waits through its own hub for the next one: a wait-for graph 8000 nodes deep, walked
    # without recursion (the analysis no longer raises the interpreter's limit, which is process-wide)
    n = 4000
    hubs = {("g", r): ((r + 1) % n,) for r in range(n)}
    out = {r: {("g", r): None} for r in range(n)}
    assert _closed_cycles(hubs, out) == [set(range(n))]
    out[n - 1] = {}  # the last rank waits for nobody: a chain, not a cycle
    assert _closed_cycles(hubs, out) == []
