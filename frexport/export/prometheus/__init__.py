"""Prometheus metrics, built at scrape time by small collectors that only read.

One collector per concept, each in the module named after it, each with `describe()` and a sample
of its exposition in its docstring: rank_progress (per rank and group), collectives (counts and
durations), findings (the live analysis), waits (where each rank waits, for the job-wide rules),
sources (where snapshots come from), recorders (which Flight Recorders each rank is read from),
build_info. The sinks' self-metrics (evidence bundles, OTLP
spans) join them. `ScrapeCollector` (scrape.py) runs them all, timing each and isolating its
failures, as node_exporter does.

Nothing is a long-lived gauge: a rank or process group that is gone (expired from the state) is
simply not in the next scrape, so no stale series lingers. Every label is bounded (ranks of one pod,
process groups, ops, fixed sets of states and reasons); sequence numbers and timestamps are values.
Whatever the input, the scrape bounds each family's series and label values (bounds.py).
Job, pod and namespace come from the scrape target. docs/metrics.md describes every family.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector

from frexport.export.prometheus.bounds import DEFAULT_BOUNDS, Bounds
from frexport.export.prometheus.build_info import BuildInfoCollector
from frexport.export.prometheus.collectives import CollectivesCollector
from frexport.export.prometheus.findings import FindingsCollector
from frexport.export.prometheus.rank_progress import RankProgressCollector
from frexport.export.prometheus.recorders import RecordersCollector
from frexport.export.prometheus.scrape import ScrapeCollector
from frexport.export.prometheus.sources import SourcesCollector
from frexport.export.prometheus.waits import WaitsCollector
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.sink import Sink
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry

__all__ = ["Bounds", "BuildInfoCollector", "CollectivesCollector", "FindingsCollector", "RankProgressCollector",
           "RecordersCollector", "ScrapeCollector", "SourcesCollector", "WaitsCollector", "collectors",
           "scrape_collector", "sidecar_registry"]


def collectors(state: LiveState, health: HealthRegistry, analysis: LiveAnalysis,
               clock: Callable[[], float] = time.time) -> dict[str, Collector]:
    """frexport's own collectors by name (the `collector` label of the scrape self-metrics)."""
    return {
        "rank_progress": RankProgressCollector(state, analysis, clock),
        "collectives": CollectivesCollector(state),
        "findings": FindingsCollector(analysis, clock),
        "waits": WaitsCollector(state, analysis),
        "sources": SourcesCollector(health, state),
        "recorders": RecordersCollector(state),
        "build_info": BuildInfoCollector(),
    }


def scrape_collector(state: LiveState, health: HealthRegistry, analysis: LiveAnalysis, sinks: Iterable[Sink] = (),
                     clock: Callable[[], float] = time.time, bounds: Bounds = DEFAULT_BOUNDS) -> ScrapeCollector:
    """frexport's collectors and the sinks that have self-metrics (a `collect()`), under one scrape."""
    named = collectors(state, health, analysis, clock)
    for sink in sinks:
        if getattr(sink, "collect", None) is not None:
            if sink.name in named:
                raise ValueError(f"a sink is named like a collector: {sink.name}")
            named[sink.name] = sink  # type: ignore[assignment]  # has collect(): a Collector
    return ScrapeCollector(named, bounds=bounds, refused=state.refused)


def sidecar_registry(state: LiveState, health: HealthRegistry, analysis: LiveAnalysis,
                     sinks: Iterable[Sink] = (), clock: Callable[[], float] = time.time,
                     process: bool = True, bounds: Bounds = DEFAULT_BOUNDS) -> CollectorRegistry:
    """The registry `frexport serve` exposes: the scrape above and, with `process`, the `process_*`
    and `python_*` metrics about the sidecar itself (what every client_python exporter has).
    `auto_describe` makes registration refuse a name exposed twice."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(scrape_collector(state, health, analysis, sinks, clock, bounds))
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry
