"""Live state: entries counted once across overlapping polls, wraps counted, restarts start a new epoch."""

import pickle
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frexport.decode.read import decode_bytes
from frexport.live.state import GroupProgress, LiveState
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


def test_without_events_the_counts_progress_and_pending_are_the_same():
    """serve makes no events unless spans are on (traces.enabled): nothing else may change."""
    snaps = [_snap([entry(0, 1), entry(1, 2, state="started")]), _snap([entry(0, 1), entry(1, 2), entry(2, 3,
             state="scheduled")], at=T0 + 5), _snap([entry(i, i + 1, duration_ms=2.0) for i in range(1, 6)], at=T0 + 9)]
    views = []
    for events in (True, False):
        state = LiveState(events=events)
        made = [e for s in snaps for e in state.ingest(s, "s", s.dumped_at_ns)]
        assert bool(made) is events
        v = state.view()
        views.append((v.collectives, {k: (h.counts, h.count) for k, h in v.durations.items()},
                      {n: (g.last_enqueued, g.last_completed, g.pending) for n, g in v.ranks[0].groups.items()}))
    assert views[0] == views[1] and views[0][0]


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
    """A retired, never-completed op is timed out on NCCL, over on gloo, and only issued on a backend
    torch 2.15 records with its hook (mpi, ucc, out-of-tree): the same rule as the analysis."""
    for backend, expected in (("nccl", "timed_out"), ("gloo", "retired"), ("mpi", "issued"), ("ucc", "issued"),
                              ("custom", "issued")):
        state = LiveState()
        entries = [entry(i, i + 1, backend=backend, state="scheduled", retired=True, duration_ms=None)
                   for i in range(3)]
        events = state.ingest(_snap(entries), "s", T0)
        assert {e.outcome for e in events} == {expected}, backend
        assert state.view().collectives == {("default_pg", "all_reduce", expected): 3}, backend


def test_only_an_op_proven_over_moves_last_completed_or_gives_a_duration():
    """Ops a hook retired at issue (no completion push) are not completed ones: the group's last
    completed collective is unknown, not its last issued one. A timed-out NCCL op is where the rank is
    stuck: pending, not completed. A hook's completed op (nccl2) is done, with its own duration."""
    from tests.support.synth import hook_entry

    state = LiveState()
    state.ingest(_snap([hook_entry(i, i + 1, push=False, backend="ucc") for i in range(3)]), "s", T0)
    g = state.view().ranks[0].groups["ucc:0"]
    assert g.current() == (3, None, None) and g.pending == {} and state.view().durations == {}

    state = LiveState()
    entries = [entry(0, 1, backend="nccl"), entry(1, 2, backend="nccl", state="started", retired=True)]
    state.ingest(_snap(entries), "s", T0)
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.current() == (2, 2, 1) and g.pending == {"all_reduce": (1, entries[1]["time_created_ns"])}

    state = LiveState()
    entries = [hook_entry(i, i + 1, push=True, duration_ms=2.5) for i in range(2)] + [hook_entry(2, 3, push=True,
                                                                                                 done=False)]
    state.ingest(_snap(entries), "s", T0)
    g = state.view().ranks[0].groups["nccl2:0"]
    assert g.current()[0] == 3 and g.current()[2] == 2 and set(g.pending) == {"all_reduce"}
    h = state.view().durations[("default_pg", "all_reduce")]
    assert h.count == 2 and h.total == pytest.approx(0.005)


