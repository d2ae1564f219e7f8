"""What every output of the sidecar loop is: a sink that takes each pass and returns at once.

Exporters that push (OTLP spans, evidence bundles) are sinks; the loop hands each of them the same
`Pass` and never waits on them: a sink queues its work and does it on its own thread. Metrics are
pulled at scrape time instead (Prometheus collectors read the live state and the latest analysis).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from frexport.live.diagnosis import LiveResult
from frexport.live.state import EntryEvent
from frexport.model.dump import RankDump


@dataclass(frozen=True)
class Pass:
    now_ns: int
    events: list[EntryEvent]  # entries first seen finished since the last pass
    result: LiveResult | None  # this pass's analysis; None when none ran (not due, or it failed)
    latest: LiveResult | None  # the newest analysis that succeeded, this pass's or an earlier one
    dumps: dict[int, RankDump] = field(default_factory=dict)  # every rank's latest snapshot
    gone_down: frozenset[int] = frozenset()  # ranks whose worker server stopped answering this pass


class Sink(Protocol):
    name: str

    def start(self) -> None: ...

    def consume(self, p: Pass) -> None:
        """Take a pass; must not block (queue and return)."""

    def stop(self, timeout_s: float) -> None:
        """Flush what is queued within the timeout, then release threads."""
