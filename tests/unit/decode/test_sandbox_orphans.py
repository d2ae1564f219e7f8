"""A decoder worker never outlives the process that started it: a sidecar killed by SIGKILL or the
OOM killer must not leave its decoders running."""

import os
import signal
import subprocess
import sys
import time

_PARENT = """
import multiprocessing as mp, time
from frexport.decode.sandbox import Limits, _Worker, call
w = _Worker(mp.get_context("fork"), call, Limits())
print(w.proc.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, waiting for init to reap it
    except OSError:
        return True


def test_workers_end_when_their_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _gone(worker):
        os.kill(worker, signal.SIGKILL)  # leave nothing behind, then fail
        raise AssertionError("the decoder worker outlived its parent")
