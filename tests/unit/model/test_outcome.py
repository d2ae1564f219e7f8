"""The one outcome rule, per recorder kind, and the analysis columns agreeing with it on both decode paths.

gloo retires finished and failed work alike (retired: over). Legacy NCCL and its vendor variants record
events: retired without completing is timed out. Every other backend is recorded by torch 2.15's
FlightRecorderHook: completed is done, unretired is pending, retired and scheduled proves only that the
op was issued (a backend without completion hooks retires at issue). A dump whose ops name no backend
is read as NCCL where its entries show events, else as gloo.
"""

import pytest

from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.normalize import normalize
from frexport.model.dump import group_name
from frexport.model.outcome import Outcome, Recorder, classify, event_backends, outcome_of, recorder_of
from frexport.model.rank_trace import FINISHED, ISSUED, TIMED_OUT, build_rank_trace
from tests.support.synth import dump, entry

BACKENDS = ["nccl", "gloo", "mpi", "ucc", "somelib", "nccl2", ""]  # "": a profiling name without a prefix
HOOKED = ["mpi", "ucc", "somelib", "nccl2", "nccl-lazy"]


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
    events = event_backends(d.entries)
    return [outcome_of(e, events) for e in d.entries]


@pytest.mark.parametrize(("recorder", "state", "retired", "outcome"), [
    (Recorder.GLOO, "scheduled", False, Outcome.PENDING),
    (Recorder.GLOO, "scheduled", True, Outcome.RETIRED),
    (Recorder.EVENTS, "scheduled", False, Outcome.PENDING),
    (Recorder.EVENTS, "started", False, Outcome.PENDING),
    (Recorder.EVENTS, "completed", True, Outcome.COMPLETED),
    (Recorder.EVENTS, "scheduled", True, Outcome.TIMED_OUT),
    (Recorder.EVENTS, "started", True, Outcome.TIMED_OUT),
    (Recorder.HOOK, "scheduled", False, Outcome.PENDING),  # with completion hooks: in flight or hung
    (Recorder.HOOK, "completed", True, Outcome.COMPLETED),
    (Recorder.HOOK, "scheduled", True, Outcome.ISSUED),  # retired at issue: nothing says how it went
])
def test_what_an_entry_proves_per_recorder_kind(recorder, state, retired, outcome):
    assert classify(state, retired, recorder) is outcome


def test_the_recorder_kind_comes_from_the_backend_and_for_unnamed_ops_from_the_data():
    assert recorder_of("gloo", frozenset()) is Recorder.GLOO
    for name in ("nccl", "nccl-legacy", "xccl", "hccl", "rccl"):
        assert recorder_of(name, frozenset()) is Recorder.EVENTS
    for name in HOOKED:  # whatever its entries show: torch records no other backend by itself
        assert recorder_of(name, frozenset({name})) is Recorder.HOOK
    assert recorder_of("", frozenset()) is Recorder.GLOO
    assert recorder_of("", frozenset({""})) is Recorder.EVENTS


@pytest.mark.parametrize("backend", BACKENDS)
def test_completed_and_in_flight_read_the_same_everywhere(backend):
    assert _outcomes(backend, [("completed", True), ("completed", False)]) == [Outcome.COMPLETED] * 2
    assert _outcomes(backend, [("scheduled", False)]) == [Outcome.PENDING]
    assert _outcomes(backend, [("started", False)]) == [Outcome.PENDING]


@pytest.mark.parametrize("backend", ["nccl", "ncclx", "rccl", "xccl", "hccl"])
def test_completion_tracking_backend_retired_without_completing_timed_out(backend):
    assert _outcomes(backend, [("scheduled", True)]) == [Outcome.TIMED_OUT]
    assert _outcomes(backend, [("started", True)]) == [Outcome.TIMED_OUT]


@pytest.mark.parametrize("backend", ["gloo", ""])
def test_gloo_retired_is_over_not_timed_out(backend):
    assert _outcomes(backend, [("scheduled", True), ("scheduled", False)]) == [Outcome.RETIRED, Outcome.PENDING]


@pytest.mark.parametrize("backend", HOOKED)
def test_a_hooked_backend_retired_at_issue_proves_only_the_issue(backend):
    # the defects this rule fixes: retired at issue read as over (a hang read as healthy), and, in a
    # mixed group of nccl2 that falls back to retiring at issue, as timed out
    assert _outcomes(backend, [("scheduled", True), ("scheduled", False)]) == [Outcome.ISSUED, Outcome.PENDING]
    assert _outcomes(backend, [("completed", True), ("scheduled", True)]) == [Outcome.COMPLETED, Outcome.ISSUED]


def test_a_dump_without_backend_names_that_shows_events_reads_as_nccl():
    assert _outcomes("", [("completed", True), ("scheduled", True)]) == [Outcome.COMPLETED, Outcome.TIMED_OUT]
    assert _outcomes("", [("started", True)]) == [Outcome.TIMED_OUT]


