"""No process outlives `frexport serve` or `analyze`: decoder processes exit when their parent goes,
whatever stops it (SIGKILL, SIGTERM), even while blocked writing a result nobody reads (the
orphan of issue 30 sat 29 minutes in a write to a socket only it held)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support import paths
from tests.support.proctree import descendants
from tests.support.sidecar import Sidecar


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def _wait_gone(pids: list[int], within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _decoders(pid: int, want: int = 1, within: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = descendants(pid)
        if len(found) >= want:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no decoder process under {pid}")


# A parent that forks one decoder (from its main thread: the kernel's parent-death signal; from another
# thread: the lifeline pipe alone), hands it an item whose result
# (64 MiB) cannot fit the pipe, and never reads it: the decoder blocks in its write.
_BLOCKED = textwrap.dedent("""
    import multiprocessing, os, sys, threading, time
    from frexport.decode.sandbox import Limits, _Worker

    def big(_):
        return b"x" * (64 << 20)

    def start():
        # forked, as analyze's decoders are: the child holds a copy of the parent's end of the pipe,
        # so the parent's death is no EOF to it
        w = _Worker(multiprocessing.get_context("fork"), big, Limits())
        w.hello(Limits())
        w.conn.send([0])
        print(w.proc.pid, flush=True)
        time.sleep(3600)

    if __name__ == "__main__":
        if sys.argv[1] == "handler":  # as serve's: SIGTERM only sets a flag
            import signal
            signal.signal(signal.SIGTERM, lambda *_: None)
        if sys.argv[1] in ("main", "handler"):
            start()
        t = threading.Thread(target=start)
        t.start()
        t.join()
""")


@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_a_decoder_blocked_in_a_write_dies_with_its_killed_parent(tmp_path, started_from):
    script = tmp_path / "parent.py"
    script.write_text(_BLOCKED)
    parent = subprocess.Popen([sys.executable, str(script), started_from], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(paths.ROOT)})
    try:
        worker = int(parent.stdout.readline())
        deadline = time.monotonic() + 30  # until its result fills the pipe: it is blocked writing
        while time.monotonic() < deadline and _wchan(worker) in ("", "0"):
            time.sleep(0.05)
        assert _alive(worker)
    finally:
        parent.kill()
        parent.wait(10)
    assert _wait_gone([worker]) == []


def test_sigterm_ends_a_forked_decoder_whatever_handler_its_parent_has(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(_BLOCKED)
    parent = subprocess.Popen([sys.executable, str(script), "handler"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(paths.ROOT)})
    try:
        worker = int(parent.stdout.readline())
        os.kill(worker, signal.SIGTERM)
        assert _wait_gone([worker], within=10) == []
    finally:
        parent.kill()
        parent.wait(10)


def _wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_decoder_outlives_serve(tmp_path, sig):
    side = Sidecar("--dump-dir", str(paths.REAL_FIXTURES / "stuck_before_collective"), "--stall-after", "5s",
                   log=tmp_path / "serve.log")
    try:
        kids = _decoders(side.proc.pid)  # collected before the kill: afterwards they have another parent
        side.proc.send_signal(sig)
        side.proc.wait(30)
    finally:
        if side.proc.poll() is None:
            side.proc.kill()
            side.proc.wait(10)
    assert _wait_gone(kids) == [], (kids, (tmp_path / "serve.log").read_text()[-2000:])


def test_sigterm_ends_a_decoder_whatever_handler_serve_has(tmp_path):
    side = Sidecar("--dump-dir", str(paths.REAL_FIXTURES / "stuck_before_collective"), log=tmp_path / "serve.log")
    try:
        kid = _decoders(side.proc.pid)[0]
        os.kill(kid, signal.SIGTERM)
        assert _wait_gone([kid], within=10) == []
        assert side.proc.poll() is None  # serve itself goes on
    finally:
        side.stop()
