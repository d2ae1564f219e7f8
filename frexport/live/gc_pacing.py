"""Keeps the garbage collector off the window the live loop holds between passes.

Each pass leaves behind what the next one reuses: every rank's snapshot and its trace. In the
job-level view that is millions of objects, and a pass allocates enough new ones that CPython's
collector runs its oldest generation several times a pass, re-walking all of them only to find them
alive (measured: 1.5-6 CPU seconds of a 4096-rank pass of 5). What leaves the window is freed by
reference counting the moment it is dropped; only reference cycles need the collector. So the loop
runs with automatic collection off; after each pass it collects the young generations once (what
the pass allocated: its cycles are freed within the pass they were made in) and freezes the
survivors (`gc.freeze`: left out of collections, still freed as soon as nothing refers to them);
every `full_every` passes everything is unfrozen and collected, so a cycle among survivors lives at
most that many passes.
"""

from __future__ import annotations

import gc


class GcPacing:
    def __init__(self, full_every: int = 12) -> None:
        self.full_every = full_every
        self.passes = 0
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def after_pass(self) -> None:
        self.passes += 1
        if self.passes % self.full_every == 0:
            gc.unfreeze()
            gc.collect()
        else:
            gc.collect(1)
        gc.freeze()

    def stop(self) -> None:
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()
