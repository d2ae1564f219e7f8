"""Finished collectives per (pg_desc, op): how many, by outcome, and how long they took.

    # HELP frexport_collective_duration_seconds Durations of collectives proven finished (duration_ms, ...)
    # TYPE frexport_collective_duration_seconds histogram
    frexport_collective_duration_seconds_bucket{le="0.001",op="all_reduce",pg_desc="default_pg"} 10.0
    ...
    frexport_collective_duration_seconds_bucket{le="+Inf",op="all_reduce",pg_desc="default_pg"} 10.0
    frexport_collective_duration_seconds_count{op="all_reduce",pg_desc="default_pg"} 10.0
    frexport_collective_duration_seconds_sum{op="all_reduce",pg_desc="default_pg"} 0.01
    # HELP frexport_collectives_total Collectives seen settled, by outcome (issued: known only to be issued)
    # TYPE frexport_collectives_total counter
    frexport_collectives_total{op="all_reduce",pg_desc="default_pg",state="completed"} 10.0

Labels are per process group description, not per rank: the ranks of one pod add up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from frexport.live.state import DURATION_BUCKETS, LiveState


class _Families(NamedTuple):
    duration: HistogramMetricFamily
    total: CounterMetricFamily


def _families() -> _Families:
    return _Families(
        HistogramMetricFamily("frexport_collective_duration_seconds",
                              "Durations of collectives proven finished (duration_ms, else discovered start to "
                              "completion)",
                              labels=["pg_desc", "op"]),
        CounterMetricFamily("frexport_collectives",
                            "Collectives seen settled, by outcome (issued: known only to be issued)",
                            labels=["pg_desc", "op", "state"]),
    )


class CollectivesCollector:
    def __init__(self, state: LiveState) -> None:
        self.state = state

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        f = _families()
        view = self.state.view()
        for (desc, op), h in sorted(view.durations.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(DURATION_BUCKETS, h.counts):
                cumulative += n
                buckets.append((repr(float(bound)), cumulative))
            buckets.append(("+Inf", h.count))
            f.duration.add_metric([desc, op], buckets, h.total)
        for (desc, op, outcome), n in sorted(view.collectives.items()):
            f.total.add_metric([desc, op, outcome], n)
        return iter(f)
