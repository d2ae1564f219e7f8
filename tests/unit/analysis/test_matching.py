"""Matching one group's collectives across ranks by collective_seq_id, and naming a disagreement."""

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from frexport.analysis import matching
from frexport.analysis.engine import analyze
from frexport.analysis.matching import match_group, mismatch_kind
from frexport.model.rank_trace import GroupTrace, RankTrace
from frexport.model.signature import OpSignature, canonical
from tests.support.compiled import compiled_or_pure
from tests.support.examples import examples
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, traces


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


# --- the compiled match (analysis/_matching.c) against the Python it replaces -------------------------------------

def _column(draw, first: int) -> list[int]:
    """A member's seq column: usually a contiguous run, sometimes with gaps, out of order or repeated."""
    n = draw(st.integers(0, 12))
    shape = draw(st.sampled_from(["run", "run", "gaps", "any"]))
    if shape == "run":
        return list(range(first, first + n))
    if shape == "gaps":
        return sorted(draw(st.sets(st.integers(first, first + 20), max_size=n)))
    return draw(st.lists(st.integers(first - 3, first + 15), max_size=n))


@st.composite
def _groups(draw) -> dict[int, tuple[GroupTrace, bytes]]:
    ranks = draw(st.lists(st.integers(-3, 40), min_size=0, max_size=6, unique=True))
    cols = {}
    for r in ranks:
        seqs = _column(draw, draw(st.integers(0, 8)))
        ids = bytes(draw(st.lists(st.integers(0, 2), min_size=len(seqs), max_size=len(seqs))))
        cols[r] = (GroupTrace("1", "tp", 1, seq=array("q", seqs), sig=array("i", list(ids))), ids)
    return cols


def _outcome(cols: dict, compiled: bool) -> tuple:
    with compiled_or_pure(matching, "_compiled", compiled):
        result = match_group(cols)
    return result.matched, [(d.seq, list(d.votes.items())) for d in result.disagreements]


@settings(max_examples=examples(400), deadline=None)
@given(_groups())
def test_the_compiled_match_counts_and_votes_as_the_python_does(cols):
    assert _outcome(cols, compiled=True) == _outcome(cols, compiled=False)


def test_the_compiled_match_leaves_what_it_does_not_read_to_python():
    g = GroupTrace("1", "tp", 1, seq=array("q", [1, 2, 3]), sig=array("i", [0, 0, 0]))
    assert matching._compiled.match_group({0: (g, b"\0\0\0"), 1: (g, array("l", [0, 0, 0]))}, GroupTrace) \
        is NotImplemented  # ids not bytes (no byte tables: the engine's array path)
    assert matching._compiled.match_group({0: (g, b"\0\0")}, GroupTrace) is NotImplemented  # a column cut short
    big = GroupTrace("1", "tp", 1, seq=array("q", [2**62]), sig=array("i", [0]))
    assert matching._compiled.match_group({0: (big, b"\0"), 1: (big, b"\0")}, GroupTrace) is NotImplemented
    assert _outcome({0: (big, b"\0"), 1: (big, b"\1")}, compiled=False) == (0, [(2**62, [(0, 0), (1, 1)])])


def _split_job() -> dict[int, dict]:
    """Six ranks; group "1" is [0, 1, 2] to ranks 0-2 and [0, 3, 4, 5] to ranks 3-5 (two groups of one name, rank 0
    listed in both, in the first by its own config), rank 2 never used it, rank 5 disagrees at seq 3.
    Ranks 3-5 issue their group "1" ops first: their signatures are numbered in another order than rank 0's
    (the engine's id tables translate them)."""
    dumps = {}
    for r in range(6):
        default = [entry(i, i + 1, sizes=((2,),)) for i in range(5)]
        tp = [] if r == 2 else [entry(5 + i, i + 1, pg=("1", "tp"), pg_id=1, sizes=((8,),) if (r, i) == (5, 2)
                                      else ((6,),)) for i in range(4)]
        es = default + tp if r < 3 else tp + default
        for i, e in enumerate(es):
            e.update(record_id=i, time_created_ns=T0 + i * STEP_NS + r)
        dumps[r] = dump(es, world=6, groups={"1": ("tp", [0, 1, 2] if r < 3 else [0, 3, 4, 5])})
    return dumps


def test_a_split_groups_disagreement_is_named_either_way():
    for compiled in (True, False):
        with compiled_or_pure(matching, "_compiled", compiled):
            findings = analyze(list(traces(_split_job()).values())).findings
        assert [(f.kind, f.culprit_ranks, f.collective_seq_id) for f in findings if f.pg_name == "nccl:1"] == [
            ("size_mismatch", (5,), 3)]
