"""The JSON decoder (decode/json_decode.py), the one every JSON path uses, against the standard library:
`loads` gives what `json.loads` gives (or the same refusal), and the typed columns of `trace` build
exactly the trace the plain path (json.loads, then fast_trace or normalize) builds, and answer nothing
where that path refuses the text or reads it otherwise: hostile strings, odd numbers, other writers'
spacing, cut and flipped bytes."""

import glob
import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frexport.decode import json_decode
from frexport.decode import load as load_module
from frexport.decode.errors import DecodeError
from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.normalize import normalize
from frexport.model.rank_trace import build_rank_trace
from tests.support import paths
from tests.support.examples import examples
from tests.support.synth import dump, entry
from tests.unit.decode.test_fast_trace import _ops


def _stdlib(data: bytes):
    """The standard library's reading of a document (what every path used before msgspec)."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        stripped = data.rstrip()
        truncated = exc.pos >= len(stripped) - 1 or stripped[-1:] not in (b"}", b"]")
        return DecodeError("x", "truncated" if truncated else "corrupt", "")
    except RecursionError:
        return DecodeError("x", "too_deep", "")
    except ValueError:  # UnicodeDecodeError, a 5000-digit integer
        return DecodeError("x", "corrupt", "")


def _same(a, b) -> bool:
    """Equal values of equal types (0, 0.0, -0.0 and False differ; NaN equals NaN), dicts in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, DecodeError):
        return a.reason == b.reason
    if type(a) is float:
        return a == b and math.copysign(1, a) == math.copysign(1, b) or a != a and b != b
    if type(a) is list:
        return len(a) == len(b) and all(map(_same, a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(v, b[k]) for k, v in a.items())
    return a == b


def _loads_agrees(data: bytes) -> None:
    try:
        got = json_decode.loads(data, "x")
    except DecodeError as exc:
        got = exc
    assert _same(got, _stdlib(data)), (data[:200], got)


def _plain(data: bytes):
    """What the loader does without the typed columns, with the standard library's json.loads: the
    trace, or the DecodeError's kind."""
    try:
        raw = json_decode._stdlib(data, "x")
        trace = trace_from_raw(raw, "x", "json", 3, 7, 11)
        if trace is None:
            trace = build_rank_trace(normalize(raw, "x", "json", rank=3, dumped_at_ns=7, size_bytes=11,
                                               keep_frames=False))
        return trace
    except DecodeError as exc:
        return exc.reason


def _check(data: bytes) -> bool:
    """`loads` reads what the standard library reads; whenever the typed columns answer, the plain
    path gives the same trace. True when they answered."""
    _loads_agrees(data)
    fast = json_decode.trace(data, "x", 3, 7, 11)
    if fast is None:
        return False
    assert fast == _plain(data)
    return True


def test_real_dumps_take_the_typed_columns():
    """Every captured job's JSON, the PyPI wheels' of torch 2.14.1 and 2.15.0 (torch-<version>/) too."""
    found = glob.glob(str(paths.REAL_FIXTURES / "**" / "json" / "trace_*"), recursive=True)
    wheels = [p for p in found if "/torch-2.1" in p]
    assert len(wheels) >= 8
    used = sum(_check(Path(p).read_bytes()) for p in found)
    assert used >= 48 and all(_check(Path(p).read_bytes()) for p in wheels)


# pieces of hostile strings: JSON syntax, what the old JSON scanner cut at, escapes, lone surrogates, non-ASCII
_ATOMS = ['"', "\\", "{", "}", "[", "]", ",", ":", " ", "0", "7", "-", "e", ".", "a", "é", "\x00", "\x01", "\n",
          "\ud800", "\udfff", "\U0001f600", "}, {", "},{", "}]", ": 7,", ":7}", '"entries": [', '": 1, "', "\\u0001",
          '"pg_id": 3', "NaN"]
_hostile = st.lists(st.sampled_from(_ATOMS), max_size=6).map("".join)
_NUMBERS = [0, -0.0, 1.0, -5, 1 << 62, 1 << 63, 1 << 70, 10 ** 25, 1.5, 1e300, float("inf"), float("nan"), True, None,
            "3", [1], 2.5e-7]
_WRITERS = [
    {},  # json.dumps' defaults: ", " and ": "
    {"separators": (",", ":"), "sort_keys": True},  # PyTorch's nlohmann::json: compact, sorted
    {"separators": (",", ":")},
    {"separators": (", ", ":")},
    {"ensure_ascii": False},  # non-ASCII as text: read as str
    {"indent": 1},  # pretty-printed: not the common shape
]


def _json_shapes(rng: random.Random, raw: dict, hostile: list[str]) -> dict:
    """The job as the JSON handlers write it (no frames, 0 for "not yet"), then odd but valid values
    and hostile strings in every string field."""
    pick = iter(hostile * 50).__next__
    odd = rng.choice([0.0, 0.01, 0.05, 0.2])  # how often a value the typed columns must refuse or read differently
    for e in raw["entries"]:
        if rng.random() >= odd:
            e.pop("frames")
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
        e["process_group"] = list(e["process_group"])
        r = rng.random()
        if r < 0.1:
            e["thread_name"] = pick()
        elif r < 0.15:
            e["process_group"] = [pick(), pick()]
        elif r < 0.2:
            e["profiling_name"] = "nccl:" + pick()
        elif r < 0.25:
            e["input_dtypes"] = [pick()]
        elif r < 0.3:
            e[pick()] = rng.choice(_NUMBERS + [pick(), {"n": 1}])  # an extra field
        elif r < 0.33:
            e["state"] = pick()
        if rng.random() < odd:
            key = rng.choice(["record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
                              "duration_ms", "time_discovered_started_ns", "time_discovered_completed_ns",
                              "timeout_ms", "is_p2p", "retired", "thread_id", "frames"])
            e[key] = rng.choice(_NUMBERS)
        if rng.random() < odd / 4:
            e.pop(rng.choice(list(e)))
    if rng.random() < 0.3:
        raw["pg_config"][pick()] = {"name": pick(), "desc": pick(), "ranks": "[0, 1]"}
    if rng.random() < 0.2:
        raw[pick()] = rng.choice([pick(), {"entries": [{"a": 1}]}, [], 5])
    if rng.random() < 0.2:
        raw["comm_lib_version"] = pick()
    return raw


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.lists(_hostile, min_size=1, max_size=5), st.sampled_from(range(len(_WRITERS))))
def test_random_jobs_same_trace(seed, hostile, writer):
    rng = random.Random(seed)
    raw = _json_shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}), hostile)
    kw = _WRITERS[writer]
    text = json.dumps(raw, **kw)
    data = text.encode("utf-8", "surrogatepass")
    _check(data)
    if writer < 3 and rng.random() < 0.5:
        _check(text.encode("utf-16"))  # json.loads reads UTF-16 and UTF-32 too; so does loads (through it)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.sampled_from([0, 1]))
