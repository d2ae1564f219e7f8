"""unseen.fold_blocked on its own: a root cause whose ranks the stacks show inside an unrecorded op is
folded under the one other root cause only where what it waits for is behind that root cause (the real
16-rank job is tests/unit/analysis/test_pipeline_hang.py)."""

from frexport.analysis.findings import Finding
from frexport.analysis.unseen import Blocked, fold_blocked
from frexport.model.call_site import Frame

SITE = Frame("stage0", "/job/pp.py", 26)


def _root(culprit: int, blocked: tuple[int, ...], group: str) -> Finding:
    return Finding("missing_rank", group, "dp", 4, (culprit,), blocked, "all_reduce", "pp.py:44 <module>",
                   f"rank {culprit} has not issued all_reduce", root_cause=True, time_ns=culprit, certain=False)


def _recv(rank: int, peer: int | None) -> Blocked:
    return Blocked(rank, "recv", SITE, peer)


def test_a_rank_in_recv_from_a_blocked_rank_is_a_consequence():
    stuck, fed = _root(9, (8, 10, 11), "3"), _root(0, (4,), "5")
    out = fold_blocked([stuck, fed], {0: _recv(0, 8)})
    assert [f.culprit_ranks for f in out] == [(9,)]
    assert out[0].blocked_ranks == (0, 4, 8, 10, 11)
    (c,) = out[0].consequences
    assert (c.culprit_ranks, c.blocked_ranks, c.root_cause) == ((), (0, 4), False)
    assert c.message == ("rank 0 waits in torch.distributed recv (from rank 8, blocked too) at /job/pp.py:26 stage0: "
                         "blocked where the recorder does not show it, not a culprit; rank 4 waits for it in "
                         "all_reduce (collective 4 of group 5 (dp))")


def test_a_rank_whose_peer_is_not_behind_the_root_cause_stays_a_root_cause():
    stuck, fed = _root(9, (8, 10, 11), "3"), _root(0, (4,), "5")
    assert fold_blocked([stuck, fed], {0: _recv(0, 12)}) == [stuck, fed]  # rank 12 is neither 9 nor blocked by it


def test_nothing_is_folded_between_two_other_root_causes():
    roots = [_root(9, (8,), "3"), _root(13, (12,), "4"), _root(0, (4,), "5")]
    assert fold_blocked(roots, {0: _recv(0, None)}) == roots


def test_without_a_peer_the_consequence_says_so():
    out = fold_blocked([_root(9, (8,), "3"), _root(0, (4,), "5")], {0: _recv(0, None)})
    assert "(peer not known)" in out[0].consequences[0].message
