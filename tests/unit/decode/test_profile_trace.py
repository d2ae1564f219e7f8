"""Profiler traces are untrusted bytes: bounded, JSON only, bad events skipped."""

import gzip
import json

import pytest

from frexport.decode import profile_trace
from frexport.decode.profile_trace import TraceError, read_trace


def _doc(events):
    return json.dumps({"traceEvents": events}).encode()


def test_only_well_typed_host_events_are_kept():
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 5, "ts": 10, "dur": 3},
        {"ph": "X", "cat": "python_function", "name": "f.py(1): g", "tid": "6", "ts": 11.5, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "bool ts", "tid": 5, "ts": True, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "negative", "tid": 5, "ts": 1, "dur": -3},
        {"ph": "X", "cat": "cpu_op", "name": "nan", "tid": 5, "ts": float("nan"), "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "a GPU kernel", "tid": 5, "ts": 1, "dur": 3},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "tid": 5, "ts": 1},
        ["not", "an", "event"], None, {"ph": "X", "cat": "cpu_op", "name": 7, "tid": 5, "ts": 1, "dur": 1},
    ]
    t = read_trace(gzip.compress(_doc(events)))
    assert [(e.name, e.tid) for e in t.events] == [("aten::mm", 5), ("f.py(1): g", 6)]
    assert t.span_us == pytest.approx(3)


@pytest.mark.parametrize("data, says", [
    (b"not json", "not JSON"), (b'{"a": 1}', "no traceEvents"), (b"\x1f\x8b\x08garbage", "not a gzip stream"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
])
def test_bad_input_is_a_clear_error(data, says):
    with pytest.raises(TraceError, match=says):
        read_trace(data)


def test_a_gzip_bomb_stops_at_the_bound(monkeypatch):
    monkeypatch.setattr(profile_trace, "MAX_JSON_BYTES", 1 << 20)
    bomb = gzip.compress(b" " * (8 << 20))
    with pytest.raises(TraceError, match="over 1048576 bytes"):
        read_trace(bomb)


def test_events_over_the_cap_are_counted_not_kept(monkeypatch):
    monkeypatch.setattr(profile_trace, "MAX_EVENTS", 2)
    ev = [{"ph": "X", "cat": "cpu_op", "name": "x", "tid": 1, "ts": i, "dur": 1} for i in range(5)]
    t = read_trace(_doc(ev))
    assert len(t.events) == 2 and t.dropped == 3
