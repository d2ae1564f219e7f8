"""The wait-for graph of a hang: who waits for whom, and which ranks are the root causes."""

from frexport.analysis.hang import CYCLE, IDLE, INSIDE, NO_DUMP, find_waits, root_causes
from frexport.analysis.membership import build_membership
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job
from tests.support.synth import traces as decode

STALL_AFTER_NS = 5 * 10**9
ISSUED = T0 + 10 * STEP_NS  # when the stuck collective (seq 11) was issued


def _roots(dumps: dict[int, dict], seen_after_s: float, known: set[int] | None = None):
    by_rank = decode(dumps, seen_at_ns=ISSUED + int(seen_after_s * 1e9))
    waits = find_waits(by_rank, build_membership(by_rank, known), STALL_AFTER_NS)
    return waits, root_causes(waits, by_rank, STALL_AFTER_NS)


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
    assert root.wait.group.name == "5"  # named by the group that waits for rank 3 alone


def test_collectives_issued_in_different_orders_across_groups_are_a_cycle():
    job = {0: [entry(0, 1, state="started", created=ISSUED)],
           1: [entry(0, 1, pg=("5", "pp"), pg_id=1, state="started", created=ISSUED)]}
    _, roots = _roots({r: dump(es, world=2, groups={"5": ("pp", [0, 1])}) for r, es in job.items()},
                      seen_after_s=10)
    assert [(r.kind, r.ranks) for r in roots] == [(CYCLE, (0, 1))]
