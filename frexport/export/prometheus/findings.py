"""What the live analysis found: current findings, how long culprits have stalled, the threshold.

    # HELP frexport_findings Current findings of the live analysis
    # TYPE frexport_findings gauge
    frexport_findings{kind="missing_rank",pg="0"} 1.0
    # HELP frexport_rank_stall_seconds How long a stalled rank has held up the collective it is missing from ...
    # TYPE frexport_rank_stall_seconds gauge
    frexport_rank_stall_seconds{kind="missing_rank",op="all_reduce",pg="0",pg_desc="default_pg",rank="2"} 42.5
    # HELP frexport_stall_threshold_seconds How long a wait must last before the live analysis calls it a stall
    # TYPE frexport_stall_threshold_seconds gauge
    frexport_stall_threshold_seconds 30.0

Before the first analysis pass there are no findings and no threshold (absent, not 0).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client.core import GaugeMetricFamily, Metric

from frexport.analysis.clock import DUMP_TIME
from frexport.analysis.findings import STALL_KINDS, Finding
from frexport.export.prometheus.bounds import sample_value
from frexport.live.diagnosis import DOWN, LiveAnalysis


class _Families(NamedTuple):
    stall: GaugeMetricFamily
    findings: GaugeMetricFamily
    threshold: GaugeMetricFamily


def _families() -> _Families:
    return _Families(
        GaugeMetricFamily("frexport_rank_stall_seconds",
                          "How long a stalled rank has held up the collective it is missing from or stuck "
                          "in (culprit ranks only)", labels=["rank", "pg", "pg_desc", "op", "kind"]),
        GaugeMetricFamily("frexport_findings", "Current findings of the live analysis", labels=["kind", "pg"]),
        GaugeMetricFamily("frexport_stall_threshold_seconds",
                          "How long a wait must last before the live analysis calls it a stall"),
    )


def _stalled_s(x: Finding, now: float) -> float:
    """Since the issue on this sidecar's clock where the analysis timed the wait by a dump time (a poll,
    a file's time that agrees with the recorder); otherwise the wait as the analysis timed it (the
    recorder's own times, the watchdog's timeout): a file touched into the past is no clock
    (analysis/clock.py)."""
    if x.waited is not None and x.waited.clock != DUMP_TIME:
        return sample_value(x.waited.ns) / 1e9
    return max(0.0, now - sample_value(x.time_ns) / 1e9)


class FindingsCollector:
    def __init__(self, analysis: LiveAnalysis, clock: Callable[[], float] = time.time) -> None:
        self.analysis = analysis
        self.clock = clock

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        f = _families()
        latest = self.analysis.latest  # replaced whole by each pass: read it once
        if latest is None:
            yield f.stall
            yield f.findings
            return
        now = self.clock()
        found = latest.diagnosis.findings
        for x in found:
            if x.root_cause and x.kind in STALL_KINDS and x.time_ns:
                for rank in x.culprit_ranks or x.blocked_ranks:
                    if latest.statuses.get(rank) == DOWN:
                        continue  # a dead process holds nothing up any more: its series ends
                    f.stall.add_metric([str(rank), x.pg_name, x.pg_desc, x.op or "", x.kind], _stalled_s(x, now))
        for (kind, pg), n in sorted(Counter((x.kind, x.pg_name) for x in found).items()):
            f.findings.add_metric([kind, pg], n)
        f.threshold.add_metric([], latest.stall_after_s)
        yield from f
