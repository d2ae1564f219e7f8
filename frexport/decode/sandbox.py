"""Run work on untrusted files in worker processes with memory and time limits.

Decoding is safe (no code runs), but not bounded: CPython's unpickler trusts
the memo index a pickle declares, so a few bytes can make it allocate
gigabytes. Each worker therefore runs under RLIMIT_AS (an allocation past the
limit becomes a MemoryError, i.e. a DecodeError) and a per-item deadline; a
worker that dies or overruns is killed and replaced, and only its item fails.
The pool also gives `frexport analyze` its parallelism.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Callable, Generic, Sequence, TypeVar

from frexport.decode.errors import DecodeError

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 << 30  # address space a worker may add on top of what it starts with
    seconds_per_item: float = 120.0


def _address_space_now() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _worker_main(conn: Connection, fn: Callable, memory_bytes: int) -> None:
    try:
        import resource

        limit = _address_space_now() + memory_bytes
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass  # no rlimit on this platform: the deadline still applies
    gc.disable()  # decoded dumps are acyclic; collection passes only cost time
    while True:
        try:
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


def _describe(item: object) -> str:
    return str(getattr(item, "path", item))[:300]


class _Worker:
    def __init__(self, ctx: mp.context.BaseContext, fn: Callable, limits: Limits) -> None:
        parent, child = ctx.Pipe()
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, args=(child, fn, limits.memory_bytes), daemon=True)
        self.proc.start()
        child.close()
        self.batch: list[int] = []
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class SandboxPool(Generic[T, R]):
    """`map(fn, items)` in limited worker processes; a failed item yields a DecodeError."""

    def __init__(self, workers: int | None = None, limits: Limits = Limits()) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.limits = limits

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R | DecodeError]:
        if not items:
            return []
        # fork is cheap and safe while single-threaded; a threaded daemon must not fork.
        method = "fork" if threading.active_count() == 1 and "fork" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        results: list[R | DecodeError | None] = [None] * len(items)
        chunk = max(1, min(16, len(items) // (self.workers * 4)))
        queue: list[list[int]] = [list(range(i, min(i + chunk, len(items)))) for i in range(0, len(items), chunk)]
        queue.reverse()  # pop() from the end keeps the original order
        n_workers = min(self.workers, len(queue))
        idle = [_Worker(ctx, fn, self.limits) for _ in range(n_workers)]
        busy: dict[Connection, _Worker] = {}
        try:
            while queue or busy:
                while queue and idle:
                    w = idle.pop()
                    w.batch = queue.pop()
                    w.deadline = time.monotonic() + self.limits.seconds_per_item * len(w.batch)
                    w.conn.send([items[i] for i in w.batch])
                    busy[w.conn] = w
                timeout = max(0.0, min(w.deadline for w in busy.values()) - time.monotonic())
                ready = wait(list(busy), timeout=timeout)
                for conn in ready:
                    w = busy.pop(conn)
                    try:
                        out = conn.recv()
                    except (EOFError, OSError):
                        out = None
                    if out is None or len(out) != len(w.batch):
                        self._failed(w, items, results, queue, "decoder process died (out of memory or crashed)")
                        w.kill()
                        idle.append(_Worker(ctx, fn, self.limits))
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
                        idle.append(_Worker(ctx, fn, self.limits))
        finally:
            for w in idle + list(busy.values()):
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            for w in idle + list(busy.values()):
                w.proc.join(1)
                if w.proc.is_alive():
                    w.kill()
        return results  # type: ignore[return-value]

    @staticmethod
    def _failed(w: _Worker, items: Sequence, results: list, queue: list[list[int]], why: str) -> None:
        if len(w.batch) > 1:  # retry one by one so only the guilty item fails
            queue.extend([i] for i in reversed(w.batch))
        else:
            i = w.batch[0]
            results[i] = DecodeError(_describe(items[i]), "decoder_failed", why)
