"""`frexport_profile`: a short PyTorch profiler trace of this rank's training thread, on request.

Nothing runs in the trainer until a request comes: the handler is only registered. A request
(`POST /handler/frexport_profile?duration_s=5`) answers a gzip'd Chrome trace (Perfetto and
chrome://tracing open it) of `torch.profiler.profile` with CPU activities (CUDA where present) and
Python function events (`with_stack`), so `DataLoader.__next__` shows.

Why the profiler is started on the main thread: on torch 2.13.0+cpu, 2.14.1 and 2.15.0 a profiler
started on another thread (the worker server's, or any Python thread) records no op and no Python
function of the main thread, even with `profile_all_threads` (measured: only the starting thread's
own frames). So the handler prepares the profiler on its own thread (kineto's set-up takes seconds
and holds the GIL for part of it: measured in benchmarks/bench_profile.py) and has the main thread
start and stop it through CPython's pending calls, which the main thread runs between bytecodes
within milliseconds. A main thread that does not run Python (stuck in C++) never runs them: the
request then fails after START_WAIT_S and the late call does nothing.

Bounds (a buggy or hostile caller cannot profile continuously): one profile at a time, at most one
per FREXPORT_AGENT_PROFILE_INTERVAL seconds (default 600), `duration_s` at most MAX_DURATION_S,
the answer at most FREXPORT_AGENT_PROFILE_MAX_BYTES gzip'd (default 16 MiB; a larger trace is
refused, not cut).
"""

from __future__ import annotations

import ctypes
import gzip
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

PROFILE_HANDLER = "frexport_profile"  # the sidecar holds the same name (sources/handlers.py)
MAX_DURATION_S = 30.0
DEFAULT_DURATION_S = 5.0
START_WAIT_S = 10.0  # how long the main thread may take to run a pending call
DEFAULT_INTERVAL_S = 600.0
DEFAULT_MAX_BYTES = 16 << 20

_PENDING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class MainThreadCall:
    """Run `fn` on the main thread (CPython's pending calls) and wait for it; `None` if it did not run
    in time, and then it never runs (a late call finds itself expired)."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.expired = False
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._c = _PENDING(self._run)  # kept alive with this object until the call ran

    def _run(self, _arg) -> int:
        with self._lock:
            if self.expired:
                _keep.discard(self)
                return 0
        try:
            self.fn()
        except BaseException as exc:  # noqa: BLE001 - the trainer's thread must never see it
            self.error = exc
        self.done.set()
        _keep.discard(self)
        return 0

    def wait(self, timeout_s: float, expire: bool = True) -> bool:
        """Whether it ran within `timeout_s`; if not and `expire`, it never will, else it runs late."""
        _keep.add(self)
        if ctypes.pythonapi.Py_AddPendingCall(self._c, None) != 0:
            _keep.discard(self)
            return False
        end = time.monotonic() + timeout_s
        # CPython 3.11 and older set the main thread's eval breaker for a pending call only when the
        # main thread itself looks: waking every 2 ms asks it for the GIL, which makes it look.
        while not self.done.wait(0.002):
            if time.monotonic() >= end:
                if not expire:
                    return False
                with self._lock:
                    if not self.done.is_set():
                        self.expired = True
                        return False
        return True


_keep: set[MainThreadCall] = set()  # pending calls not yet run: their C callbacks must stay alive


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Profiler:
    """One profile at a time, at most one per `interval_s` (the first request after start is allowed)."""

    def __init__(self, interval_s: float, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.max_bytes = max_bytes
        self.clock = clock
        self._busy = threading.Lock()
        self._last: float | None = None

    def take(self, duration_s: float) -> bytes:
        """The gzip'd Chrome trace of `duration_s` seconds of the main thread; Refused says why not."""
        if not 0 < duration_s <= MAX_DURATION_S:
            raise Refused(400, f"duration_s must be above 0 and at most {MAX_DURATION_S:g}")
        if not self._busy.acquire(blocking=False):
            raise Refused(429, "a profile of this rank is being taken")
        try:
            now = self.clock()
            if self._last is not None and now - self._last < self.interval_s:
                raise Refused(429, f"one profile per {self.interval_s:g} s: the last began "
                                   f"{now - self._last:.0f} s ago")
            self._last = now
            return self._take(duration_s)
        finally:
            self._busy.release()

    def _take(self, duration_s: float) -> bytes:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        prof = profile(activities=activities, with_stack=True, record_shapes=False)
        prof.prepare_trace()  # here: kineto's set-up takes seconds, the main thread goes on meanwhile
        start = MainThreadCall(prof.start_trace)
        if not start.wait(START_WAIT_S):
            raise Refused(504, f"the main thread ran no Python for {START_WAIT_S:g} s (stuck in native code?): "
                               "no profile; its native stack says where it is")
        if start.error is not None:
            raise Refused(500, f"starting the profiler failed: {start.error!r}")
        time.sleep(duration_s)
        stop = MainThreadCall(prof.stop_trace)
        if not stop.wait(START_WAIT_S, expire=False):
            # the main thread went into native code mid-profile: the call stops it when it comes back
            raise Refused(504, "the main thread stopped running Python during the profile: no trace")
        if stop.error is not None:
            raise Refused(500, f"stopping the profiler failed: {stop.error!r}")
        tmp = tempfile.mkdtemp(prefix="frexport-profile-")
        try:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            return _gzip_capped(path, self.max_bytes)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _gzip_capped(path: str, max_bytes: int) -> bytes:
    out = tempfile.SpooledTemporaryFile(max_size=max_bytes)
    with open(path, "rb") as src, gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) as gz:
        while chunk := src.read(1 << 20):
            gz.write(chunk)
            if out.tell() > max_bytes:
                raise Refused(413, f"the trace is over {max_bytes} bytes gzip'd: shorten duration_s")
    out.seek(0)
    data = out.read()
    if len(data) > max_bytes:
        raise Refused(413, f"the trace is over {max_bytes} bytes gzip'd: shorten duration_s")
    return data


def make_handler(profiler: Profiler):
    def handler(req, resp) -> None:
        raw = req.get_param("duration_s") or str(DEFAULT_DURATION_S)
        try:
            data = profiler.take(float(raw))
        except ValueError:
            resp.set_content(f"duration_s: not a number: {raw[:40]!r}", "text/plain")
            resp.set_status(400)
            return
        except Refused as exc:
            resp.set_content(str(exc), "text/plain")
            resp.set_status(exc.status)
            return
        resp.set_content(data, "application/gzip")
        resp.set_status(200)

    return handler


def from_environment() -> Profiler:
    def num(name: str, default: float) -> float:
        try:
            return float(os.environ.get(name, default))
        except ValueError:
            return default

    return Profiler(num("FREXPORT_AGENT_PROFILE_INTERVAL", DEFAULT_INTERVAL_S),
                    int(num("FREXPORT_AGENT_PROFILE_MAX_BYTES", DEFAULT_MAX_BYTES)))
