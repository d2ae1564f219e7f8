"""Issue 28, deliverable 6: a differential fuzz of every fast decode path against the plain one.

The plain path is the general one only: the restricted unpickler or the standard JSON parser, then
normalize (the field rules) and build_rank_trace; no fast path on either side, so this is not one cut
compared with another. The fast paths: the compiled pickle scanner (decode/scanned.py), the JSON
decoder's typed columns (decode/json_decode.py; its plain data must equal the standard parser's) and
the raw-dict fast path (decode/fast_trace.py). Entries of a real-shaped dump get hostile values in random fields (nested
lists, values outside 64 bits, NaN and infinities, wrong types). Whatever a fast path does, it may
only decline (None) or give the plain path's trace, and never raise; the plain path itself reads the
rank (a trace, or a DecodeError that names why), never an unexpected exception that would make the
rank unreadable and blamed.
"""

import json
import pickle

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from frexport.decode import json_decode, scanned
from frexport.decode.errors import DecodeError
from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.normalize import normalize
from frexport.decode.read import decode_raw
from frexport.decode.safe_pickle import loads_plain
from frexport.model.rank_trace import build_rank_trace
from tests.support.synth import dump, healthy_job

FIELDS = ("record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
          "time_created_ns", "state", "is_p2p", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
          "retired", "timeout_ms", "time_discovered_started_ns", "time_discovered_completed_ns", "thread_id",
          "thread_name", "duration_ms", "frames")
HOSTILE = [None, 0, -1, 7, 10 ** 400, -10 ** 400, 2 ** 63, -(2 ** 63) - 1, 1e308, -1e308, float("inf"),
           float("nan"), 0.5, True, False, "", "x", "1" * 40, "nccl:all_reduce", "completed", [], [[]],
           [["Float"]], [[[4]]], [[4, "4"]], [[2 ** 70]], ["Float", 5], {}, {"a": 1}, ["0", "default_pg"],
           [{"name": "f", "filename": 5, "line": "x"}], [["0", "default_pg"]]]

_edits = st.lists(st.tuples(st.integers(0, 9), st.sampled_from(FIELDS), st.sampled_from(range(len(HOSTILE)))),
                  min_size=0, max_size=4)
# issue 28: a nested list in input_dtypes made the JSON scanner raise TypeError (the rank unreadable,
# then blamed) where the plain path skips that entry
_NESTED = [(1, "input_dtypes", HOSTILE.index([["Float"]])), (2, "input_sizes", HOSTILE.index([[[4]]]))]


def _doc(edits, as_json: bool = False) -> dict:
    es = healthy_job(world=1, steps=10)[0]
    es[-1].update(state="started", time_discovered_completed_ns=None, retired=False)  # one unfinished op
    es[-1].pop("duration_ms", None)
    if as_json:  # the JSON handlers' shape: no frames, 0 for "not yet" (the JSON scanner's common shape)
        for e in es:
            e.pop("frames")
            e.update({k: e[k] or 0 for k in ("time_discovered_started_ns", "time_discovered_completed_ns")})
    for i, key, v in edits:
        es[i][key] = HOSTILE[v]
    return dump(es, world=1)


def _plain(raw) -> object:
    """The general path only: field rules, then the trace; or the DecodeError's kind."""
    try:
        return build_rank_trace(normalize(raw, "x", "json", rank=3, dumped_at_ns=7, size_bytes=11, keep_frames=False))
    except DecodeError as exc:
        return exc.reason


def _agree(name: str, fast, plain) -> None:
    assert fast is None or fast == plain, f"{name} disagrees with the plain path"


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_edits)
@example(_NESTED)
def test_json_fast_paths_decline_or_agree_with_the_plain_path(edits):
    data = json.dumps(_doc(edits, as_json=True)).encode()
    raw = json.loads(data)
    assert repr(decode_raw(data, "x", "json")) == repr(raw)  # msgspec, or the standard parser where it refuses
    plain = _plain(raw)
    _agree("fast_trace", trace_from_raw(raw, "x", "json", 3, 7, 11), plain)
    _agree("json_decode.trace", json_decode.trace(data, "x", 3, 7, 11), plain)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_edits, st.sampled_from([2, 3, 4, 5]))
@example(_NESTED, 4)
def test_pickle_fast_paths_decline_or_agree_with_the_plain_path(edits, protocol):
    doc = _doc(edits)
    for e in doc["entries"]:  # pickles carry tuples where JSON has lists
        if isinstance(e.get("process_group"), list) and len(e["process_group"]) == 2:
            e["process_group"] = tuple(e["process_group"])
    data = pickle.dumps(doc, protocol=protocol)
    raw = loads_plain(data, "x")
    plain = build_or_reason(raw)
    _agree("fast_trace", trace_from_raw(raw, "x", "pickle", 3, 7, 11), plain)
    if scanned.available():
        try:
            fast = scanned.trace_from_pickle(data, "x", 3, 7, 11)
        except DecodeError as exc:
            assert exc.reason == plain
        else:
            _agree("scanner", fast, plain)


def build_or_reason(raw) -> object:
    try:
        return build_rank_trace(normalize(raw, "x", "pickle", rank=3, dumped_at_ns=7, size_bytes=11,
                                          keep_frames=False))
    except DecodeError as exc:
        return exc.reason
