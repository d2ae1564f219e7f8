"""Live state: entries counted once across overlapping polls, wraps counted, restarts start a new epoch."""

import pickle

from frexport.decode.read import decode_bytes
from frexport.live.state import LiveState
from tests.support.synth import T0, dump, entry


def _snap(entries, rank=0, at=T0, **kw):
    return decode_bytes(pickle.dumps(dump(entries, world=2, **kw), protocol=2), "x", rank=rank, dumped_at_ns=at)


def test_overlapping_polls_count_each_entry_once():
    state, events = LiveState(), []
    events.extend(state.ingest(_snap([entry(i, i + 1) for i in range(5)]), "s", T0))
    events.extend(state.ingest(_snap([entry(i, i + 1) for i in range(2, 8)], at=T0 + 1), "s", T0 + 1))
    assert [e.entry.record_id for e in events] == list(range(8))
    assert state.view().collectives[("default_pg", "all_reduce", "completed")] == 8


def test_pending_entry_counted_when_it_finishes():
    state, events = LiveState(), []
    events.extend(state.ingest(_snap([entry(0, 1), entry(1, 2, state="started")]), "s", T0))
    assert len(events) == 1
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.pending == {"all_reduce": (1, T0 + 1 * 100_000_000)} and g.last_completed == 1
    events.extend(state.ingest(_snap([entry(0, 1), entry(1, 2)], at=T0 + 5), "s", T0 + 5))
    assert [e.entry.record_id for e in events] == [0, 1] and events[1].observed_ns == T0 + 5
    assert state.view().ranks[0].groups["nccl:0"].last_completed == 2


def test_wrapped_away_entries_are_counted_as_dropped():
    state = LiveState()
    state.ingest(_snap([entry(i, i + 1) for i in range(3)]), "s", T0)
    state.ingest(_snap([entry(i, i + 1) for i in range(10, 13)], at=T0 + 1), "s", T0 + 1)
    assert state.view().ranks[0].dropped == 7


def test_restarted_rank_starts_a_new_epoch_without_double_counting():
    state, events = LiveState(), []
    events.extend(state.ingest(_snap([entry(i, i + 1) for i in range(5)]), "s", T0))
    later = T0 + 10**12
    events.extend(state.ingest(_snap([entry(i, i + 1, created=later + i) for i in range(3)], at=later), "s", later))
    rs = state.view().ranks[0]
    assert rs.epoch == 1 and rs.dropped == 0
    assert [(e.epoch, e.entry.record_id) for e in events] == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]


def test_older_snapshot_is_ignored_and_expiry_removes_ranks():
    state = LiveState()
    assert state.ingest(_snap([entry(0, 1)], at=T0 + 10), "s", T0 + 10)
    assert not state.ingest(_snap([entry(0, 1)], at=T0), "s", T0 + 11)
    assert state.expire(T0 + 10 + 5, after_ns=10) == []
    assert state.expire(T0 + 10**9, after_ns=10) == [0] and state.view().ranks == {}


def test_gone_process_group_expires_while_the_rank_stays():
    state = LiveState()
    both = [entry(0, 1), entry(1, 1, pg=("7", "tp"), pg_id=1)]
    state.ingest(_snap(both, at=T0), "s", T0)
    later = T0 + 100
    state.ingest(_snap([entry(0, 1), entry(2, 2)], at=later), "s", later)  # group 7 wrapped away
    assert set(state.view().ranks[0].groups) == {"nccl:0", "nccl:7"}  # its last values stay for a while...
    state.expire(T0 + 150, after_ns=200)
    assert set(state.view().ranks[0].groups) == {"nccl:0", "nccl:7"}
    state.expire(T0 + 201, after_ns=200)  # ...then the series go (last held at T0), the rank stays
    assert set(state.view().ranks[0].groups) == {"nccl:0"}


def test_outcome_follows_the_one_rule_per_backend():
    """A retired, never-started op is timed out only where the backend reports completion: the same
    rule as the analysis (an mpi/ucc/gloo op that retired is over, not timed out)."""
    for backend, expected in (("nccl", "timed_out"), ("gloo", "retired"), ("mpi", "retired"), ("ucc", "retired"),
                              ("custom", "retired")):
        state = LiveState()
        entries = [entry(i, i + 1, backend=backend, state="scheduled", retired=True, duration_ms=None)
                   for i in range(3)]
        events = state.ingest(_snap(entries), "s", T0)
        assert {e.outcome for e in events} == {expected}, backend
        assert state.view().collectives == {("default_pg", "all_reduce", expected): 3}, backend


def test_unseen_entries_are_those_the_full_loop_would_look_at():
    """`_unseen` (bisection over a dump in record order) picks exactly the entries past the last
    record seen or still pending, in their order; out of order it looks at all."""
    import random
    from types import SimpleNamespace

    from frexport.live.state import _unseen

    rng = random.Random(7)
    for _ in range(2000):
        rids = sorted(rng.sample(range(60), rng.randint(0, 20)))
        if rng.random() < 0.1:
            rng.shuffle(rids)
        entries = tuple(SimpleNamespace(record_id=r) for r in rids)
        max_record = rng.randint(-1, 60)
        pending = set(rng.sample(range(60), rng.randint(0, 6)))
        want = [e for e in entries if not (e.record_id <= max_record and e.record_id not in pending)]
        got = [e for e in _unseen(entries, max_record, pending)
               if not (e.record_id <= max_record and e.record_id not in pending)]
        assert got == want
        if rids == sorted(rids) and max_record >= 0:
            assert len(list(_unseen(entries, max_record, pending))) == len(want)


def test_a_state_that_does_not_count_keeps_only_the_latest_snapshots():
    """The job-level view's state: its ranks' counts come from their pods' sidecars."""
    state = LiveState(count=False)
    first, newer = _snap([entry(0, 1)], at=T0 + 10), _snap([entry(0, 1), entry(1, 2)], at=T0 + 20)
    assert state.ingest(first, "s", T0 + 10) == [] and state.ingest(newer, "s", T0 + 20) == []
    assert state.latest_dumps() == {0: newer}
    state.ingest(_snap([entry(0, 1)], at=T0), "s", T0 + 21)  # an older snapshot changes nothing
    assert state.latest_dumps() == {0: newer} and state.view().collectives == {}
    assert state.expire(T0 + 10**9, after_ns=10) == [0] and state.latest_dumps() == {}


def test_the_same_entries_re_stamped_by_a_status_read_count_nothing_and_stay_held():
    """Status first (sources/entry_schedule.py): an unmoved rank's last entries come again with the
    status's time. Nothing is counted twice, and its groups and counted pairs stay held (no expiry)."""
    import dataclasses

    from tests.support.fr_events import snapshot

    state = LiveState()
    d = snapshot(0, 0, 5, T0 + 10**9)
    assert len(state.ingest(d, "s", T0 + 10**9)) == 5
    later = T0 + 3600 * 10**9
    assert state.ingest(dataclasses.replace(d, dumped_at_ns=later), "s", later) == []
    assert state.view().collectives == {("default_pg", "all_reduce", "completed"): 5}
    assert state.expire(later + 10**9, 600 * 10**9) == []  # seen just now: nothing expires
    view = state.view()
    assert view.ranks[0].last_seen_ns == later and set(view.ranks[0].groups) == {"nccl:0"}
    assert view.collectives == {("default_pg", "all_reduce", "completed"): 5}
