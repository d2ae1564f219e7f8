"""Where snapshots come from, node_exporter style: each source's health, decode errors, timeout dumps.

    # HELP frexport_source_up 1 if the source's last attempt succeeded
    # TYPE frexport_source_up gauge
    frexport_source_up{source="socket:rank-0"} 1.0
    # HELP frexport_source_errors_total Failed attempts by reason
    # TYPE frexport_source_errors_total counter
    frexport_source_errors_total{reason="timeout",source="socket:rank-1"} 2.0
    # HELP frexport_decode_errors_total Dumps or bodies that could not be decoded
    # TYPE frexport_decode_errors_total counter
    frexport_decode_errors_total{reason="truncated"} 1.0
    # HELP frexport_timeout_dumps_total Dumps PyTorch wrote into a watched dump directory (on timeout or ...
    # TYPE frexport_timeout_dumps_total counter
    frexport_timeout_dumps_total{rank="3"} 1.0
    # HELP frexport_entries_reads_total Reads of ranks' entries, by why: first, due (moved, ...
    # TYPE frexport_entries_reads_total counter
    frexport_entries_reads_total{reason="due"} 12.0
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from frexport.export.prometheus.bounds import sample_value
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry


class _Families(NamedTuple):
    up: GaugeMetricFamily
    duration: GaugeMetricFamily
    last_success: GaugeMetricFamily
    errors: CounterMetricFamily
    decode_errors: CounterMetricFamily
    timeout_dumps: CounterMetricFamily
    status_reads: CounterMetricFamily
    entries_reads: CounterMetricFamily


def _families() -> _Families:
    return _Families(
        GaugeMetricFamily("frexport_source_up", "1 if the source's last attempt succeeded", labels=["source"]),
        GaugeMetricFamily("frexport_source_scrape_duration_seconds", "Duration of the source's last attempt",
                          labels=["source"]),
        GaugeMetricFamily("frexport_source_last_success_timestamp_seconds", "When the source last succeeded",
                          labels=["source"]),
        CounterMetricFamily("frexport_source_errors", "Failed attempts by reason", labels=["source", "reason"]),
        CounterMetricFamily("frexport_decode_errors", "Dumps or bodies that could not be decoded", labels=["reason"]),
        CounterMetricFamily("frexport_timeout_dumps", "Dumps PyTorch wrote into a watched dump directory "
                            "(on timeout or exception) since frexport started", labels=["rank"]),
        CounterMetricFamily("frexport_status_reads", "Status-only reads of ranks (status first: every "
                            "status_interval)"),
        CounterMetricFamily("frexport_entries_reads", "Reads of ranks' entries, by why: first, due (moved, "
                            "entries_interval passed), suspected (a stall suspected), wrap (the ring buffer could "
                            "wrap), exiting, poll (no status-only read: every poll_interval)", labels=["reason"]),
    )


class SourcesCollector:
    def __init__(self, health: HealthRegistry, state: LiveState) -> None:
        self.health = health
        self.state = state

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        f = _families()
        for h in sorted(self.health.view(), key=lambda h: h.name):
            f.up.add_metric([h.name], 1.0 if h.up else 0.0)
            f.duration.add_metric([h.name], h.last_duration_s)
            if h.last_success_ns:
                f.last_success.add_metric([h.name], sample_value(h.last_success_ns) / 1e9)
            for reason, n in sorted(h.errors.items()):
                f.errors.add_metric([h.name, reason], n)
        for reason, n in sorted(self.health.decode_errors().items()):
            f.decode_errors.add_metric([reason], n)
        for rank, n in sorted(self.state.view().timeout_dumps.items()):
            f.timeout_dumps.add_metric([str(rank)], n)
        reads = self.health.reads()
        if reads:  # a sidecar without live ranks to read has no such series
            f.status_reads.add_metric([], reads.pop("status", 0))
        for reason, n in sorted(reads.items()):
            f.entries_reads.add_metric([reason], n)
        return iter(f)
