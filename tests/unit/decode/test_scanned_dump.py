"""The sidecar's pickles (watched dump directories, peers' agent pickles) take the compiled scanner, the
one `analyze` uses, through read.decode_bytes: wherever it answers, the dump equals the pure path's
(safe_pickle + normalize) entry for entry, notes and all; anything else falls back to that path."""

import glob
import pickle
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frexport.decode import read, scanned, scanned_dump
from frexport.decode.errors import DecodeError
from frexport.decode.normalize import normalize
from frexport.decode.safe_pickle import loads_plain
from frexport.sources import dump_dir, peers
from tests.support import paths
from tests.support.examples import examples
from tests.support.synth import dump, entry
from tests.unit.decode.test_fast_trace import _ops
from tests.unit.decode.test_scanned import _UNUSUAL, _Evil, _shapes

needs_scanner = pytest.mark.skipif(not scanned.available(), reason="the compiled scanner is not built")


def _pure(data: bytes, **kw):
    try:
        return normalize(loads_plain(data, "x"), "x", "pickle", rank=3, dumped_at_ns=7, size_bytes=len(data), **kw)
    except DecodeError as exc:
        return exc.reason


def _check(data: bytes, **kw) -> bool:
    """Whenever the scanner answers, the pure path gives the same dump. True when it answered."""
    try:
        fast = scanned_dump.dump_from_pickle(data, "x", 3, 7, **kw)
    except DecodeError as exc:
        assert _pure(data, **kw) == exc.reason
        return True
    if fast is None:
        return False
    assert fast == _pure(data, **kw)
    return True


@needs_scanner
@pytest.mark.parametrize("keep_frames", [True, False])
def test_real_dumps_take_the_scanner(keep_frames):
    files = glob.glob(str(paths.REAL_FIXTURES / "*" / "trace_*"))
    used = sum(_check(Path(p).read_bytes(), keep_frames=keep_frames) for p in files)
    assert used >= 14


@needs_scanner
@settings(max_examples=examples(100), suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.sampled_from([2, 4, 5]), st.booleans(), st.sampled_from([3, 50, 10**6]))
def test_random_jobs_same_dump(seed, protocol, keep_frames, max_entries):
    rng = random.Random(seed)
    raw = _shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}))
    if rng.random() < 0.3:
        raw["version"] = rng.choice(["2.99", "x", 3, "2.4"])
    _check(pickle.dumps(raw, protocol=protocol), keep_frames=keep_frames, max_entries=max_entries)


@needs_scanner
def test_most_random_jobs_take_the_scanner():
    answered = 0
    for seed in range(40):
        rng = random.Random(seed)
        raw = _shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}))
        answered += _check(pickle.dumps(raw, protocol=2), keep_frames=seed % 2 == 0,
                           max_entries=[5, 10**6][seed % 3 > 0])
    assert answered >= 20


@needs_scanner
def test_threads_record_and_op_ids_come_through():
    entries = [dict(entry(100 + i, i + 1), op_id=200 + i, thread_id=str(i % 2), thread_name=f"t{i % 2}")
               for i in range(5)]
    data = pickle.dumps(dump(entries, world=2), protocol=2)
    got = scanned_dump.dump_from_pickle(data, "x", 3, 7)
    assert got is not None and got == _pure(data)
    assert [(e.record_id, e.op_id, e.thread_id, e.thread_name) for e in got.entries] == \
        [(100 + i, 200 + i, str(i % 2), f"t{i % 2}") for i in range(5)]


@needs_scanner
@pytest.mark.parametrize("change", range(len(_UNUSUAL)))
def test_unusual_entries_fall_back(change):
    raw = dump([entry(0, 1), entry(1, 2)], world=2)
    _UNUSUAL[change](raw["entries"][1])
    data = pickle.dumps(raw, protocol=2)
    assert scanned_dump.dump_from_pickle(data, "x", 0, 1) is None
    assert read.decode_bytes(data, "x", rank=3, dumped_at_ns=7) == _pure(data)  # the pure path decides


def test_decode_bytes_reads_pickles_through_the_scanner(monkeypatch):
    """Not a second path: decode_bytes asks scanned.columns, the function analyze's trace_from_pickle uses."""
    data = pickle.dumps(dump([entry(0, 1), entry(1, 2)], world=2), protocol=2)
    asked = []
    real = scanned.columns
    monkeypatch.setattr(scanned, "columns", lambda d: asked.append(d) or real(d))
    got = read.decode_bytes(data, "x", rank=3, dumped_at_ns=7)
    assert asked == [data] and got == _pure(data)
    scanned.trace_from_pickle(data, "x", 3, 7, len(data))
    assert asked == [data, data]


@needs_scanner
def test_the_sidecars_pickle_jobs_take_the_scanner(monkeypatch, tmp_path):
    data = pickle.dumps(dump([entry(0, 1), entry(1, 2, state="started")], world=2), protocol=2)

    def refuse(data, source):
        raise AssertionError("the pure unpickler ran: the scanner was bypassed")

    monkeypatch.setattr(read, "loads_plain", refuse)
    from_dir = dump_dir.DecodeJob(data, str(tmp_path / "trace_1"), 1, 5, max_entries=20000)()
    from_peer = peers._PickleJob(data, "peer rank 1", 1)()
    assert len(from_dir.entries) == len(from_peer.entries) == 2 and from_dir.format == "pickle"
    assert from_dir.entries[1].state == "started" and from_peer.rank == 1


def test_without_the_scanner_the_pure_path_reads_them(monkeypatch):
    data = pickle.dumps(dump([entry(0, 1), entry(1, 2)], world=2), protocol=2)
    with_it = read.decode_bytes(data, "x", rank=3, dumped_at_ns=7)
    monkeypatch.setattr(scanned, "_scan", None)
    assert scanned_dump.dump_from_pickle(data, "x") is None
    assert read.decode_bytes(data, "x", rank=3, dumped_at_ns=7) == with_it


def test_refused_pickles_are_still_refused():
    data = pickle.dumps({"version": "2.10", "entries": [], "x": _Evil()}, protocol=2)
    with pytest.raises(DecodeError) as exc:
        read.decode_bytes(data, "x")
    assert exc.value.reason == "forbidden_opcode"  # as before: the restricted unpickler's verdict


def test_long_stacks_of_different_entries_stay_their_own():
    """Stacks over MAX_FRAMES are cut: the pure path cached a stack by the id of the cut copy, which
    the next entry's cut copy could reuse (it then showed another entry's frames and call site)."""
    from frexport.decode.fields import MAX_FRAMES
    from tests.support.synth import frame

    entries = []
    for i in range(6):
        e = entry(i, i + 1)
        e["frames"] = tuple([frame("step", "/job/train.py", 100 + i)] + [frame("x", "/torch/y.py", 1)] * MAX_FRAMES)
        entries.append(e)
    data = pickle.dumps(dump(entries, world=2), protocol=2)
    pure = _pure(data)
    assert [e.call_site.line for e in pure.entries] == [100 + i for i in range(6)]
    assert all(len(e.frames) == MAX_FRAMES and e.frames[0].line == e.call_site.line for e in pure.entries)
    if scanned.available():
        assert scanned_dump.dump_from_pickle(data, "x", 3, 7) == pure
