"""A dump directory written by an attacker: the file is swapped between frexport's check and its read.

The swap is made deterministic with an audit hook (sys.addaudithook): the moment frexport opens the
path, the hook replaces the file, which is what a racing attacker achieves with luck. Real files,
a real FIFO, a real decoder process.
"""

import json
import os
import pickle
import sys
import threading
import time

from frexport.config import DumpDir
from frexport.decode import sandbox
from frexport.decode.sandbox import Limits
from frexport.live.state import LiveState
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from tests.support.live import pump
from tests.support.synth import dump, entry

_ON_OPEN: dict[str, object] = {}  # path -> what to do when it is next opened (once)


def _hook(event: str, args: tuple) -> None:
    if event == "open" and args and isinstance(args[0], str) and args[0] in _ON_OPEN:
        _ON_OPEN.pop(args[0])()


sys.addaudithook(_hook)


def _source(tmp_path, limits=None):
    d = tmp_path / "dumps"
    d.mkdir(exist_ok=True)
    health = HealthRegistry()
    src = DumpDirSource(health, DumpDir(str(d), settle=0.0), limits=limits)
    return src, health, d


def _json_dump(n):
    return json.dumps(dump([entry(i, i + 1) for i in range(n)], world=2)).encode()


def test_a_file_swapped_after_the_check_is_decoded_as_checked(tmp_path):
    src, health, d = _source(tmp_path)
    path = str(d / "trace_0")
    with open(path, "wb") as f:
        f.write(_json_dump(3))
    other = tmp_path / "swap"
    other.write_bytes(pickle.dumps(dump([entry(i, i + 1) for i in range(7)], world=2), protocol=4))
    opened = []

    def swap():  # after the first open (the check), the name holds a pickle
        opened.append(1)
        _ON_OPEN[path] = lambda: (opened.append(2), os.replace(other, path))

    _ON_OPEN[path] = swap
    state = LiveState()
    try:
        src.start()
        deadline = time.monotonic() + 10
        while 0 not in state.latest_dumps() and time.monotonic() < deadline:
            pump(src, state)
            time.sleep(0.05)
        # whatever was opened later, the snapshot is the JSON that was checked, decoded once
        assert len(state.latest_dumps()[0].entries) == 3
        assert state.latest_dumps()[0].format == "json"
    finally:
        _ON_OPEN.clear()
        src.stop()


def test_a_fifo_swapped_in_before_the_open_does_not_block(tmp_path):
    src, health, d = _source(tmp_path)
    path = str(d / "trace_1")
    with open(path, "wb") as f:
        f.write(_json_dump(2))
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    _ON_OPEN[path] = lambda: os.replace(fifo, path)
    src.mark(path, closed=True)
    state = LiveState()
    t = threading.Thread(target=pump, args=(src, state), daemon=True)
    try:
        t.start()
        t.join(5)
        blocked = t.is_alive()
        if blocked:  # release the reader that main's plain open() left blocked
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        assert not blocked, "the source blocked on a FIFO"
        h = health.view()[0]
        # skipped and counted; the directory itself is readable: the source stays up
        assert h.up and h.errors == {"not_a_file": 1}, (h.errors, h.last_error)
    finally:
        _ON_OPEN.clear()
        src.stop()


def test_json_is_decoded_under_the_memory_limit(tmp_path):
    # 1.5 M distinct strings: ~13 MB of JSON, well over 64 MiB once decoded
    src, health, d = _source(tmp_path, limits=Limits(memory_bytes=64 << 20))
    (d / "trace_0").write_bytes(json.dumps([f"s{i}" for i in range(1_500_000)]).encode())
    (d / "trace_1").write_bytes(_json_dump(4))
    state = LiveState()
    try:
        src.start()
        deadline = time.monotonic() + 20
        while 1 not in state.latest_dumps() or not health.view()[0].errors:
            pump(src, state)
            assert time.monotonic() < deadline, health.view()
            time.sleep(0.05)
        assert health.view()[0].errors == {"too_large": 1}, health.view()[0].last_error
        assert len(state.latest_dumps()[1].entries) == 4  # the other rank is unaffected
    finally:
        src.stop()


def test_the_decoder_pool_is_shared_and_long_lived(tmp_path):
    pool = sandbox.DecoderPool(1, Limits())
    src, health, d = _source(tmp_path)
    src.pool, src._own_pool = pool, False
    state = LiveState()
    try:
        pool.start()
        pid = pool._idle[0].proc.pid
        for n in (2, 3, 4):
            (d / "trace_0").write_bytes(_json_dump(n))
            os.utime(d / "trace_0", ns=(n * 10**9, n * 10**9))
            src.mark(str(d / "trace_0"), closed=True)
            pump(src, state)
            assert len(state.latest_dumps()[0].entries) == n
        assert [w.proc.pid for w in pool._idle] == [pid]  # one process decoded all three
    finally:
        src.stop()
        pool.close()


def test_entries_shared_by_reference_do_not_stand_for_millions(tmp_path):
    """Issue 28 (still open from round 2): a 2 MB pickle repeating one entry (with a 512-frame stack) a
    million times by reference became a million entries in the sidecar (4 files: 32 -> 1706 MB) and
    held its loop. The sidecar keeps the newest dump_dirs[].max_entries (20000), says so, and a shared
    stack is converted once."""
    from frexport.decode.fields import MAX_FRAMES
    from tests.support.synth import frame

    e = entry(1, 1)
    e["frames"] = [frame(f"f{i}", "/job/x.py", i) for i in range(MAX_FRAMES)]
    data = pickle.dumps(dump([e] * 1_000_000, world=4), protocol=4)
    assert len(data) < 3 << 20
    src, health, d = _source(tmp_path)
    state = LiveState()
    try:
        for r in range(4):
            (d / f"trace_{r}").write_bytes(data)
            src.mark(str(d / f"trace_{r}"), closed=True)
        start = time.monotonic()
        pump(src, state)
        took = time.monotonic() - start
        dumps = state.latest_dumps()
        assert sorted(dumps) == [0, 1, 2, 3]
        assert all(len(x.entries) == 20000 for x in dumps.values())
        assert any("kept the newest 20000" in n for n in dumps[0].notes)
        assert took < 30, took  # the four decoded in a few seconds on a loaded 2-core machine, not minutes
    finally:
        src.stop()
