"""Matching one group's collectives across ranks by collective_seq_id, and naming a disagreement."""

from array import array

from frexport.analysis.matching import match_group, mismatch_kind
from frexport.model.rank_trace import RankTrace
from frexport.model.signature import OpSignature, canonical
from tests.support.synth import dump, entry, healthy_job, traces


def _cols(by_rank: dict[int, RankTrace], group: str = "nccl:0") -> dict:
    """Each rank's column of canonical signature ids, numbered across ranks (as the engine does)."""
    ids: dict[tuple, int] = {}
    return {r: (t.groups[group], array("l", (ids.setdefault(canonical(t.signatures[i]), len(ids))
                                             for i in t.groups[group].sig)))
            for r, t in by_rank.items()}


def _match(job: dict[int, list[dict]]):
    return match_group(_cols(traces({r: dump(es, world=len(job)) for r, es in job.items()})))


def test_agreeing_ranks_match_every_collective():
    result = _match(healthy_job(world=4, steps=10))
    assert (result.matched, result.disagreements) == (10, [])


def test_the_odd_rank_out_is_outvoted():
    job = healthy_job(world=4, steps=10)
    job[3][6] = entry(6, 7, sizes=((8, 4),), created=job[3][6]["time_created_ns"])
    result = _match(job)
    [d] = result.disagreements
    normal = {c for r, c in d.votes.items() if r != 3}
    assert d.seq == 7 and len(normal) == 1 and d.votes[3] not in normal and sorted(d.votes) == [0, 1, 2, 3]
    assert result.matched == 9


def test_a_collective_that_left_a_ring_buffer_is_not_held_against_the_rank():
    job = healthy_job(world=3, steps=12)
    job[1] = job[1][5:]  # rank 1 only holds seq 6..12
    result = _match(job)
    assert (result.matched, result.disagreements) == (12, [])


def test_ranks_whose_windows_do_not_overlap_the_largest_still_compare():
    """Seq ids outside the largest rank's window are compared among the ranks that hold them."""
    job = healthy_job(world=3, steps=12)
    job[0] = job[0][:8]  # rank 0, the largest window, holds seq 1..8; ranks 1 and 2 hold 6..12
    job[1] = job[1][5:]
    job[2] = job[2][5:]
    job[2][4] = entry(9, 10, op="broadcast", created=job[2][4]["time_created_ns"])
    result = _match(job)
    assert [(d.seq, sorted(d.votes)) for d in result.disagreements] == [(10, [1, 2])]
    assert result.matched == 6  # seq 6..8 by all, 9..12 by ranks 1 and 2, less the disagreement (1..5: rank 0 alone)


def _sig(op="all_reduce", sizes=((4, 4),), dtypes=("Float",), out=None):
    out = sizes if out is None else out
    return (OpSignature(op, sizes, out, dtypes * len(sizes), dtypes * len(out)),)


def test_mismatch_kind_in_pytorchs_order_op_then_sizes_then_dtypes():
    assert mismatch_kind(_sig(), _sig("broadcast", sizes=((8,),), dtypes=("Half",))) == "desync"
    assert mismatch_kind(_sig(), _sig() + _sig()) == "desync"  # a coalesced group of another length
    assert mismatch_kind(_sig(), _sig(sizes=((8, 4),), dtypes=("Half",))) == "size_mismatch"
    assert mismatch_kind(_sig(), _sig(dtypes=("BFloat16",))) == "dtype_mismatch"


def test_sizes_that_may_differ_are_not_a_mismatch():
    """all_to_all splits differ per rank by design; the root of a gather receives, the others do not."""
    a2a = _sig("all_to_all", sizes=((3,),), out=((5,),))
    assert canonical(a2a) == canonical(_sig("all_to_all", sizes=((7,),), out=((1,),)))
    assert canonical(_sig("gather", out=((4, 4), (4, 4)))) == canonical(_sig("gather", out=()))
    assert canonical(_sig("all_reduce", sizes=((3,),))) != canonical(_sig("all_reduce", sizes=((5,),)))