def test_outcome_values_are_the_metric_labels():
    assert [o.value for o in Outcome] == ["pending", "completed", "retired", "timed_out", "issued"]
    assert [o.settled for o in Outcome] == [False, True, True, True, True]
    assert [o.done for o in Outcome] == [False, True, True, False, False]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("states", [[("scheduled", True)] * 3, [("completed", True), ("scheduled", True)],
                                    [("started", False), ("scheduled", True)], [("scheduled", False)] * 2])
def test_analysis_flags_follow_the_rule_on_both_decode_paths(backend, states):
    """The analysis waits on a timed-out or pending op and not on a done one, as metrics and spans say;
    of the ops known only to be issued, on the newest alone (the rank's frontier)."""
    raw = _raw(backend, states)
    expected = _outcomes(backend, states)
    general = build_rank_trace(normalize(raw, "x", "pickle", rank=0, keep_frames=False))
    fast = trace_from_raw(raw, "x", "pickle", 0, None, 0)
    assert fast == general
    flags = list(general.groups[group_name("0", backend)].flags)
    frontier = len(expected) - 1
    assert [bool(f & FINISHED) for f in flags] == \
        [o.done or (o is Outcome.ISSUED and i < frontier) for i, o in enumerate(expected)]
    assert [bool(f & TIMED_OUT) for f in flags] == [o is Outcome.TIMED_OUT for o in expected]
    assert [bool(f & ISSUED) for f in flags] == [o is Outcome.ISSUED for o in expected]


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
    """A rank read from gloo's recorder and nccl2's (model/recorders.py). gloo's retired ops are over;
    nccl2's completed one is done, its retired-at-issue one (a group whose default backend pushes no
    completion) only issued: in the live state and in the analysis alike."""
    from frexport.live.state import LiveState
    from frexport.model.rank_trace import FINISHED, build_rank_trace
    from frexport.model.recorders import merge_recorders

    gloo = normalize(_raw("gloo", [("scheduled", True)] * 3), "g", "json", rank=0)
    nccl2 = normalize(_raw("nccl2", [("completed", True), ("scheduled", True)]), "n", "json", rank=0)
    merged = merge_recorders({"gloo": gloo, "nccl2": nccl2})
    events = event_backends(merged.entries)
    assert [outcome_of(e, events) for e in merged.entries] == \
        [Outcome.RETIRED] * 3 + [Outcome.COMPLETED, Outcome.ISSUED]
    seen = LiveState().ingest(merged, "x", 10**18)
    assert [ev.outcome for ev in seen] == [Outcome.RETIRED] * 3 + [Outcome.COMPLETED, Outcome.ISSUED]
    trace = build_rank_trace(merged)
    assert all(f & FINISHED for f in trace.groups["0"].flags)
    assert trace.groups["nccl2:0"].flags[-1] & ISSUED and not trace.groups["nccl2:0"].flags[-1] & FINISHED


def test_a_rank_may_wait_in_its_pending_and_timed_out_ops_and_each_issue_only_groups_newest():
    from frexport.model.outcome import waited_in
    from tests.support.synth import hook_entry

    raw = dump([entry(0, 1, backend="nccl"), entry(1, 2, backend="nccl", state="scheduled", retired=True),
                entry(2, 3, backend="nccl", state="scheduled", retired=False)]
               + [hook_entry(3 + i, i + 1, push=False, backend="ucc") for i in range(3)], world=1)
    d = normalize(raw, "x", "pickle", rank=0)
    assert [(e.backend, e.collective_seq_id) for e in waited_in(d.entries)] == [("nccl", 2), ("nccl", 3), ("ucc", 3)]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_the_first_unsettled_entry_of_any_part_of_a_snapshot(compiled):
    """first_unsettled(entries, start, stop) against the rule read entry by entry, with model/_rows.c's loop
    and without it; values no decoder makes (a retired of 1, a state that is no str) go the Python way."""
    import random

    from frexport.model import outcome
    from frexport.model.outcome import first_unsettled, settled
    from tests.support.compiled import compiled_or_pure

    base = normalize(dump([entry(0, 1)], world=1), "x", "pickle", rank=0).entries[0]
    outcome._compiled_first()  # (looked up at the first call)
    rng = random.Random(11)
    with compiled_or_pure(outcome, "_compiled_first_fn", compiled):
        for _ in range(2000):
            n = rng.randint(0, 12)
            odd = rng.random() < 0.2
            # (a decoded state is its own str object, equal to the constant, not it)
            states = ["completed", "".join(["compl", "eted"]), "started", "scheduled"] + [None, 7] * odd
            entries = [base._replace(state=rng.choice(states),
                                     retired=rng.choice([True, False, None] + [1, 0] * odd)) for _ in range(n)]
            seq = entries if rng.random() < 0.5 else tuple(entries)
            start, stop = rng.randint(0, n + 2), rng.choice([None, rng.randint(0, n + 2)])
            want = next((i for i in range(start, n if stop is None else min(stop, n))
                         if not settled(entries[i].state, entries[i].retired)), None)
            assert first_unsettled(seq, start, stop) == want, (entries, start, stop)
            if not start and stop is None:
                assert first_unsettled(seq) == want
