"""`frexport serve`'s loop: sources -> live state -> live analysis -> sinks, on one thread.

The loop only moves data one way. Each iteration asks every source for its new snapshots and
ingests them, runs the live analysis when it is due, expires ranks and groups no snapshot holds any
more, and hands the pass to every sink. Sinks queue and return, so a slow collector or a rank whose
stack handler never answers cannot stop polling or analysis. Each stage is guarded: a failure is
logged with its traceback and the loop goes on. Metrics are served from the web server's threads,
reading the state and `analysis.latest`. On SIGTERM the loop stops and the sinks flush.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from frexport import logs
from frexport.config import Analysis
from frexport.decode.sandbox import DecoderPool
from frexport.live.diagnosis import LiveAnalysis, LiveResult
from frexport.live.gc_pacing import GcPacing
from frexport.live.sink import Pass, Sink
from frexport.live.state import EntryEvent, LiveState
from frexport.sources.base import Snapshot, Source
from frexport.sources.health import HealthRegistry

# Which ranks are down (refused sockets, dead pids: a stat and a kill(0) per rank) is looked at once a
# second, not at every turn of the loop (5 a second): the status reads it follows come once a second.
# So is what expired: ranks and series expire after minutes, and the pass goes over every group.
DOWN_EVERY_S = EXPIRE_EVERY_S = 1.0
# The loop sleeps until the next thing is due: a source's next poll where it says when (`next_due`), the
# next analysis, down ranks, expiry; at most TICK_S where a source cannot say (a dump directory's file
# events). A turn that finds nothing due cost ~0.17 ms of CPU: five a second were a third of an idle
# sidecar's. Never less than MIN_WAIT_S nor more than MAX_WAIT_S, whatever a source says. The loop wakes
# TOGETHER_S after the first thing due, so that what comes due within that of it (a source's poll stamped a
# few µs after the turn's down ranks and expiry) is done in the same turn, not in one of its own.
TICK_S, MIN_WAIT_S, MAX_WAIT_S, TOGETHER_S = 0.2, 0.01, 1.0, 0.002


class Sidecar:
    def __init__(self, cfg: Analysis, state: LiveState, health: HealthRegistry, sources: list[Source],
                 sinks: list[Sink], down_ranks: Callable[[], set[int]] | None = None,
                 decoder: DecoderPool | None = None, scoped: bool = True) -> None:
        self.cfg = cfg
        self.state = state
        self.health = health
        self.sources = sources
        self.sinks = sinks
        self.analysis = LiveAnalysis(cfg, scoped)
        self.down_ranks = down_ranks  # ranks whose process is known gone (refused connections)
        self.decoder = decoder or DecoderPool()  # the sources' sandboxed decoders, closed at shutdown
        self.stop_event = threading.Event()
        self.ready_event = threading.Event()
        self._was_down: set[int] = set()
        self.gc_pacing = GcPacing()

    def run(self, install_signals: bool = True) -> None:
        log = logs.get()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop_event.set())
        parts: list[Source | Sink] = [*self.sources, *self.sinks]
        for part in parts:
            self._guarded(part.start, f"starting {part.name}")
        log.info("frexport serve: sources: %s; sinks: %s", ", ".join(s.name for s in self.sources) or "none",
                 ", ".join(s.name for s in self.sinks) or "none")
        next_analysis = last_analysis = 0.0
        down: set[int] = set()
        down_at = expired_at = -DOWN_EVERY_S
        self.gc_pacing.start()
        try:
            while not self.stop_event.is_set():
                turn = time.monotonic()  # what is due once a second is stamped at the turn's time
                events, suspected = self._collect()
                if turn - down_at >= DOWN_EVERY_S:
                    down, down_at = self._down(), turn
                result, analysed = None, False
                if suspected:  # a source suspects a stall: it is named once it passes the threshold, not later
                    next_analysis = min(next_analysis, last_analysis + self.cfg.suspected_interval)
                if time.monotonic() >= next_analysis:
                    last_analysis, analysed = time.monotonic(), True
                    result = self._guarded(lambda d=down: self.analysis.run(self.state.latest_dumps(), d,
                                                                             self._contested()), "analysis")
                    next_analysis = time.monotonic() + self.cfg.interval
                    for f in result.new_root_causes if result is not None else ():
                        # said once per hang (a root cause that clears and returns is said again): the log
                        # is where an operator without dashboards, or a failing test, reads what was found.
                        # Info, not warning: finding hangs is frexport working; its warnings are its own troubles
                        log.info("found %s: %s (%s)", f.kind, f.message, f.reason, extra={"kind": f.kind})
                    self.ready_event.set()
                if turn - expired_at >= EXPIRE_EVERY_S:
                    expired_at = turn
                    self._guarded(lambda: self.state.expire(time.time_ns(), int(self.cfg.rank_expiry * 1e9)), "expiry")
                self._hand_out(events, result, down)
                if analysed:  # (after the pass's results are handed out: they do not wait for the collector)
                    self.gc_pacing.after_pass()
                due = min(self._next_due(), next_analysis, down_at + DOWN_EVERY_S, expired_at + EXPIRE_EVERY_S)
                self.stop_event.wait(min(MAX_WAIT_S, max(MIN_WAIT_S, due - time.monotonic() + TOGETHER_S)))
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        parts: list[Source | Sink] = [*self.sinks, *self.sources]
        for part in parts:
            self._guarded(lambda p=part: p.stop(2.0) if p in self.sinks else p.stop(), f"stopping {part.name}")
        self._guarded(self.decoder.close, "stopping the decoders")
        self.gc_pacing.stop()

    # --- one pass ------------------------------------------------------------------------------

    def _collect(self) -> tuple[list[EntryEvent], bool]:
        """The events of what the sources took, and whether one of them suspects a stall."""
        events: list[EntryEvent] = []
        suspected = False
        for source in self.sources:
            snapshots = self._guarded(source.collect, f"source {source.name}") or []
            drain = getattr(source, "drain_forgotten", None)  # a source whose ranks can leave (peers)
            if drain is not None:
                self.state.forget(drain())
            events.extend(take_in(self.state, snapshots))
            suspects = getattr(source, "stall_suspected", None)  # a source that can suspect a stall
            suspected = suspected or bool(suspects is not None and suspects())
        return events, suspected

    def _next_due(self) -> float:
        """When the next source is due (monotonic): its `next_due()` where it has one, else a tick away."""
        now = time.monotonic()
        dues = [s.next_due() if hasattr(s, "next_due") else now + TICK_S for s in self.sources]
        return min(dues, default=now + TICK_S)

    def _contested(self) -> frozenset[int]:
        """Ranks two peers claim at once, neither believed (a source whose ranks come from peers)."""
        out: set[int] = set()
        for source in self.sources:
            collisions = getattr(source, "collisions", None)
            if isinstance(collisions, dict):
                out.update(r for r, (owner, _others) in collisions.items() if owner is None)
        return frozenset(out)

    def _down(self) -> set[int]:
        return set(self._guarded(self.down_ranks, "down ranks") or ()) if self.down_ranks else set()

    def _hand_out(self, events: list[EntryEvent], result: LiveResult | None, down: set[int]) -> None:
        gone_down, self._was_down = frozenset(down - self._was_down), down
        latest = self.analysis.latest
        if not self.sinks:
            return
        p = Pass(time.time_ns(), events, result, latest, self.state.latest_dumps() if result or gone_down else {},
                 gone_down)
        for sink in self.sinks:
            self._guarded(lambda s=sink: s.consume(p), f"sink {sink.name}")

    @staticmethod
    def _guarded(step: Callable, what: str):
        try:
            return step()
        except Exception:  # noqa: BLE001 - the daemon outlives any one failure
            logs.get().exception("%s failed", what)
            return None


def take_in(state: LiveState, snapshots: list[Snapshot]) -> list[EntryEvent]:
    """A source's snapshots into the state: entries ingested (their events returned), a status read
    alone taken as one."""
    events: list[EntryEvent] = []
    for snap in snapshots:
        rank = snap.dump.rank
        assert rank is not None  # (for mypy) a source's snapshot always has its rank
        if snap.status_only:
            state.observe_status(rank, snap.groups or {}, snap.taken_ns)
            continue
        events.extend(state.ingest(snap.dump, snap.source, snap.taken_ns, snap.groups))
        if snap.timeout_dump:
            state.count_timeout_dump(rank)
    return events
