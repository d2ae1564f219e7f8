"""A dump's shapes cannot make one rank's trace cost what the whole live analysis may (issue 38,
point 3): a hostile pickle whose 256 entries are one dict (pickle's memo) with 65,536 shapes kept the
sidecar's analysis busy for a minute (179 CPU-s here) while the honest ranks went unpolled."""

from dataclasses import replace

from frexport.decode.normalize import normalize
from frexport.model.outcome import event_backends
from frexport.model.rank_trace import (
    FINISHED,
    MAX_COALESCED_SHAPES,
    MAX_KNOWN_OUTCOMES,
    _shapes,
    build_rank_trace,
    known_outcomes,
    outcome_flags,
)
from tests.support.synth import dump, entry


class _CountedShapes(tuple):
    """The shapes of an entry, counting how often they are hashed (all of them, each time)."""

    hashed = 0

    def __hash__(self) -> int:
        _CountedShapes.hashed += 1
        return super().__hash__()


def _hostile():
    one = normalize(dump([entry(0, 1, sizes=tuple((i % 7 + 1,) for i in range(65536)))], world=1), "x", "pickle",
                    rank=0).entries[0]
    shared = one._replace(input_sizes=_CountedShapes(one.input_sizes))
    return replace(normalize(dump([], world=1), "x", "pickle", rank=0), entries=(shared,) * 256)


def test_one_entry_object_repeated_is_hashed_once_and_its_merge_is_bounded():
    _CountedShapes.hashed = 0
    trace = build_rank_trace(_hostile())
    assert _CountedShapes.hashed <= 4, _CountedShapes.hashed  # a few times, not once per row (256 x 65,536 shapes)
    g = trace.groups["nccl:0"]
    assert len(g.seq) == 1  # one coalesced group of 256 ops
    merged = trace.signatures[g.sig[0]]
    # one op holds twice the bound already (65,536 inputs and outputs): nothing is merged into it, where
    # 255 merges copied and hashed a signature growing to 33 million shapes
    assert len(merged) == 1 and _shapes(merged) == 2 * MAX_COALESCED_SHAPES


def test_outcomes_are_shared_by_every_trace_and_bounded_against_a_dump_that_varies_its_backends():
    """The outcomes' flags are one table for every trace of a recorder kind (rank_trace.known_outcomes):
    a dump whose every entry names another backend cannot grow it past its bound, and the rows past it
    still get their flags."""
    n = MAX_KNOWN_OUTCOMES + 200
    d = normalize(dump([entry(i, i + 1, backend=f"b{i}", state="scheduled" if i % 2 else "completed")
                        for i in range(n)], world=1), "x", "pickle", rank=0)
    events = event_backends(d.entries)
    trace = build_rank_trace(d)
    assert len(known_outcomes(events)) <= MAX_KNOWN_OUTCOMES
    flags = [f for g in trace.groups.values() for f in g.flags]
    want = [outcome_flags(e.state, e.retired, e.backend, events) for e in d.entries]
    assert [f & FINISHED for f in flags] == [f & FINISHED for f in want]
