"""`frexport_source_up` means "this source can be read and holds what it should", and a rank whose
process is gone is down at once, also when its sockets were left by a job that died before we started."""

import json
import logging
import os
import socket
import time

from frexport.config import DumpDir, WorkerServers
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource


def _up(health, name):
    return {h.name: h.up for h in health.view()}.get(name)


def _warnings(caplog, text):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


def test_a_missing_dump_dir_is_down_and_said_once(tmp_path, caplog):
    health = HealthRegistry()
    d = tmp_path / "dumps"
    src = DumpDirSource(health, DumpDir(str(d), rescan_interval=0.0))
    src.start()
    try:
        for _ in range(3):
            src.collect()
        assert _up(health, f"dumps:{d}") is False
        assert len(_warnings(caplog, "does not exist")) == 1
        d.mkdir()
        src.collect()
        assert _up(health, f"dumps:{d}") is True
    finally:
        src.stop()


def test_files_that_are_not_dumps_are_skipped_and_counted_never_a_failure(tmp_path):
    health = HealthRegistry()
    (tmp_path / "trace_0.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "trace_1").write_bytes(b"garbage")
    src = DumpDirSource(health, DumpDir(str(tmp_path), settle=0.0, rescan_interval=0.0))
    src.start()
    try:
        deadline = time.monotonic() + 10
        while sum(health.decode_errors().values()) < 2 and time.monotonic() < deadline:
            assert src.collect() == []
            time.sleep(0.05)
        assert health.decode_errors() == {"not_a_dump": 2}  # JSON without dump fields; not a pickle either
        assert _up(health, f"dumps:{tmp_path}") is True
    finally:
        src.stop()


def test_a_sockets_dir_without_a_socket_is_down_after_the_grace_period(tmp_path, caplog):
    health = HealthRegistry()
    d = tmp_path / "nonexistent"
    src = WorkerServerSource(health, WorkerServers(sockets_dir=str(d), poll_interval=0.01, startup_grace=0.3,
                                                   timeout=0.5))  # the listener below never answers
    src.collect()
    assert _up(health, f"sockets:{d}") is None  # the trainer may still be starting
    time.sleep(0.35)
    for _ in range(3):
        time.sleep(0.02)
        src.collect()
    assert _up(health, f"sockets:{d}") is False
    assert len(_warnings(caplog, "does not exist after 0.3 s")) == 1
    d.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(d / "rank-0.sock"))
    listener.listen(1)
    try:
        time.sleep(0.02)
        src.collect()
        assert _up(health, f"sockets:{d}") is True
    finally:
        listener.close()
        src.stop()


def _stale_socket(path):
    """A socket file whose process is gone: bound, then the listener closed (a SIGKILLed rank)."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def test_sockets_left_by_a_dead_job_are_down_at_the_next_start(tmp_path, caplog):
    for r in range(2):
        _stale_socket(tmp_path / f"rank-{r}.sock")
    health = HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(sockets_dir=str(tmp_path), poll_interval=0.01,
                                                   backoff_max=0.01))
    try:
        deadline = time.monotonic() + 5
        while src.down_ranks() != {0, 1} and time.monotonic() < deadline:
            assert src.collect() == []
            time.sleep(0.05)
        assert src.down_ranks() == {0, 1}
        assert _up(health, "socket:rank-0") is False
        assert len(_warnings(caplog, "socket:rank-0 refuses connections")) == 1
    finally:
        src.stop()


def test_a_rank_whose_pid_is_gone_is_down(tmp_path):
    listener = socket.socket(socket.AF_UNIX)  # still accepting (a hung server), but its process is gone
    listener.bind(str(tmp_path / "rank-0.sock"))
    listener.listen(1)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    pid_ns = os.readlink("/proc/self/ns/pid")
    (tmp_path / "rank-0.json").write_text(json.dumps({"rank": 0, "pid": dead, "pid_ns": pid_ns}))
    src = WorkerServerSource(HealthRegistry(), WorkerServers(sockets_dir=str(tmp_path), timeout=0.2))
    try:
        src.collect()
        assert src.down_ranks() == {0}
        # another pid namespace (a sidecar container without a shared process namespace): not trusted
        (tmp_path / "rank-0.json").write_text(json.dumps({"rank": 0, "pid": dead, "pid_ns": "pid:[1]"}))
        os.utime(tmp_path / "rank-0.json", ns=(1, 1))
        assert src.down_ranks() == set()
        (tmp_path / "rank-0.json").write_text(json.dumps({"rank": 0, "pid": os.getpid(), "pid_ns": pid_ns}))
        os.utime(tmp_path / "rank-0.json", ns=(2, 2))
        assert src.down_ranks() == set()
    finally:
        listener.close()
        src.stop()
