"""The one outcome rule, per backend, and the analysis columns agreeing with it on both decode paths.

A backend that tracks completion (NCCL and its variants, or any dump whose entries show started /
completed states) reports a retired-but-not-completed entry as timed out; every other backend
(gloo, MPI, UCC, an unknown or missing prefix) retires finished and failed work alike.
"""

import pytest

from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.normalize import normalize
from frexport.model.dump import group_name
from frexport.model.outcome import Outcome, outcome_of, tracks_completion
from frexport.model.rank_trace import FINISHED, TIMED_OUT, build_rank_trace
from tests.support.synth import dump, entry

BACKENDS = ["nccl", "gloo", "mpi", "ucc", "somelib", ""]  # "": a profiling name without a prefix
NOT_TRACKING = ["gloo", "mpi", "ucc", "somelib", ""]


def _raw(backend: str, states: list[tuple[str, bool]]) -> dict:
    entries = []
    for i, (state, retired) in enumerate(states):
        e = entry(i, i + 1, state=state, retired=retired, backend=backend or "x")
        if not backend:
            e["profiling_name"] = "all_reduce"
        entries.append(e)
    return dump(entries, world=1)


def _outcomes(backend: str, states: list[tuple[str, bool]]) -> list[Outcome]:
    d = normalize(_raw(backend, states), "x", "pickle", rank=0)
    assert all(e.backend == backend for e in d.entries)
    tracks = tracks_completion(d.entries)
    return [outcome_of(e, tracks) for e in d.entries]


@pytest.mark.parametrize("backend", BACKENDS)
def test_completed_and_in_flight_read_the_same_everywhere(backend):
    assert _outcomes(backend, [("completed", True), ("completed", False)]) == [Outcome.COMPLETED] * 2
    assert _outcomes(backend, [("scheduled", False)]) == [Outcome.PENDING]
    assert _outcomes(backend, [("started", False)]) == [Outcome.PENDING]


@pytest.mark.parametrize("backend", ["nccl", "ncclx", "rccl", "xccl", "hccl"])
def test_completion_tracking_backend_retired_without_completing_timed_out(backend):
    assert _outcomes(backend, [("scheduled", True)]) == [Outcome.TIMED_OUT]
    assert _outcomes(backend, [("started", True)]) == [Outcome.TIMED_OUT]


@pytest.mark.parametrize("backend", NOT_TRACKING)
def test_backend_without_completion_events_retired_is_over_not_timed_out(backend):
    # the defect this rule fixes: `mpi:all_reduce` retired + scheduled was timed_out in the metrics
    assert _outcomes(backend, [("scheduled", True), ("scheduled", False)]) == [Outcome.RETIRED, Outcome.PENDING]


@pytest.mark.parametrize("backend", NOT_TRACKING)
def test_a_dump_showing_completion_states_tracks_completion_whatever_its_prefix(backend):
    # one entry completed: this recorder reports completion, so a retired, never-completed one timed out
    assert _outcomes(backend, [("completed", True), ("scheduled", True)]) == [Outcome.COMPLETED, Outcome.TIMED_OUT]
    assert _outcomes(backend, [("started", True)]) == [Outcome.TIMED_OUT]


def test_outcome_values_are_the_metric_labels():
    assert [o.value for o in Outcome] == ["pending", "completed", "retired", "timed_out"]
    assert [o.settled for o in Outcome] == [False, True, True, True]
    assert [o.done for o in Outcome] == [False, True, True, False]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("states", [[("scheduled", True)] * 3, [("completed", True), ("scheduled", True)],
                                    [("started", False), ("scheduled", True)], [("scheduled", False)] * 2])
def test_analysis_flags_follow_the_rule_on_both_decode_paths(backend, states):
    """The analysis waits on a timed-out or pending op and not on a done one, as metrics and spans say."""
    raw = _raw(backend, states)
    expected = _outcomes(backend, states)
    general = build_rank_trace(normalize(raw, "x", "pickle", rank=0, keep_frames=False))
    fast = trace_from_raw(raw, "x", "pickle", 0, None, 0)
    assert fast == general
    flags = list(general.groups[group_name("0", backend)].flags)
    assert [bool(f & FINISHED) for f in flags] == [o.done for o in expected]
    assert [bool(f & TIMED_OUT) for f in flags] == [o is Outcome.TIMED_OUT for o in expected]


def test_a_live_window_keeps_the_older_unfinished_entries_only():
    """build_rank_trace(tail=N): the newest N entries plus every older one not finished."""
    import random

    from frexport.model.outcome import first_unsettled

    rng = random.Random(3)
    for _ in range(200):
        states = [(rng.choice(["completed", "started", "scheduled"]), rng.choice([True, False, None]))
                  for _ in range(rng.randint(0, 30))]
        raw = dump([entry(i, i + 1, state=s, retired=r) for i, (s, r) in enumerate(states)], world=1)
        d = normalize(raw, "x", "pickle", rank=0)
        first = first_unsettled(d.entries)
        assert first == next((i for i, e in enumerate(d.entries) if not e.finished), None)
        tail = rng.randint(1, 10)
        want = [e for e in d.entries[:-tail] if not e.finished] + list(d.entries[-tail:]) \
            if len(d.entries) > tail else list(d.entries)
        assert build_rank_trace(d, tail=tail).n_entries == len(want)


def test_in_one_rank_of_two_recorders_each_backend_keeps_its_own_rule():
    """A rank read from gloo's recorder and nccl2's (model/recorders.py): nccl2 reports completion, gloo
    does not. gloo's retired ops are over, not timed out, and nccl2's retired-without-completing one
    timed out, in the live state and in the analysis alike."""
    from frexport.live.state import LiveState
    from frexport.model.rank_trace import FINISHED, TIMED_OUT, build_rank_trace
    from frexport.model.recorders import merge_recorders

    gloo = normalize(_raw("gloo", [("scheduled", True)] * 3), "g", "json", rank=0)
    nccl2 = normalize(_raw("nccl2", [("completed", True), ("scheduled", True)]), "n", "json", rank=0)
    merged = merge_recorders({"gloo": gloo, "nccl2": nccl2})
    tracks = tracks_completion(merged.entries)
    assert [outcome_of(e, tracks) for e in merged.entries] == \
        [Outcome.RETIRED] * 3 + [Outcome.COMPLETED, Outcome.TIMED_OUT]
    events = LiveState().ingest(merged, "x", 10**18)
    assert [ev.outcome for ev in events] == [Outcome.RETIRED] * 3 + [Outcome.COMPLETED, Outcome.TIMED_OUT]
    trace = build_rank_trace(merged)
    assert all(f & FINISHED for f in trace.groups["0"].flags)
    assert trace.groups["nccl2:0"].flags[-1] & TIMED_OUT
