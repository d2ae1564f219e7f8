"""The compiled scanner builds exactly the trace the pure path builds, accepts nothing that path refuses,
and the loader works the same with and without it."""

import glob
import pickle
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frexport.decode import load as load_module
from frexport.decode import scanned
from frexport.decode.errors import DecodeError
from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.safe_pickle import loads_plain
from tests.support import paths
from tests.support.examples import examples
from tests.support.synth import dump, entry, frame
from tests.unit.decode.test_fast_trace import _ops

# Only test_extension_is_built runs without the extension (and fails: setup must build it).
needs_scanner = pytest.mark.skipif(not scanned.available(), reason="the compiled scanner is not built")


def _pure(data: bytes):
    """What the loader does without the scanner: (trace or None, or the DecodeError's kind)."""
    try:
        return trace_from_raw(loads_plain(data, "x"), "x", "pickle", 3, 7, 11)
    except DecodeError as exc:
        return exc.reason


def _check(data: bytes) -> bool:
    """Whenever the scanner answers, the pure path gives the same trace. True when it answered."""
    try:
        fast = scanned.trace_from_pickle(data, "x", 3, 7, 11)
    except DecodeError as exc:  # require_dump_fields: the pure path must say the same
        assert _pure(data) == exc.reason
        return True
    if fast is None:
        return False
    assert fast == _pure(data)
    return True


def test_extension_is_built():
    # CI builds it (scripts/setup.sh): a silently missing extension would only make analyze slower
    assert scanned.available()


@needs_scanner
def test_real_dumps_take_the_scanner():
    used = sum(_check(Path(p).read_bytes()) for p in glob.glob(str(paths.REAL_FIXTURES / "*" / "trace_*")))
    assert used >= 14


def _shapes(rng: random.Random, raw: dict) -> dict:
    """The same job written the ways writers differ: unshared strings and frames, tuples for lists,
    missing optional fields, odd but valid values the field rules read."""
    for e in raw["entries"]:
        r = rng.random()
        if r < 0.1:
            e["frames"] = [dict(f, name=(f["name"] + ".")[:-1]) for f in e["frames"]]  # fresh objects
        elif r < 0.15:
            e["frames"] = rng.choice([None, [], (), 0, "", {}])
        elif r < 0.2:
            e["frames"] = tuple(e["frames"]) + (frame("x", "/torch/y.py", 1),) * rng.randint(0, 600)
        elif r < 0.23:
            e["frames"] = [{"filename": "/torch/a.py"}, frame("u", "/job/u.py", 5), 7]  # junk after the site
        if rng.random() < 0.1:
            e["process_group"] = rng.choice([list(e["process_group"]), e["process_group"][0], None,
                                             (e["process_group"][0],)])
        if rng.random() < 0.1:
            e["duration_ms"] = rng.choice([None, -1.0, float("nan"), float("inf"), 3, -2, True, "1", 0.0, -0.0,
                                             1e300, 9e15, 8.9e15, 1 << 62])
        if rng.random() < 0.1:
            e["input_sizes"] = rng.choice([None, [], (), [(1, 2)], [[0]], [[]]])
        if rng.random() < 0.1:
            e["input_dtypes"] = rng.choice([None, [], ("Float",), ["Float", "Half"]])
        if rng.random() < 0.05:
            e["time_discovered_started_ns"] = rng.choice([0, -5, None, True, 1.5])
        if rng.random() < 0.05:
            e["timeout_ms"] = None
        if rng.random() < 0.03:
            e["extra"] = {"nested": [1, 2, (3,)]}
            e[7] = "int key"
        if rng.random() < 0.15:  # the keys in another order (the scanner remembers the last entry's)
            items = list(e.items())
            rng.shuffle(items)
            if rng.random() < 0.5:
                items.insert(rng.randrange(len(items) + 1), ("unknown_" + str(rng.randrange(3)), 1))
            e.clear()
            e.update(items)
    return raw


@needs_scanner
@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.sampled_from([2, 3, 4, 5]))
def test_random_jobs_same_trace(seed, protocol):
    rng = random.Random(seed)
    raw = _shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}))
    assert _check(pickle.dumps(raw, protocol=protocol))


@needs_scanner
@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9))
def test_random_jobs_same_trace_by_columns(columns_spy, seed):
    """Without coalesced collectives (whose merged ops take add_rows), every trace is built by
    rank_trace.add_columns: the same trace as fast_trace's rows through add_rows."""
    rng = random.Random(seed)
    seen, ops = set(), []
    for e in _ops(rng):
        key = (e["process_group"][0], e["collective_seq_id"], e["is_p2p"], e["p2p_seq_id"] if e["is_p2p"] else 0)
        if e["profiling_name"].endswith("_coalesced") or (not e["is_p2p"] and key in seen):
            continue
        seen.add(key)
        ops.append(e)
    raw = _shapes(rng, dump(ops, world=2, groups={"5": ("pp", [0, 1])}))
    columns_spy.clear()
    assert _check(pickle.dumps(raw, protocol=2))
    assert columns_spy == [True]