def test_common_jobs_take_the_typed_columns(seed, writer):
    """What the JSON handlers write always takes the typed columns (json.dumps' spacing, or PyTorch's)."""
    rng = random.Random(seed)
    raw = dump(_ops(rng) or [entry(0, 1)], world=2, groups={"5": ("pp", [0, 1])})
    for e in raw["entries"]:
        e.pop("frames")
        e["process_group"] = list(e["process_group"])
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
    assert _check(json.dumps(raw, **_WRITERS[writer]).encode())


# Traps: each must give the plain path's answer (here: mostly None, the plain path runs)
_TRAPS = [
    '{"x\\"entries": [{"a": 1}], "entries": []}',  # a key that ends like "entries", then the real one
    '{"pg_config": {"entries": [ENTRY]}, "entries": []}',  # a nested "entries" first
    '{"entries": [ENTRY], "entries": []}',  # duplicate keys: the last wins
    '{"entries": [ENTRY], "v": "\\u0001"}',  # the placeholder's character elsewhere
    '{"entries": [ENTRY, ENTRY], "v": "}]"}',  # the end look-alike after the entries
    '{"entries": [ENTRY], "v": 1}]',  # trailing garbage
    '{"entries": [ENTRY]}',
    '{"entries": [ENTRY,ENTRY]}',
    '{"entries": [ENTRY , ENTRY]}',
    '{"entries": [ ENTRY]}',
    '{"entries": [ENTRY] }',
    '{"entries":[ENTRY],"version":"2.10"}',
    '[ENTRY]',  # the unversioned list form
]
_ENTRY = json.dumps({k: v for k, v in entry(0, 1).items() if k != "frames"} | {"process_group": ["0", "d"]})
_ENTRY_EDITS = [
    lambda s: s,
    lambda s: s.replace('"pg_id": 0', '"pg_id":  0'),  # another spacing: part of the kind
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id":  1'),
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": 01'),  # not JSON
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": 1.0'),
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": 1e2'),
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": -'),
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": 1-2'),
    lambda s: s.replace('"collective_seq_id": 1', '"collective_seq_id": ' + "9" * 5000),
    lambda s: s.replace('"duration_ms": 1.0', '"duration_ms": -Infinity'),
    lambda s: s.replace('"duration_ms": 1.0', '"duration_ms": NaN'),
    lambda s: s.replace('"duration_ms": 1.0', '"duration_ms": ' + "9" * 400),
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": "a: 5, b"'),
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": "a\\": 5, \\"b"'),
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": "}, {\\"x\\": 1"'),
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": "\\ud800\\u0000"'),
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": "\x00"'),  # a raw NUL: not JSON
    lambda s: s.replace('"thread_name": "pt_main_thread"', '"thread_name": 5'),
    lambda s: s.replace('"state": "completed"', '"state": "completed", "frames": 5'),
    lambda s: s.replace('"state": "completed"', '"state": "completed", "frames": 0'),
    lambda s: s.replace('"state": "completed"', '"state": "completed", "x": {"y": 5}'),
    lambda s: s.replace('"state": "completed"', '"state": "completed", "state": "started"'),
    lambda s: s.replace('"state": "completed"', '"state": "completed", "record_id": 9'),
    lambda s: s.replace('"record_id": 0', '"record_id": 0, "record_id": true'),
]


