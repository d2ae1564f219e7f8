"""One scrape over named collectors, each timed and isolated (node_exporter's `execute()`).

    # HELP frexport_scrape_collector_duration_seconds Time each collector took in this scrape
    # TYPE frexport_scrape_collector_duration_seconds gauge
    frexport_scrape_collector_duration_seconds{collector="rank_progress"} 0.0021
    # HELP frexport_scrape_collector_success 1 if the collector succeeded in this scrape, 0 if it raised
    # TYPE frexport_scrape_collector_success gauge
    frexport_scrape_collector_success{collector="rank_progress"} 1.0
    frexport_scrape_collector_success{collector="findings"} 0.0

A collector that raises contributes none of its families (not half of them) and is logged with its
traceback; every other collector's families are still served, so one bug costs a few panels, not
the whole target (`up` stays 1; the health dashboard counts `frexport_scrape_collector_success == 0`).

Every family passes through `bounds.bound_family` inside the same isolation: label values valid UTF-8
and bounded in length, values clamped, at most `max_series_per_family` series, the rest counted in
`frexport_metrics_series_dropped_total{family}` (with what the state refused to keep, `refused`).

The children are wrapped by one registered collector rather than registered one by one because
the two families above must appear once, with one series per child. Duplicate names among the
children are refused at construction, as `CollectorRegistry(auto_describe=True)` would.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from frexport import logs
from frexport.export.prometheus.bounds import DEFAULT_BOUNDS, Bounds, bound_family


class _Families(NamedTuple):
    duration: GaugeMetricFamily
    success: GaugeMetricFamily
    dropped: CounterMetricFamily


def _families() -> _Families:
    return _Families(
        GaugeMetricFamily("frexport_scrape_collector_duration_seconds", "Time each collector took in this scrape",
                          labels=["collector"]),
        GaugeMetricFamily("frexport_scrape_collector_success",
                          "1 if the collector succeeded in this scrape, 0 if it raised", labels=["collector"]),
        CounterMetricFamily("frexport_metrics_series_dropped",
                            "Series left out of scrapes because their family reached its bound (summed over "
                            "scrapes), and collective label sets the state refused to keep", labels=["family"]),
    )


class ScrapeCollector:
    def __init__(self, collectors: Mapping[str, Collector], timer: Callable[[], float] = time.perf_counter,
                 bounds: Bounds = DEFAULT_BOUNDS, refused: Callable[[], Mapping[str, int]] = dict) -> None:
        self.collectors = dict(collectors)
        self.timer = timer
        self.bounds = bounds
        self.refused = refused  # by family: label sets the state would not keep (its own bound)
        self.dropped: Counter[str] = Counter()  # by family, over every scrape so far
        self._lock = threading.Lock()  # scrapes run on the web server's threads
        check = CollectorRegistry()
        for c in [*self.collectors.values(), _Own()]:
            check.register(_Described(c))  # raises on a name two children (or a child and us) would expose

    def describe(self) -> Iterator[Metric]:
        for c in self.collectors.values():
            yield from _Described(c).describe()
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        own = _families()
        for name, c in self.collectors.items():
            metrics, ok, took = self._execute(name, c)
            yield from metrics
            own.duration.add_metric([name], took)
            own.success.add_metric([name], 1.0 if ok else 0.0)
        with self._lock:
            dropped = Counter(self.dropped)
        dropped.update(self.refused())
        for family, n in sorted(dropped.items()):
            own.dropped.add_metric([family], n)
        yield from own

    def _execute(self, name: str, c: Collector) -> tuple[list[Metric], bool, float]:
        start = self.timer()
        try:
            metrics, ok = [self._bounded(m) for m in c.collect()], True  # whole: a failure leaves no half families
        except Exception:  # noqa: BLE001 - any bug in one collector must not fail the scrape
            logs.get().exception("metrics collector %s failed", name)
            metrics, ok = [], False
        return metrics, ok, self.timer() - start

    def _bounded(self, metric: Metric) -> Metric:
        out, dropped = bound_family(metric, self.bounds)
        if dropped:
            with self._lock:
                self.dropped[metric.name + "_total" if metric.type == "counter" else metric.name] += dropped
        return out


class _Described:
    """A child as the duplicate check sees it: its describe(), or for a child without one (a sink's
    self-metrics) what it collects, as the registry's auto_describe does. Also hashable, which the
    registry needs and a dataclass sink is not."""

    def __init__(self, c: Collector) -> None:
        self.c = c

    def describe(self) -> Iterator[Metric]:
        describe = getattr(self.c, "describe", None)
        return iter(describe() if describe is not None else self.c.collect())

    def collect(self) -> Iterator[Metric]:
        return iter(())


class _Own:
    """Our own families, for the duplicate check."""

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        return iter(())