def test_durations_of_mixed_runs_land_where_each_op_alone_would():
    """The histogram takes a run of one pair's ops at once: each still lands in the first bucket whose
    bound is at least its duration (duration_ms, else discovered start to completion, else none), of its
    own pair; a pending op and one beyond the last bound give no bucket, the latter still counted."""
    from bisect import bisect_left

    from frexport.live.state import DURATION_BUCKETS

    rng = random.Random(7)
    entries, want = [], Counter()
    for i in range(400):
        op = ("all_reduce", "broadcast")[i // 50 % 2]  # runs of 50 of one pair
        # runs of one timing (as NCCL with or without timing writes them) and mixed ones; a 0 ms duration
        # is the op's, whatever its discovered times say (5 s here)
        style = (("ms", "zero"), ("discovered", "zero"), ("ms", "zero", "discovered", "untimed", "pending", "huge"))
        kind = rng.choice(style[i // 50 % 3]) if rng.random() < 0.2 else style[i // 50 % 3][0]
        ms = {"ms": rng.uniform(0.01, 3000.0), "huge": 4_000_000.0, "zero": 0.0}.get(kind)
        e = entry(i, i + 1, op=op, duration_ms=ms, state="started" if kind == "pending" else "completed")
        e["time_discovered_completed_ns"] = e["time_discovered_started_ns"] + (5 * 10**9 if kind == "zero" else 1000)
        if kind == "untimed":
            e["time_discovered_started_ns"] = e["time_discovered_completed_ns"] = None
        entries.append(e)
        if kind != "pending" and kind != "untimed":
            seconds = ms / 1000 if ms is not None else 1000 / 1e9
            want[(op, bisect_left(DURATION_BUCKETS, seconds))] += 1
    state = LiveState(events=False)
    state.ingest(_snap(entries[:130]), "s", T0)
    state.ingest(_snap(entries[100:], at=T0 + 5), "s", T0 + 5)
    for (_desc, op), h in state.view().durations.items():
        assert h.counts == [want[(op, i)] for i in range(len(DURATION_BUCKETS))]
        assert h.count == sum(n for (o, _i), n in want.items() if o == op)


def test_unseen_entries_are_those_the_full_loop_would_look_at():
    """`_unseen` (bisection over a dump in record order) picks exactly the entries past the last
    record seen or still pending, in their order; out of order it looks at all."""
    import random
    from types import SimpleNamespace

    from frexport.live.state import _unseen
    from frexport.model.record_index import RecordIndex

    rng = random.Random(7)
    for _ in range(2000):
        rids = sorted(rng.sample(range(60), rng.randint(0, 20)))
        if rng.random() < 0.1:
            rng.shuffle(rids)
        entries = tuple(SimpleNamespace(record_id=r) for r in rids)
        max_record = rng.randint(-1, 60)
        pending = set(rng.sample(range(60), rng.randint(0, 6)))
        want = [e for e in entries if not (e.record_id <= max_record and e.record_id not in pending)]
        got = [e for e in _unseen(RecordIndex(entries), max_record, pending)
               if not (e.record_id <= max_record and e.record_id not in pending)]
        assert got == want
        if rids == sorted(rids) and max_record >= 0:
            assert len(list(_unseen(RecordIndex(entries), max_record, pending))) == len(want)


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


def test_an_idle_rank_re_stamped_every_second_keeps_its_series_past_the_expiry():
    """The re-stamped entries mark their counted pairs held less often than every read (a tenth of the
    expiry at most), never so rarely that a pair they hold expires."""
    import dataclasses

    from tests.support.fr_events import snapshot

    state = LiveState()
    d = snapshot(0, 0, 5, T0)
    state.ingest(d, "s", T0)
    for second in range(1, 1300):
        now = T0 + second * 10**9
        state.ingest(dataclasses.replace(d, dumped_at_ns=now), "s", now)
        assert state.expire(now, 600 * 10**9) == []
    assert state.view().collectives == {("default_pg", "all_reduce", "completed"): 5}
    assert state.pair_seen_ns[("default_pg", "all_reduce")] >= now - 60 * 10**9


def _status(enq: int, done: int, started: int = -1, pg_id: int = 0):
    from frexport.model.dump import ProcessGroupStatus

    return ProcessGroupStatus(pg_id, enq, started, done)


def test_a_status_read_between_entries_reads_keeps_a_groups_numbers_progress_and_pending_fresh():
    """Status first: a moving rank's entries come every entries_interval; its status every second.
    Where the status numbers the group's collectives as its entries do (checked at every entries
    read), the gauges follow the status, a collective it says finished is no longer pending (its age
    would otherwise grow until the next entries read), and the group's progress time moves."""
    state = LiveState()
    d = _snap([entry(0, 1), entry(1, 2, state="started")])
    state.ingest(d, "s", T0, groups={"nccl:0": _status(2, 1, 2)})
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.current() == (2, 2, 1) and g.pending == {"all_reduce": (1, T0 + 100_000_000)}
    progress = g.last_progress_ns
    state.observe_status(0, {"nccl:0": _status(7, 6, 7)}, T0 + 10**9)
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.current() == (7, 7, 6) and g.pending == {}  # collective 2 finished, by the status
    assert g.last_progress_ns == T0 + 10**9 != progress
    assert state.view().ranks[0].last_seen_ns == T0 + 10**9
    assert state.view().collectives == {("default_pg", "all_reduce", "completed"): 1}  # counts wait for entries
    # no progress: the time stays where the last advance put it
    state.observe_status(0, {"nccl:0": _status(7, 6, 7)}, T0 + 2 * 10**9)
    assert state.view().ranks[0].groups["nccl:0"].last_progress_ns == T0 + 10**9


def test_a_status_that_counts_other_ops_than_the_entries_is_not_shown_as_their_numbers():
    """gloo's pg_status also counts the p2p ops it does not record: its numbers run ahead of the
    entries' collective_seq_id. Once the two disagree at an entries read, the gauges keep the entries'
    numbers; progress and 'nothing pending' still hold in the status's own units."""
    state = LiveState()
    state.ingest(_snap([entry(0, 1), entry(1, 2, state="started")]), "s", T0, groups={"nccl:0": _status(5, 4)})
    state.observe_status(0, {"nccl:0": _status(9, 8)}, T0 + 10**9)
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.current() == (2, 2, 1)
    assert g.pending == {"all_reduce": (1, T0 + 100_000_000)}  # 8 of 9 done: which one is pending it cannot say
    state.observe_status(0, {"nccl:0": _status(9, 9)}, T0 + 2 * 10**9)
    g = state.view().ranks[0].groups["nccl:0"]
    assert g.pending == {} and g.last_progress_ns == T0 + 2 * 10**9 and g.current() == (2, 2, 1)
    # sticky: a later agreement does not make the status the entries' numbers again
    state.ingest(_snap([entry(0, 1), entry(1, 2), entry(2, 3)], at=T0 + 3 * 10**9), "s", T0 + 3 * 10**9,
                 groups={"nccl:0": _status(3, 3)})
    state.observe_status(0, {"nccl:0": _status(12, 11)}, T0 + 4 * 10**9)
    assert state.view().ranks[0].groups["nccl:0"].current() == (3, 3, 3)


def test_a_status_of_a_group_or_rank_the_state_does_not_hold_changes_nothing():
    state = LiveState()
    state.observe_status(3, {"nccl:0": _status(1, 1)}, T0)  # a rank never ingested
    state.ingest(_snap([entry(0, 1)]), "s", T0)
    state.observe_status(0, {"nccl:9": _status(1, 1)}, T0 + 1)
    assert set(state.view().ranks) == {0} and set(state.view().ranks[0].groups) == {"nccl:0"}


_rows = st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["scheduled", "started", "completed"]),
                           st.sampled_from([None, True, False]), st.sampled_from(["nccl", "gloo", "custom"]),
                           st.sampled_from(["all_reduce", "broadcast"])), max_size=12)


