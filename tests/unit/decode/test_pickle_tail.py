"""The live sidecar's tail from the agent's pickle answer (decode/pickle_tail.py) normalizes to what the
same entries normalize to when read whole; where it cannot tell, it answers None (the caller reads the
whole buffer). Real PyTorch pickles cut by the agent: tests/e2e/test_live_handler_pickles.py."""

import gc
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frexport.decode import scanned
from frexport.decode.normalize import normalize
from frexport.decode.pickle_tail import ScannedEntries, parse_pickle_tail
from tests.support.examples import examples
from tests.support.synth import dump
from tests.unit.decode.test_fast_trace import _ops
from tests.unit.decode.test_json_decode import _hostile, _json_shapes
from tests.unit.decode.test_json_tail import _entry

pytestmark = pytest.mark.skipif(not scanned.available(), reason="read by the compiled scanner only")


def _doc(entries) -> dict:
    return {"version": "2.10", "comm_lib_version": "", "entries": entries,
            "pg_config": {"0": {"desc": "default_pg", "name": "0", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_completed_collective": 1, "last_enqueued_collective": 1,
                                "last_started_collective": -1}}}


def _pickle_of(entries) -> bytes:  # (a pickle's tuples and None where JSON has lists and 0)
    for e in entries:
        e["process_group"] = tuple(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[key] = e[key] or None
    return pickle.dumps(_doc(entries), protocol=2)


def test_the_entries_from_a_record_on():
    body = _pickle_of([_entry(i, 1000 + i, done=i < 8) for i in range(10)])
    tail = parse_pickle_tail(body, 7)
    assert isinstance(tail.entries, ScannedEntries) and tail.first_record == 0 and tail.first_created == 1007
    assert [n[0] for n in tail.entries.kinded().numbers] == [7, 8, 9] and "entries" not in tail.meta
    got = normalize({**tail.meta, "entries": tail.entries}, "x", "pickle", rank=0, keep_frames=False)
    assert [(e.record_id, e.state, e.time_started_ns, e.time_completed_ns) for e in got.entries] == \
           [(7, "completed", 1008, 1012), (8, "started", 1009, None), (9, "started", 1010, None)]


def test_each_entry_keeps_its_own_numbers_read_by_the_rules():
    """Built from its kind's template in C, an entry has its own numbers, each read as the field rules
    read it: a time not discovered (None, 0, negative) is None; a duration out of bounds or NaN is None,
    0.0 and -0.0 are kept; an int duration is a float; entries of two threads alternate."""
    durations = [0.0, -0.0, 1.5, -1.0, float("nan"), float("inf"), 1e300, 5, None, 2.5e-7]
    starts = [None, -5, 0, 7, 2**63 - 1, 3, None, 1, 2, 4]
    es = [dict(_entry(i, 1000 + i), duration_ms=d, time_discovered_started_ns=t, thread_id=str(i % 2))
          for i, (d, t) in enumerate(zip(durations, starts))]
    body = _pickle_of(es)
    for since in (0, 3, 9):
        tail = parse_pickle_tail(body, since)
        got = normalize({**tail.meta, "entries": tail.entries}, "x", "pickle", rank=0, keep_frames=False)
        want = normalize({**tail.meta, "entries": pickle.loads(body)["entries"][since:]}, "x", "pickle", rank=0,
                         keep_frames=False)
        assert [e.record_id for e in got.entries] == list(range(since, 10))
        assert got == want and _types(got) == _types(want)
        assert [str(e.duration_ms) for e in got.entries] == \
               ["0.0", "-0.0", "1.5", "None", "None", "None", "None", "5.0", "None", "2.5e-07"][since:]


def test_entries_built_from_plain_templates_are_left_out_of_the_collectors_walks():
    """Made in C, an entry whose parts hold nothing the collector tracks (its sizes are tuples of
    ints) is not tracked either, as CPython's collector leaves such a tuple after its first walk:
    the sidecar's young collection does not walk each new entry of a busy rank once more."""
    body = _pickle_of([_entry(i, 1000 + i, done=i < 8) for i in range(10)])
    tail = parse_pickle_tail(body, 3)
    got = normalize({**tail.meta, "entries": tail.entries}, "x", "pickle", rank=0, keep_frames=False)
    assert got.entries and got.entries[0].input_sizes
    assert not any(map(gc.is_tracked, got.entries))
    assert not any(gc.is_tracked(e.input_sizes) or any(map(gc.is_tracked, e.input_sizes)) for e in got.entries)


def test_what_a_right_cut_does_not_leave_is_refused():
    es = [_entry(i, 1000 + i) for i in range(10)]
    assert parse_pickle_tail(_pickle_of(es), 42) is None  # not there
    assert parse_pickle_tail(_pickle_of(es[:3] + es[5:]), 6) is not None  # older entries cut out: kept
    assert parse_pickle_tail(_pickle_of(es[:6] + es[7:]), 4) is None  # a gap after the cursor
    assert parse_pickle_tail(_pickle_of(es[::-1]), 7) is None  # not in record order
    framed = [dict(e, frames=[{"name": "f", "filename": "a.py", "line": 1}]) for e in es]
    assert parse_pickle_tail(_pickle_of(framed), 7) is None  # stack frames: not the live answer
    assert parse_pickle_tail(b"\x80\x02}q\x00.", 0) is None  # no entries
    assert parse_pickle_tail(_pickle_of(es)[:-30], 7) is None  # cut short


@settings(max_examples=examples(150), deadline=None)
@given(st.integers(0, 10**9), st.lists(_hostile, min_size=1, max_size=5))
def test_a_tail_normalizes_as_its_entries_read_whole(seed, hostile):
    """Hostile strings, odd numbers, extra and missing keys: where the scanner takes the pickle, the
    tail's entries are those the pickle's entries from `since` on normalize to."""
    rng = random.Random(seed)
    raw = _json_shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}), hostile)
    rids = [e.get("record_id") if isinstance(e, dict) else None for e in raw["entries"]]
    if not rids or type(rids[-1]) is not int:
        return
    since = rids[rng.randrange(len(rids))]
    tail = parse_pickle_tail(pickle.dumps(raw, protocol=2), since) if type(since) is int else None
    if tail is None:
        return
    at = rids.index(since)
    assert rids[at:] == list(range(since, since + len(rids) - at))
    got = normalize({**tail.meta, "entries": tail.entries}, "x", "pickle", rank=1, dumped_at_ns=5, keep_frames=False)
    want = normalize({**{k: raw[k] for k in tail.meta}, "entries": raw["entries"][at:]}, "x", "pickle", rank=1,
                     dumped_at_ns=5, keep_frames=False)
    assert got == want and _types(got) == _types(want)
    # where older entries are reused (none of these), the same entries come by kind, not built in C
    unrelated = {-1: want.entries[0]} if want.entries else {}
    by_kind = normalize({**tail.meta, "entries": tail.entries}, "x", "pickle", rank=1, dumped_at_ns=5,
                        keep_frames=False, previous=unrelated)
    assert by_kind == want and _types(by_kind) == _types(want)


def _types(d) -> list:
    """Each field's type: == takes True for 1 and 1.0 for 1."""
    return [tuple(map(type, e)) for e in d.entries]
