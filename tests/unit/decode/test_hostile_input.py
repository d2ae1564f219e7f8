"""Hostile and random input, as hypothesis generates it: only a RankDump or a DecodeError comes out."""

import json
import os
import pickle
import shutil
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frexport.decode.errors import DecodeError
from frexport.decode.load import load
from frexport.decode.read import decode_bytes
from frexport.model.dump import RankDump
from tests.support import paths
from tests.support.examples import examples

REAL = (paths.REAL_FIXTURES / "healthy" / "trace_0").read_bytes()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=40)
FIELDS = ["record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
          "time_created_ns", "state", "is_p2p", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
          "retired", "timeout_ms", "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms",
          "frames", "thread_id", "thread_name"]
dump_like = st.fixed_dictionaries({
    "version": st.one_of(st.sampled_from(["2.10", "2.2", "2.9", "3.1", "x", ""]), json_values),
    "pg_config": json_values, "pg_status": json_values,
    "entries": st.lists(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=len(FIELDS)), max_size=8),
})


def _outcome(data: bytes) -> None:
    try:
        assert isinstance(decode_bytes(data, "h"), RankDump)
    except DecodeError as exc:
        assert exc.source == "h" and exc.reason and exc.detail


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the profile (tests/conftest.py)
@given(json_values)
def test_any_json_document(doc):
    _outcome(json.dumps(doc).encode())


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the profile (tests/conftest.py)
@given(dump_like)
def test_dump_shaped_json_with_wrong_types_everywhere(doc):
    _outcome(json.dumps(doc).encode())


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the profile (tests/conftest.py)
@given(dump_like, st.integers(0, 5))
def test_pickles_of_plain_data(doc, protocol):
    _outcome(pickle.dumps(doc, protocol=protocol))


CALLABLES = [os.system, eval, exec, subprocess.call, open, shutil.rmtree, getattr, __import__, os.remove]


class _Call:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CALLABLES), st.integers(0, 5), st.booleans())
def test_object_pickles_are_refused(tmp_path_factory, fn, protocol, nested):
    marker = tmp_path_factory.mktemp("m") / "pwned"
    payload = _Call(fn, (f"touch {marker}",) if fn in (os.system, subprocess.call) else (str(marker),))
    obj = {"version": "2.10", "entries": [{"record_id": 0, "frames": [payload]}]} if nested else payload
    try:
        decode_bytes(pickle.dumps(obj, protocol=protocol), "evil")
        raise AssertionError("an object pickle was accepted")
    except DecodeError as exc:
        assert exc.reason == "forbidden_opcode" and "evil" in str(exc)
    assert not marker.exists()


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(REAL) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(1, len(REAL)))
def test_mutated_real_dumps_in_the_sandbox(tmp_path, flips, cut):
    """Byte flips and truncation of a real dump, decoded the way analyze does (limited workers):
    memo bombs that mutation can create are bounded there."""
    data = bytearray(REAL[:cut])
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    d = tmp_path / f"case{abs(hash(bytes(data))) % 10**8}"
    d.mkdir()
    (d / "trace_0").write_bytes(bytes(data))
    loaded = load([str(d)], workers=1)
    assert len(loaded.traces) + len(loaded.errors) == 1
    shutil.rmtree(d)