@pytest.mark.parametrize("trap", range(len(_TRAPS)))
@pytest.mark.parametrize("edit", range(len(_ENTRY_EDITS)))
def test_traps_agree_with_the_plain_path(trap, edit):
    text = _TRAPS[trap].replace("ENTRY", _ENTRY_EDITS[edit](_ENTRY))
    _check(text.encode("utf-8", "surrogatepass"))
    _check(text.replace(", ", ",").replace(": ", ":").encode("utf-8", "surrogatepass"))


def test_the_common_shape_takes_the_typed_columns():
    text = '{"entries": [ENTRY, ENTRY], "version": "2.10"}'.replace("ENTRY", _ENTRY)
    assert _check(text.encode())
    assert _check(text.replace(", ", ",").replace(": ", ":").encode())
    assert _check(text.replace('"d"', '"\\u00e9\\ud83d\\ude00"').encode())  # escapes, a surrogate pair
    assert _check(text.replace('"d"', '"é"').encode())  # not ASCII
    # a lone surrogate: msgspec refuses it, the standard library reads it (the plain path: same trace)
    assert not _check(text.replace('"d"', '"\\ud800"').encode())


def test_one_kind_spelled_two_ways_is_the_same_kind():
    """A kind is its fields' bytes: the same values written differently (an escape, spacing inside a
    list) are two kinds of equal values, and the trace is the plain path's."""
    one = json.loads(_ENTRY)
    compact = json.dumps(dict(one, collective_seq_id=2, record_id=1), separators=(",", ":"))
    respelled = compact.replace('"process_group":["0","d"]', '"process_group":["0","\\u0064"]') \
        .replace('"input_sizes":[[', '"input_sizes":[ [')
    assert respelled.count("u0064") == 1 and respelled.count("[ [") == 1
    assert _check(('{"entries": [%s, %s], "version": "2.10"}' % (json.dumps(one), respelled)).encode())


def test_every_prefix_and_byte_flip_agrees_with_the_plain_path():
    raw = dump([entry(i, i + 1, state="completed" if i < 3 else "started") for i in range(5)], world=2)
    for e in raw["entries"]:
        e.pop("frames")
    data = json.dumps(raw).encode()
    rng = random.Random(5)
    answered = 0
    for cut in [*range(0, len(data), 3), len(data)]:
        answered += _check(data[:cut])
    assert answered == 1  # only the whole text
    for _ in range(3000):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.choice(b'{}[]",:\\ 0123456789.eE-+tfn\x00\x01a\xff')
        answered += _check(bytes(b))
    assert answered > 150  # flips inside numbers and strings still scan