@settings(deadline=None)
@given(st.lists(st.tuples(_rows, st.booleans()), min_size=1, max_size=6))
def test_each_record_is_counted_once_whatever_the_snapshots(snapshots):
    """Snapshots that overlap, go back and forth between pending and finished, come out of order or
    list a record twice (a corrupt dump): a record is counted at most once, and every count is an
    event (the counters and the spans agree)."""
    state, events = LiveState(), []
    for i, (rows, ordered) in enumerate(snapshots):
        if ordered:  # as a dump lists them: each record once, oldest first
            rows = sorted({r[0]: r for r in rows}.values(), key=lambda r: r[0])
        # one creation time per record id: a record seen again is the same op, not a restart
        es = [entry(rid, rid, op=op, state=st_, retired=ret, backend=be) for rid, st_, ret, be, op in rows]
        events.extend(state.ingest(_snap(es, at=T0 + i), "s", T0 + i))
    per_record = Counter((ev.epoch, ev.entry.record_id) for ev in events)
    assert all(n == 1 for n in per_record.values()), per_record
    counted = Counter((ev.entry.pg_desc, ev.entry.op, ev.outcome) for ev in events)
    assert dict(state.view().collectives) == dict(counted)


def _entry_by_entry(self, rs, changed, kinds, now_ns):
    """The rule `_progress_by_run` keeps, written out entry by entry: each group's numbers are the
    greatest seq of its ops enqueued, started (a state past scheduled or a start time) and proven over;
    its timeout its last op's; a group whose ops completed further progressed now."""
    outcomes = [o for _key, n, o in kinds for _ in range(n)]
    for e, outcome in zip(changed, outcomes):
        if e.is_p2p:
            continue
        g = rs.groups.get(e.pg_name)
        if g is None:
            if len(rs.groups) >= self.max_label_sets:
                self._refused["frexport_pg_last_enqueued_collective"] += 1
                continue
            g = rs.groups[e.pg_name] = GroupProgress(e.pg_name, e.pg_desc)
        seq = e.collective_seq_id
        g.timeout_ms = e.timeout_ms
        g.last_enqueued = seq if g.last_enqueued is None else max(g.last_enqueued, seq)
        if e.state != "scheduled" or e.time_started_ns:
            g.last_started = seq if g.last_started is None else max(g.last_started, seq)
        if outcome.done and (g.last_completed is None or seq > g.last_completed):
            g.last_completed, g.last_progress_ns = seq, now_ns


