"""The dump-directory source on real files: complete files only, rewrites re-read, unchanged never re-decoded."""

import os
import pickle
import shutil
import time

import pytest

from frexport.config import DumpDir
from frexport.live.state import LiveState
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from tests.support.live import pump
from tests.support.synth import dump, entry


def _bytes(n, seq0=1):
    return pickle.dumps(dump([entry(i, seq0 + i) for i in range(n)], world=2), protocol=2)


def _pump(src, until, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pump(src, src.state)
        if until():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(params=[False, True], ids=["inotify", "polling"])
def source(request, tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    state, health = LiveState(), HealthRegistry()
    # polling: a file is seen within 0.1 s and read once unchanged for 0.25 s (what each test waits for)
    src = DumpDirSource(health, DumpDir(str(d), polling=request.param, poll_interval=0.1, settle=0.25))
    src.state = state  # the loop's part in these tests: tests.support.live.pump ingests into it
    src.start()
    yield src, state, d
    src.stop()


def _entries(state, rank):
    dump_ = state.latest_dumps().get(rank)
    return None if dump_ is None else len(dump_.entries)


def test_partial_write_is_read_only_when_complete(source):
    src, state, d = source
    src.cfg.settle = 0.5  # polling: half a file stays unchanged longer than the pumps below take
    data = _bytes(50)
    with open(d / "trace_0", "wb") as f:  # PyTorch writes in place: open, write in pieces, close
        f.write(data[: len(data) // 2])
        f.flush()
        for _ in range(5):
            pump(src, state)
            time.sleep(0.05)
        assert _entries(state, 0) is None  # half a file is not read (and not reported as corrupt)
        f.write(data[len(data) // 2:])
    assert _pump(src, lambda: _entries(state, 0) == 50)
    assert src.health.decode_errors() == {}


def test_rewrite_is_reread_and_unchanged_file_is_not(source, monkeypatch):
    src, state, d = source
    (d / "trace_1").write_bytes(_bytes(10))
    assert _pump(src, lambda: _entries(state, 1) == 10)
    decodes = []
    original = state.ingest
    monkeypatch.setattr(state, "ingest", lambda dump, *a, **k: decodes.append(dump.source) or original(dump, *a, **k))
    src._rescan()  # a rescan of unchanged files decodes nothing
    for _ in range(10):
        pump(src, state)
    assert decodes == []
    time.sleep(0.01)
    (d / "trace_1").write_bytes(_bytes(20))  # PyTorch overwrites the rank's dump
    assert _pump(src, lambda: _entries(state, 1) == 20)


def test_json_snapshots_replaced_atomically(source):
    src, state, d = source
    from frexport.decode.read import decode_bytes
    from frexport.export.encode import to_json

    for n in (5, 8):
        body = to_json(decode_bytes(_bytes(n), "x", rank=2))
        tmp = d / ".trace_2.json.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, d / "trace_2.json")  # the agent's write + rename
        assert _pump(src, lambda n=n: _entries(state, 2) == n)


def test_deletion_and_directory_recreated(source):
    src, state, d = source
    (d / "trace_0").write_bytes(_bytes(3))
    assert _pump(src, lambda: _entries(state, 0) == 3)
    (d / "trace_0").unlink()
    pump(src, state)
    shutil.rmtree(d)
    d.mkdir()  # deleted and recreated (a new job attempt in the same volume)
    src.cfg.rescan_interval = 0.2
    (d / "trace_0").write_bytes(_bytes(7, seq0=100))
    assert _pump(src, lambda: _entries(state, 0) == 7)


def test_corrupt_file_is_counted_once_and_does_not_stop_others(source):
    src, state, d = source
    (d / "trace_0").write_bytes(b"\x80\x02}q\x00(X\x07\x00\x00\x00version")  # truncated
    (d / "trace_1").write_bytes(_bytes(4))
    assert _pump(src, lambda: _entries(state, 1) == 4)
    for _ in range(5):
        src._rescan()
        pump(src, state)
    assert src.health.decode_errors() == {"truncated": 1}


def _hung(waiting_s: float) -> bytes:
    """A rank waiting for `waiting_s` in its last collective (10 min timeout) when dumped now."""
    now = time.time_ns()
    es = [entry(i, i + 1, created=now - int(waiting_s * 1e9) - (10 - i) * 10**9) for i in range(10)]
    es.append(entry(10, 11, state="scheduled", duration_ms=None, created=now - int(waiting_s * 1e9)))
    return pickle.dumps(dump(es, world=2), protocol=2)


def test_a_file_from_before_the_source_looked_is_a_clock_only_where_it_can_be(tmp_path):
    """A file that was there before the sidecar started was written by the job (a restart during a hang)
    or by a checkout or a copy (its time days after its entries). A rank cannot wait past its group's
    timeout (10 min here): a file time later than that after the op it waits in is no dump time. A dump
    written while the sidecar watches is always one."""
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "trace_0").write_bytes(_hung(waiting_s=2 * 3600))  # "waiting" 2 h: a copy's time
    (d / "trace_1").write_bytes(_hung(waiting_s=30))  # a hang dumped 30 s in, then the sidecar restarted
    time.sleep(0.01)
    state = LiveState()
    src = DumpDirSource(HealthRegistry(), DumpDir(str(d), poll_interval=0.2, settle=0.2))
    src.state = state
    src.start()
    try:
        time.sleep(0.01)
        (d / "trace_2").write_bytes(_hung(waiting_s=2 * 3600))  # written while watched: its time is a clock
        assert _pump(src, lambda: all(_entries(state, r) == 11 for r in range(3)))
        dumps = state.latest_dumps()
        assert [dumps[r].dumped_at_is_clock for r in range(3)] == [False, True, True]
    finally:
        src.stop()
