"""A snapshot's entries in runs of one kind, their record ids and newest time (model/entry_runs.py): the same with
model/_runs.c's passes and without them, on random entries (runs long and short, one field's value as
two objects, ids out of order or past 64 bits, which the compiled passes leave to Python); and the live
state counts the same either way."""

import pickle
import random
from array import array

import pytest

from frexport.decode.read import decode_bytes
from frexport.live.state import LiveState
from frexport.model import entry_runs
from frexport.model.dump import Entry
from frexport.model.entry_runs import any_set, ascends, distinct, fields_at, newest, record_ids, runs
from tests.support.compiled import compiled_or_pure
from tests.support.synth import T0, dump, entry

_TIMES = fields_at("time_created_ns", "time_started_ns", "time_completed_ns")
_TIMING = fields_at("duration_ms", "time_started_ns")
_FIELDS = [fields_at("pg_desc", "op", "state", "retired", "backend"), fields_at("pg_name"), fields_at("op", "state")]


def _entries(rng: random.Random) -> list:
    base = decode_bytes(pickle.dumps(dump([entry(0, 0)], world=2), protocol=2), "x", rank=0).entries[0]
    n = rng.choice([0, 1, 2, rng.randint(3, 60)])
    run = rng.choice([1, 2, 5, 50])
    out: list = []
    for i in range(n):
        k = i // run
        e = base._replace(record_id=rng.choice([i, i, i, rng.randint(-5, 80)]), op=["all_reduce", "broadcast"][k % 2],
                          state=rng.choice(["completed", "scheduled"]) if rng.random() < 0.2 else "completed",
                          pg_desc="".join(["default", "_pg"]),  # (equal, another object each entry)
                          retired=rng.choice([True, None, 1]), pg_name=rng.choice(["0", "0", "5"]))
        times = [rng.choice([None, 0, rng.randint(1, 2 ** 63 - 1), -rng.randint(1, 10 ** 9)]) for _ in range(2)]
        e = e._replace(time_created_ns=rng.choice([0, rng.randint(-10 ** 9, 2 ** 62)]), time_started_ns=times[0],
                       time_completed_ns=times[1])
        if rng.random() < 0.02:
            e = e._replace(record_id=rng.choice([2 ** 64, -2 ** 70, True]))  # (ints no decoder makes)
        if rng.random() < 0.02:
            e = e._replace(time_completed_ns=rng.choice([2 ** 64, True]))
        out.append(e)
    return rng.choice([out, tuple(out)])


def _pure(f, *args):
    with compiled_or_pure(entry_runs, "_compiled", False):
        return f(*args)


def test_the_compiled_passes_give_what_the_python_ones_give():
    rng = random.Random(7)
    for _ in range(3000):
        es = _entries(rng)
        for positions in _FIELDS:
            got = runs(es, positions)
            assert got == _pure(runs, es, positions)
            assert sum(n for _, n in got) == len(es)
            assert all(a != b for (a, _), (b, _) in zip(got, got[1:]))  # a run ends where its key changes
            assert distinct(es, positions) == _pure(distinct, es, positions) == {k for k, _ in got}
        for positions in (_TIMES, _TIMES[1:]):
            want = max([0, *(e[p] for e in es for p in positions if e[p] is not None)])
            assert newest(es, positions) == _pure(newest, es, positions) == want
        for positions in (_TIMING, _TIMES[1:]):
            want_set = any(e[p] is not None for e in es for p in positions)
            assert any_set(es, positions) is _pure(any_set, es, positions) is want_set
        if all(isinstance(e, Entry) for e in es):
            ids, ascending = record_ids(es)
            want_ids, want_ascending = _pure(record_ids, es)
            assert list(ids) == list(want_ids) and ascending == want_ascending
            if all(type(i) is int for i in want_ids):  # (what every decoder makes)
                assert ascending == all(a < b for a, b in zip(want_ids, want_ids[1:]))


def test_the_compiled_ascent_check_gives_what_python_gives():
    """(The live tail's record ids, as the scanner's array('q'); pickle_tail._cursor_at.)"""
    rng = random.Random(11)
    for _ in range(3000):
        ids = array("q", sorted(rng.sample(range(-5, 60), rng.randint(0, 12))))
        if ids and rng.random() < 0.5:  # a repeat or a step back somewhere
            i = rng.randrange(len(ids))
            ids[i] = ids[i - 1] if rng.random() < 0.5 else ids[i] - rng.randint(1, 3)
        want = all(a < b for a, b in zip(ids, ids[1:]))
        assert ascends(ids) is _pure(ascends, ids) is want
    assert entry_runs._compiled.ascends(array("i", [1, 2])) is NotImplemented  # not int64: Python decides
    assert ascends(array("i", [1, 2])) is True and ascends([2, 1]) is False


def test_what_is_not_an_entry_is_left_to_python():
    compiled = entry_runs._compiled
    assert compiled.runs([("short",)], _FIELDS[0]) is NotImplemented
    assert compiled.distinct(iter([]), _FIELDS[0]) is NotImplemented
    assert compiled.record_ids([(2 ** 64,)], 0) is NotImplemented
    assert compiled.newest([(1, 2.5)], (0, 1)) is NotImplemented
    assert compiled.any_set([(None,), ("short",)], (1,)) is NotImplemented

    class Str(str):  # (no decoder makes one: its == could run Python code)
        pass

    assert compiled.runs([("a", 1), (Str("a"), 1)], (0,)) is NotImplemented
    assert runs([("a", 1), (Str("a"), 1)], (0,)) == [("a", 2)]  # the Python pass decides


@pytest.mark.parametrize("seed", range(40))
def test_the_live_state_counts_the_same_with_and_without_them(seed):
    rng = random.Random(seed)
    bound = rng.choice([256, 2])
    states = [LiveState(max_label_sets=bound) for _ in range(2)]
    for i in range(rng.randint(1, 6)):
        rows = sorted({rid: rid for rid in (rng.randint(0, 40) for _ in range(rng.randint(0, 30)))})
        run = rng.choice([1, 3, 40])
        es = [entry(rid, rid, op=["all_reduce", "broadcast"][j // run % 2],
                    state=rng.choice(["scheduled", "started", "completed"]) if rng.random() < 0.3 else "completed",
                    backend=rng.choice(["nccl", "gloo", "nccl2"]), pg=rng.choice([("0", "default_pg"), ("5", "pp")]))
              for j, rid in enumerate(rows)]
        snap = decode_bytes(pickle.dumps(dump(es, world=2, groups={"5": ("pp", [0, 1])}), protocol=2), "x", rank=0,
                            dumped_at_ns=T0 + i)
        for compiled, state in zip((True, False), states):
            with compiled_or_pure(entry_runs, "_compiled", compiled):
                state.ingest(snap, "s", T0 + i)
    views = [s.view() for s in states]
    assert dict(views[0].collectives) == dict(views[1].collectives)
    assert {k: (h.counts, h.count, h.total) for k, h in views[0].durations.items()} == \
           {k: (h.counts, h.count, h.total) for k, h in views[1].durations.items()}
    assert {r: (v.max_record, v.pending, {n: (g.last_enqueued, g.last_started, g.last_completed, g.pending)
                                          for n, g in v.groups.items()}) for r, v in views[0].ranks.items()} == \
           {r: (v.max_record, v.pending, {n: (g.last_enqueued, g.last_started, g.last_completed, g.pending)
                                          for n, g in v.groups.items()}) for r, v in views[1].ranks.items()}
