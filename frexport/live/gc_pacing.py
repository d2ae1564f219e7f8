"""Keeps the garbage collector off the window the live loop holds between passes.

Each pass leaves behind what the next one reuses: every rank's snapshot and its trace. In the
job-level view that is millions of objects, and a pass allocates enough new ones that CPython's
collector runs its oldest generation several times a pass, re-walking all of them only to find them
alive (measured: 1.5-6 CPU seconds of a 4096-rank pass of 5). What leaves the window is freed by
reference counting the moment it is dropped; only reference cycles need the collector. So the loop
runs with automatic collection off; after each pass it collects the young generations once (what
the pass allocated: its cycles are freed within the pass they were made in) and freezes the
survivors (`gc.freeze`: left out of collections, still freed as soon as nothing refers to them).

A cycle among the frozen (an exception kept past a pass, a sink's state) is freed only by a full
collection. Such cycles are rare: on a busy 8-rank sidecar a full collection found only one closure
of the analysis that referred to itself (18 objects a pass, since gone), yet it cost 13-27 ms of
CPU, which after every 5 s pass was close to half of the sidecar's 1% budget. So it runs at most
once a minute (`full_every_s`), and less often where it costs more than a share of the loop's time
(`full_share`, 5%): the 4096-rank view (3.6 s) about every 72 s. And it backs off where it finds
nothing, as the young one does: a busy 2-rank sidecar's walked ~30,000 objects in ~20 ms a minute and
found none (a fifth of what it costs watching paused ranks). Each that finds nothing doubles the time to
the next, up to `full_every_max_s` (10 minutes: how long a cycle among the frozen can wait); one that
finds anything brings it back to `full_every_s`.

The young collection itself backs off where it costs and finds nothing: in a big view it walks what
each pass allocated and kept (0.07-0.08 s a steady pass of a 4096-rank view, ~0.3 s at 16384 ranks
before the windows were untracked, a twentieth of the pass) and found no cycle at all. Each one that
finds nothing and took at least `young_share` of the pass before it doubles the passes until the next
(up to `young_every_max`); one that finds anything, or costs less, brings it back to every pass. A
skipped pass is not frozen: what it made stays young and the next young collection walks it (what died
meanwhile has left the lists already), so its cycles wait a few passes, never for the full collection.
Freezing them instead let the sidecar's cycles wait for the full collection (its OTLP exporter's
timeouts kept with their tracebacks while the collector is down: 70 to 20000 objects a pass, in
bursts), and its soak's memory climbed 12-39 MB/min. The sidecar's young collection, ~2 ms a 5 s pass,
is under the share: it never backs off.

The first pass is frozen without a collection: all it keeps is young (the whole window, every rank's
snapshot and trace), so collecting it walked all of that to find it alive, and it came before the
first pass's results were handed out (2.2 s of a 4096-rank view's first pass of 6.3 CPU s; 8.6-9.8 s at
16384 ranks, in bench_jobview.py, which also walked the simulated pods' data). Its cycles, if any, wait
for the first full collection, `full_every_s` later.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


class GcPacing:
    def __init__(self, full_share: float = 0.05, full_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, young_every_max: int = 16,
                 young_share: float = 0.01, full_every_max_s: float = 600.0) -> None:
        self.full_share = full_share
        self.full_every_s = full_every_s
        self.full_every_max_s = full_every_max_s
        self.full_every = full_every_s  # from one full collection to the next, at least
        self.clock = clock
        self.young_every_max = young_every_max
        self.young_share = young_share
        self.last_full_s = 0.0  # what the last full collection cost
        self.young_every = 1  # passes from one young collection to the next
        self._passes_since_young = 0
        self._pass_start: float | None = None  # when the last call ended: the pass since began
        self._next_full: float | None = None  # (None: no pass yet)
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def after_pass(self) -> None:
        now = self.clock()
        pass_s = now - self._pass_start if self._pass_start is not None else 0.0
        if self._next_full is None:
            self._next_full = now + self.full_every_s
        elif now >= self._next_full:
            gc.unfreeze()
            found = gc.collect()
            end = self.clock()
            self.last_full_s = end - now
            self.full_every = self.full_every_s if found else min(self.full_every_max_s, 2 * self.full_every)
            self._next_full = end + max(self.full_every, self.last_full_s / self.full_share)
        else:
            self._passes_since_young += 1
            if self._passes_since_young < self.young_every:
                self._pass_start = self.clock()
                return  # (not frozen: the next young collection walks what this pass made)
            self._passes_since_young = 0
            found = gc.collect(1)
            costly = self.clock() - now >= self.young_share * pass_s
            self.young_every = min(self.young_every_max, 2 * self.young_every) if costly and not found else 1
        gc.freeze()
        self._pass_start = self.clock()

    def stop(self) -> None:
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()
