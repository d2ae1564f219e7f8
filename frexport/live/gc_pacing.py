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
(`full_share`, 5%): the 4096-rank view (3.6 s) about every 72 s. The first pass is only frozen and the first full
collection comes a minute after it: that pass builds everything there is, and walking it all then
cost the 16384-rank view's first pass more than its analysis did.

The young collection walks every object the pass left behind. A busy sidecar leaves tens of thousands
(milliseconds); a 16384-rank view's pass leaves millions (every rank's new entries), and walking them
cost it 1.6-1.8 s of each pass to free a few dozen objects. Where a young collection took more than
`young_max_s`, the passes after it are only frozen: their cycles wait for the paced full collection,
which frees them all the same, and after which one young collection measures again. (What the pass
left is not known in advance: the collector's count is allocations less deallocations, near zero
where as many entries left the window as came in.)
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


class GcPacing:
    def __init__(self, full_share: float = 0.05, full_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, young_max_s: float = 0.1) -> None:
        self.full_share = full_share
        self.full_every_s = full_every_s
        self.young_max_s = young_max_s
        self._young = True  # the last young collection was cheap enough to run after each pass
        self.clock = clock
        self.last_full_s = 0.0  # what the last full collection cost
        self._next_full: float | None = None  # set by the first pass: a full collection is due a minute on
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        self._next_full = None
        gc.disable()

    def after_pass(self) -> None:
        now = self.clock()
        if self._next_full is None:  # the first pass built everything there is: nothing to walk for
            self._next_full = now + self.full_every_s
            gc.freeze()
            return
        if now >= self._next_full:
            gc.unfreeze()
            gc.collect()
            end = self.clock()
            self.last_full_s = end - now
            self._next_full = end + max(self.full_every_s, self.last_full_s / self.full_share)
            self._young = True
        elif self._young:
            gc.collect(1)
            self._young = self.clock() - now <= self.young_max_s
        gc.freeze()

    def stop(self) -> None:
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()