@pytest.fixture(scope="module")
def columns_spy():
    """The results of add_columns during a test (hypothesis reuses the fixture across examples)."""
    results: list[bool] = []
    real = scanned.add_columns

    def spy(*args):
        results.append(real(*args))
        return results[-1]

    scanned.add_columns = spy
    yield results
    scanned.add_columns = real


_UNUSUAL = [
    lambda e: e.update(record_id="0"),  # a str where an int is expected
    lambda e: e.update(collective_seq_id=1 << 70),  # over 64 bits
    lambda e: e.update(is_p2p=1),  # an int for a bool
    lambda e: e.update(frames="abc"),
    lambda e: e.update(input_sizes=[[1.0]]),
    lambda e: e.update(input_sizes=[[-1]]),
    lambda e: e.update(output_dtypes=[1]),
    lambda e: e.update(process_group=("a", "b", "c")),
    lambda e: e.pop("thread_name"),
    lambda e: e.update(profiling_name="x" * 5000),
]


@needs_scanner
@pytest.mark.parametrize("change", range(len(_UNUSUAL)))
def test_unusual_entries_fall_back(change):
    raw = dump([entry(0, 1), entry(1, 2)], world=2)
    _UNUSUAL[change](raw["entries"][1])
    assert scanned.trace_from_pickle(pickle.dumps(raw, protocol=2), "x", 0, 1, 1) is None


class _Evil:
    def __reduce__(self):
        return (print, ("ran",))


@pytest.mark.parametrize("payload", [
    pickle.dumps({"version": "2.10", "entries": [], "x": _Evil()}, protocol=2),  # GLOBAL + REDUCE
    pickle.dumps({"version": "2.10", "entries": [], "x": _Evil()}, protocol=4),  # STACK_GLOBAL
    pickle.dumps({"version": "2.10", "entries": [], "x": {1, 2}}, protocol=4),  # EMPTY_SET: not allow-listed
    pickle.dumps({"version": "2.10", "entries": [], "x": b"bytes"}, protocol=3),
    pickle.dumps({"version": "2.10", "entries": []}, protocol=0),  # text protocol
    b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01X\x04\x00\x00\x002.10q\x02u",  # no STOP
    b"\x80\x02}r\xff\xff\xff\x7f.",  # a memo index no input this small could fill
    b"\x80\x02h\x00.",  # BINGET of nothing
    b"\x80\x02(a.",  # APPEND below the mark
    b"\x80\x02]q\x00h\x00a.",  # a list that contains itself
])
@needs_scanner
def test_refused_or_unusual_streams_give_none(payload):
    assert scanned._scan(payload) is None


@needs_scanner
def test_an_absurd_duration_is_absent_on_both_paths():
    # found by scripts/fuzz_scan.py: 1e300 ms overflowed the int64 microsecond column on both paths
    raw = dump([entry(0, 1, duration_ms=1e300), entry(1, 2, duration_ms=2.5)], world=2)
    data = pickle.dumps(raw, protocol=2)
    trace = scanned.trace_from_pickle(data, "x", 0, 1, 1)
    assert trace is not None and list(trace.groups["nccl:0"].duration_us) == [-1, 2500]
    assert trace == trace_from_raw(loads_plain(data, "x"), "x", "pickle", 0, 1, 1)


@needs_scanner
def test_every_prefix_and_byte_flip_agrees_with_the_pure_path():
    raw = dump([entry(i, i + 1, state="completed" if i < 3 else "started") for i in range(5)], world=2)
    data = pickle.dumps(raw, protocol=2)
    rng = random.Random(5)
    answered = 0
    for cut in range(0, len(data) + 1, 7):
        answered += _check(data[:cut])
    for _ in range(1500):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        answered += _check(bytes(b))
    assert answered > 100  # flips inside numbers and strings still scan


@needs_scanner
def test_loader_same_with_and_without_the_scanner(tmp_path, monkeypatch):
    rng = random.Random(1)
    for rank in range(4):
        (tmp_path / f"trace_{rank}").write_bytes(pickle.dumps(dump(_ops(rng), world=4), protocol=2))
    (tmp_path / "trace_4").write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": _Evil()}, protocol=2))
    with_ext = load_module.load([str(tmp_path)], workers=1)
    monkeypatch.setattr(scanned, "_scan", None)  # as installed without a compiler
    assert not scanned.available()
    without = load_module.load([str(tmp_path)], workers=1)
    assert with_ext.traces == without.traces and len(with_ext.traces) == 4
    assert with_ext.errors == without.errors and len(with_ext.errors) == 1
    assert "refused" in str(with_ext.errors[0])