def test_loader_same_with_and_without_the_typed_columns(tmp_path, monkeypatch):
    rng = random.Random(1)
    for rank in range(4):
        raw = dump(_ops(rng), world=4)
        for e in raw["entries"]:
            e.pop("frames")
        (tmp_path / f"trace_{rank}").write_text(json.dumps(raw, separators=(",", ":")))
    (tmp_path / "trace_4").write_text('{"version": "2.10", "entries": [{"record_id": 1,]}')
    fast = load_module.load([str(tmp_path)], workers=1)
    monkeypatch.setattr(load_module, "trace_from_json", lambda *a: None)
    plain = load_module.load([str(tmp_path)], workers=1)
    assert fast.traces == plain.traces and len(fast.traces) == 4
    assert fast.errors == plain.errors and len(fast.errors) == 1


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=40)


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(_values, st.sampled_from([{}, {"separators": (",", ":")}, {"ensure_ascii": False}, {"indent": 2}]),
       st.sampled_from(["utf-8", "utf-16"]))
def test_loads_reads_what_the_standard_library_reads(doc, writer, encoding):
    """NaN, Infinity, huge integers, any text: the standard library's value, or its refusal's reason."""
    _loads_agrees(json.dumps(doc, **writer).encode(encoding, "surrogatepass"))


@pytest.mark.parametrize("text", [
    b'{"a": NaN, "b": -Infinity}', b'\xef\xbb\xbf{"version": "2.10"}', b'{"a": 1e999}', b'{"a": "\\ud800"}',
    b'{"a": ' + b"9" * 5000 + b"}", b'{"a": 1, "a": 2}', b"[" * 5000 + b"]" * 5000, b'{"a": [1, 2', b'{"a": 01}',
    b'{"a": "\xff"}', b'{"a": "\xed\xa0\x80"}', b'{"a": 1} x', b"", b"   ", b'"\x01"',
    b'{"a": 123456789012345678901234567890}',
])
def test_loads_edge_cases_read_as_the_standard_library_reads_them(text):
    _loads_agrees(text)
    assert json_decode.trace(text, "x", 0, 1, 1) is None


@pytest.mark.parametrize("value", [[["Float"]], [[]], [["Float", "Half"]], [[["Float"]]], [{"a": 1}], [None],
                                   ["Float", ["Float"]], [[1]], [1], [True]])
@pytest.mark.parametrize("where", ["one", "all"])
def test_nested_list_in_input_dtypes_skips_the_entry_not_the_rank(tmp_path, value, where):
    """Issue 26's known defect (fixed in the differential fuzz's commit, kept here for the one JSON path):
    a nested list in `input_dtypes` is a malformed entry, skipped and counted as the plain path does; the
    rank is read."""
    raw = dump([entry(i, i + 1, state="completed") for i in range(6)], world=2)
    for e in raw["entries"]:
        e.pop("frames")
        e["process_group"] = list(e["process_group"])
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
    for e in raw["entries"][3:4] if where == "one" else raw["entries"]:
        e["input_dtypes"] = value
    data = json.dumps(raw).encode()
    _check(data)
    (tmp_path / "trace_0").write_bytes(data)
    loaded = load_module.load([str(tmp_path)], workers=1)
    assert not loaded.errors and len(loaded.traces) == 1
    trace = loaded.traces[0]
    plain = _plain(data)
    assert (trace.n_entries, trace.notes, trace.pg_config, trace.groups) == \
        (plain.n_entries, plain.notes, plain.pg_config, plain.groups)
    skipped = 1 if where == "one" else 6
    assert trace.n_entries == 6 - skipped and f"{skipped} malformed entries skipped" in trace.notes


def test_the_typed_entry_names_the_keys_fields_py_names():
    """fields.py is the one home of the field names: the typed JSON entry reads exactly its keys, less
    the two no trace reads (thread_id, thread_name), so a key added or renamed there fails here."""
    from frexport.decode import fields, json_decode

    typed = set(json_decode._Entry.__struct_fields__)
    assert typed == (set(fields.V210_KEYS) | set(fields.OPTIONAL_KEYS)) - {"thread_id", "thread_name"}
