"""Run work on untrusted files in worker processes with memory and time limits.

Decoding is safe (no code runs), but not bounded: CPython's unpickler trusts
the memo index a pickle declares, so a few bytes can make it allocate
gigabytes. Each worker therefore runs under RLIMIT_AS (an allocation past the
limit becomes a MemoryError, i.e. a DecodeError) and a per-item deadline; a
worker that dies or overruns is killed and replaced, and only its item fails.
The pool also gives `frexport analyze` its parallelism; `DecoderPool` keeps workers
alive between items for the sidecar, which decodes one file or body at a time.

Each worker reports at start whether its memory limit is in force. Where it is
not (no RLIMIT_AS on the platform, setrlimit refused), `SandboxUnavailable` is
raised unless `Limits.require_memory_limit` is off: frexport refuses to decode
untrusted input without a bound unless told to go on.

A worker never outlives its parent, whatever stops the parent (SIGKILL included) and whatever the
worker is doing then (even blocked writing a large result into a pipe nobody reads): it holds the
read end of a lifeline pipe whose write end only the parent keeps, and a thread of its own exits
the process when that pipe reads EOF. Where the worker was started from the parent's main thread,
the kernel's parent-death signal (prctl PR_SET_PDEATHSIG, Linux) kills it too; not from other
threads, since that signal follows the thread that forked, and a poller thread may end first.
The worker also drops the signal handlers it inherits (`frexport serve`'s SIGTERM handler):
SIGTERM ends it.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Callable, Generic, Sequence, TypeVar, cast

from frexport.decode.errors import DecodeError

T = TypeVar("T")
R = TypeVar("R")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 << 30  # address space a worker may add on top of what it starts with
    seconds_per_item: float = 120.0
    require_memory_limit: bool = True  # False: decode even where the limit cannot be set (warned)


class SandboxUnavailable(Exception):
    """The decoder processes cannot be given a memory limit here (the reason is the message)."""


def address_space_now() -> int:
    """This process's address space (VmSize) in bytes, 0 where it cannot be read. statm's first field,
    in pages: read before every large JSON decode, and about 5x cheaper than parsing /proc/self/status."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split(maxsplit=1)[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _set_memory_limit(memory_bytes: int) -> str | None:
    """Limit this process's address space; None when a limit is in force, else why not."""
    try:
        import resource
    except ImportError:
        return "this platform has no resource limits (RLIMIT_AS)"
    try:
        now = address_space_now()
        if not now:
            return "the process's address space cannot be measured (no /proc/self/status)"
        limit = now + memory_bytes
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY and hard <= limit:
            return None  # a harder limit is already in force
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        if resource.getrlimit(resource.RLIMIT_AS)[0] != limit:
            return "setrlimit(RLIMIT_AS) was accepted but not applied"
    except (ValueError, OSError) as exc:
        return f"setrlimit(RLIMIT_AS) failed: {exc}"
    return None


def call(job: Callable[[], R]) -> R:
    """The generic worker function: a job is a picklable callable object (see DecoderPool)."""
    return job()


def _worker_main(conn: Connection, fn: Callable, memory_bytes: int, parent: int,
                 lifeline: tuple[Connection, Connection] | None = None, death_signal: bool = False) -> None:
    # Ctrl-C reaches the terminal's whole process group: the parent handles it and stops its workers
    # (their tracebacks would bury its message). SIGTERM ends a worker, whatever handler its parent had.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held by the parent while it started us
    if lifeline is not None:
        _watch_parent(*lifeline, death_signal)
    if os.getppid() != parent:  # the parent died before the watch began
        return
    # First message: whether the limit is in force (the parent refuses to go on without one).
    conn.send(("limit", _set_memory_limit(memory_bytes)))
    gc.disable()  # decoded dumps are acyclic; collection passes only cost time
    while True:
        try:
            # A forked worker holds its own copy of the parent's end of the pipe, so the parent's
            # death (even SIGKILL) never reads as EOF here: look at who the parent is instead.
            while not conn.poll(1.0):
                if os.getppid() != parent:
                    return
            batch = conn.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        results = []
        for item in batch:
            try:
                results.append(fn(item))
            except DecodeError as exc:
                results.append(exc)
            except MemoryError:
                results.append(DecodeError(_describe(item), "too_large",
                                           "needs more memory than the decode limit allows"))
            except Exception as exc:  # a bug must not take the pool down; report it per item
                results.append(DecodeError(_describe(item), "internal", f"{type(exc).__name__}: {exc}"))
        try:
            conn.send(results)
        except MemoryError:
            conn.send([DecodeError(_describe(i), "too_large", "result too large") for i in batch])


