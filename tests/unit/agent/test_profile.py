"""The agent's profiler with real torch (the venv's 2.13): the main thread's ops are in the trace,
and the bounds hold whatever the caller asks."""

import gzip
import json
import sys
import threading
import time

import pytest

from frexport.agent import profile
from frexport.agent.profile import Profiler, Refused

torch = pytest.importorskip("torch")


def _while_main_works(fn):
    """Run `fn` on a thread while this (the main) thread does torch work, as a trainer would."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    w = torch.randn(32, 32)
    while t.is_alive():
        for _ in range(10):
            w = torch.tanh(w @ w)
        time.sleep(0.001)
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_the_trace_holds_the_main_thread_s_ops_and_the_next_one_waits_its_interval():
    p = Profiler(interval_s=600, max_bytes=16 << 20)
    data = _while_main_works(lambda: p.take(0.5))
    doc = json.loads(gzip.decompress(data))
    main = threading.main_thread().native_id
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert any(e["name"] == "aten::mm" and e["tid"] == main for e in ops)
    with pytest.raises(Refused, match="one profile per 600 s") as refused:
        _while_main_works(lambda: p.take(0.5))
    assert refused.value.status == 429


@pytest.mark.parametrize("duration", [0, -1, 31, float("nan")])
def test_a_duration_out_of_bounds_is_refused_and_costs_nothing(duration):
    p = Profiler(interval_s=600, max_bytes=1 << 20)
    with pytest.raises(Refused) as refused:
        p.take(duration)
    assert refused.value.status == 400 and p._last is None


def test_a_main_thread_in_native_code_fails_the_request_in_bounded_time(monkeypatch):
    monkeypatch.setattr(profile, "START_WAIT_S", 1.0)
    p = Profiler(interval_s=0, max_bytes=1 << 20)
    box = {}

    main = threading.main_thread().ident

    def wait_in_c(lock):
        lock.acquire(timeout=60)  # the main thread waits in C, runs no Python, until the request ends

    def run():
        # the request begins only once the main thread is in the C call: were it still running the
        # Python before it (slow on a loaded machine), it would start the profile
        while sys._current_frames()[main].f_code is not wait_in_c.__code__:
            time.sleep(0.001)
        try:
            p.take(0.2)
        except Refused as exc:
            box["refused"] = exc

    lock = threading.Lock()
    lock.acquire()
    t = threading.Thread(target=lambda: (run(), lock.release()))
    start = time.monotonic()
    t.start()
    wait_in_c(lock)
    t.join()
    assert box["refused"].status == 504 and "stuck in native code" in str(box["refused"])
    assert time.monotonic() - start < 30
    time.sleep(0.05)  # the expired call runs now that the main thread runs Python: it does nothing
    assert not torch.autograd.profiler._is_profiler_enabled


def test_a_trace_over_the_size_bound_is_refused_not_cut():
    p = Profiler(interval_s=0, max_bytes=1000)
    with pytest.raises(Refused) as refused:
        _while_main_works(lambda: p.take(0.3))
    assert refused.value.status == 413