@pytest.mark.parametrize("seed", range(60))
def test_a_groups_progress_is_what_its_entries_say_one_by_one(seed, monkeypatch):
    """Runs of one kind move a group as its entries would one by one: seqs out of order, ops started
    without a state that says so (a start time on a scheduled entry), p2p ops, groups past the bound."""
    rng = random.Random(seed)
    bound = rng.choice([256, 1])
    by_run, reference = LiveState(max_label_sets=bound), LiveState(max_label_sets=bound)
    for i in range(rng.randint(2, 6)):
        rids = sorted({rng.randint(0, 40) for _ in range(rng.randint(0, 25))})
        run = rng.choice([1, 4, 40])
        es = [entry(rid, rid if rng.random() < 0.8 else rng.randint(0, 40), op=["all_reduce", "send"][j // run % 2],
                    is_p2p=j // run % 2 == 1 and rng.random() < 0.5, backend=rng.choice(["nccl", "gloo", "nccl2"]),
                    state=rng.choice(["scheduled", "started", "completed"]), retired=rng.choice([None, True, False]),
                    pg=rng.choice([("0", "default_pg"), ("5", "pp")]), timeout_ms=rng.choice([1000, 600_000]))
              for j, rid in enumerate(rids)]
        for e in es:
            if rng.random() < 0.3:
                e["time_discovered_started_ns"] = rng.choice([None, e["time_created_ns"] + 5])
        snap = _snap(es, at=T0 + i, groups={"5": ("pp", [0, 1])})
        by_run.ingest(snap, "s", T0 + i)
        with monkeypatch.context() as m:
            m.setattr(LiveState, "_progress_by_run", _entry_by_entry)
            reference.ingest(snap, "s", T0 + i)
    def groups(state):
        return {r: {n: (g.last_enqueued, g.last_started, g.last_completed, g.last_progress_ns, g.timeout_ms, g.seen_ns)
                    for n, g in rs.groups.items()} for r, rs in state.view().ranks.items()}
    assert groups(by_run) == groups(reference)
    assert by_run.refused() == reference.refused()