def _watch_parent(reader: Connection, writer: Connection, death_signal: bool) -> None:
    """Exit when the parent goes: EOF on the lifeline (its write end is the parent's alone), and the
    kernel's parent-death signal where it applies (see the module docstring)."""
    writer.close()  # a forked worker inherits the write end: only the parent may hold it
    if death_signal:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # not Linux: the lifeline alone

    def watch() -> None:
        try:
            reader.recv_bytes()  # the parent never writes: this returns only on EOF
        except (EOFError, OSError):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="frexport-lifeline", daemon=True).start()


_PR_SET_PDEATHSIG = 1


def _describe(item: object) -> str:
    return str(getattr(item, "path", item))[:300]


class _Worker:
    def __init__(self, ctx: mp.context.ForkContext | mp.context.SpawnContext, fn: Callable, limits: Limits) -> None:
        parent, child = ctx.Pipe()
        self.conn = parent
        reader, self.lifeline = ctx.Pipe(duplex=False)
        main = threading.current_thread() is threading.main_thread()
        self.proc = ctx.Process(target=_worker_main, daemon=True, args=(
            child, fn, limits.memory_bytes, os.getpid(), (reader, self.lifeline), main))
        # the worker starts with Ctrl-C held until it ignores it (the mask is inherited through fork and
        # exec): one landing while it starts printed its KeyboardInterrupt traceback under our one line.
        # Here it waits, and reaches this thread (the process) once the worker is started.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        child.close()
        reader.close()
        self.batch: list[int] = []
        self.deadline = 0.0
        self.items = 0  # handled so far (where its memory cannot be read, it is recycled after a number)
        self.started_rss: int | None = None
        self._statm: int | None = None  # its /proc statm, held open: read after every item

    def rss_bytes(self) -> int | None:
        """Its resident memory (Linux's /proc), None where that cannot be read. (The file stays open: opening
        it took ~10 us, after each of a 16384-rank view's 2048 bodies a pass.)"""
        try:
            if self._statm is None:
                self._statm = os.open(f"/proc/{self.proc.pid}/statm", os.O_RDONLY)
            return int(os.pread(self._statm, 128, 0).split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return None

    def hello(self, limits: Limits) -> str | None:
        """Wait for the worker's report on its memory limit; raise SandboxUnavailable if required and
        missing. Returns the problem when the limit is not required."""
        problem: str | None = "the decoder process did not start"
        if self.conn.poll(60):
            try:
                _, problem = self.conn.recv()
            except (EOFError, OSError, ValueError, TypeError):
                pass
        if problem is not None and limits.require_memory_limit:
            self.kill()
            raise SandboxUnavailable(problem)
        return problem

    def finish(self) -> None:
        """After it was told to stop: give it a second, then kill it; close our ends either way."""
        self.proc.join(1)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self._close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self._close()

    def _close(self) -> None:
        """Our ends of its pipe and lifeline, and its memory's file."""
        self.conn.close()
        self.lifeline.close()
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None


def _context() -> mp.context.ForkContext | mp.context.SpawnContext:
    # fork is cheap and safe while single-threaded; a threaded daemon must not fork.
    if threading.active_count() == 1 and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context("spawn")


class SandboxPool(Generic[T, R]):
    """`map(fn, items)` in limited worker processes; a failed item yields a DecodeError."""

    def __init__(self, workers: int | None = None, limits: Limits = Limits()) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.limits = limits
        self.limit_problem: str | None = None  # set when a worker runs without its memory limit

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R | DecodeError]:
        if not items:
            return []
        ctx = _context()
        results: list[R | DecodeError | None] = [None] * len(items)
        # batches of up to 16 items, smaller towards the end (a quarter of what is left per worker), so
        # that the workers finish together instead of one waiting on the other's last batch
        queue: list[list[int]] = []
        i = 0
        while i < len(items):
            size = max(1, min(16, (len(items) - i) // (self.workers * 4)))
            queue.append(list(range(i, i + size)))
            i += size
        queue.reverse()  # pop() from the end keeps the original order
        n_workers = min(self.workers, len(queue))
        idle: list[_Worker] = []
        busy: dict[Connection, _Worker] = {}
        try:  # from the first start on: a Ctrl-C or an error while starting still stops those started
            for _ in range(n_workers):
                idle.append(_Worker(ctx, fn, self.limits))
            for w in idle:
                self.limit_problem = w.hello(self.limits) or self.limit_problem
            while queue or busy:
                while queue and idle:
                    w = idle.pop()
                    w.batch = queue.pop()
                    w.deadline = time.monotonic() + self.limits.seconds_per_item * len(w.batch)
                    w.conn.send([items[i] for i in w.batch])
                    busy[w.conn] = w
                timeout = max(0.0, min(w.deadline for w in busy.values()) - time.monotonic())
                ready = cast("list[Connection]", wait(list(busy), timeout=timeout))  # busy's own
                for conn in ready:
                    w = busy.pop(conn)
                    try:
                        out = conn.recv()
                    except (EOFError, OSError):
                        out = None
                    if out is None or len(out) != len(w.batch):
                        self._failed(w, items, results, queue, "decoder process died (out of memory or crashed)")
                        w.kill()
                        idle.append(self._fresh(ctx, fn))
                        continue
                    for i, r in zip(w.batch, out):
                        results[i] = r
                    idle.append(w)
                now = time.monotonic()
                for conn, w in list(busy.items()):
                    if w.deadline <= now:
                        del busy[conn]
                        self._failed(w, items, results, queue, f"timed out after {self.limits.seconds_per_item:.0f} s")
                        w.kill()
                        idle.append(self._fresh(ctx, fn))
        finally:
            for w in idle + list(busy.values()):
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            for w in idle + list(busy.values()):
                w.finish()
        return results  # type: ignore[return-value]

    def _fresh(self, ctx: mp.context.ForkContext | mp.context.SpawnContext, fn: Callable) -> _Worker:
        w = _Worker(ctx, fn, self.limits)
        w.hello(self.limits)
        return w

    @staticmethod
    def _failed(w: _Worker, items: Sequence, results: list, queue: list[list[int]], why: str) -> None:
        if len(w.batch) > 1:  # retry one by one so only the guilty item fails
            queue.extend([i] for i in reversed(w.batch))
        else:
            i = w.batch[0]
            results[i] = DecodeError(_describe(items[i]), "decoder_failed", why)


class DecoderPool:
    """Long-lived limited workers for the sidecar: `run(job)` calls `job()` in one of them.

    A fresh interpreter per file costs a fifth of a CPU-second; these stay alive between items and
    are replaced when one dies, overruns its deadline, or has grown by more than `recycle_rss_bytes`
    after an item (the allocator keeps what a large decode grew). Where a worker's memory cannot be
    read, it is replaced after `recycle_after` items instead: by count, a 16384-rank job view (2048
    bodies a pass) started four interpreters a pass for workers that had grown nothing. Thread-safe:
    the loop and the poller's threads share it; at most `workers` jobs run at once, the others wait
    their turn.
    """

    def __init__(self, workers: int = 2, limits: Limits = Limits(), recycle_after: int = 500,
                 recycle_rss_bytes: int = 64 << 20) -> None:
        self.workers = max(1, workers)
        self.limits = limits
        self.recycle_after = recycle_after
        # (the sidecar's container has 256 MiB in all by default: a worker may not keep much of a large decode)
        self.recycle_rss_bytes = recycle_rss_bytes
        self.limit_problem: str | None = None
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()
        self._ctx: mp.context.ForkContext | mp.context.SpawnContext | None = None
        self._closed = False
        self.started = 0  # workers started so far (the first ones and every replacement)

    def start(self) -> None:
        """Start one worker now: raises SandboxUnavailable where no memory limit can be set."""
        w = self._new()
        with self._cond:
            self._idle.append(w)

    def _new(self) -> _Worker:
        if self._ctx is None:
            self._ctx = _context()
        with self._cond:
            self._count += 1
            self.started += 1
        try:
            w = _Worker(self._ctx, call, self.limits)
            self.limit_problem = w.hello(self.limits) or self.limit_problem
            w.started_rss = w.rss_bytes()  # (a forked worker starts with its parent's pages resident)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        return w

    def _acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._count >= self.workers:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
        return self._new()

    def _release(self, w: _Worker | None) -> None:
        with self._cond:
            if w is not None and not self._closed:
                self._idle.append(w)
            else:
                self._count -= 1
            self._cond.notify()
        if w is not None and self._closed:
            w.kill()

    def run(self, job: Callable[[], R]) -> R | DecodeError:
        w = self._acquire()
        why = None
        try:
            w.conn.send([job])
            if w.conn.poll(self.limits.seconds_per_item):
                out = w.conn.recv()
                if isinstance(out, list) and len(out) == 1:
                    w.items += 1
                    result = out[0]
                    if self._spent(w):
                        w.kill()
                        self._release(None)
                    else:
                        self._release(w)
                    return result
                why = "decoder process sent no result"
            else:
                why = f"timed out after {self.limits.seconds_per_item:.0f} s"
        except (EOFError, OSError):
            why = "decoder process died (out of memory or crashed)"
        w.kill()
        self._release(None)
        return DecodeError(_describe(job), "decoder_failed", why or "decoder failed")

    def _spent(self, w: _Worker) -> bool:
        rss = w.rss_bytes()
        if rss is None or w.started_rss is None:
            return w.items >= self.recycle_after
        return rss - w.started_rss > self.recycle_rss_bytes

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            try:
                w.conn.send(None)
            except OSError:
                pass
            w.finish()
