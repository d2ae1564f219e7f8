"""Prometheus metrics, built at scrape time from the live state (a custom Collector).

Nothing is a long-lived gauge: a rank or process group that is gone (expired from
the state) simply is not in the next scrape, so no stale series lingers. Sequence
numbers and timestamps are values, never labels; every label is bounded (ranks of
one pod, process groups, ops, a fixed set of states and reasons). Job, pod and
namespace come from the scrape target's labels, not from here. docs/metrics.md
describes each metric.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from frexport import __version__
from frexport.analysis.findings import STALL_KINDS
from frexport.live.diagnosis import OK, STATUSES, LiveAnalysis
from frexport.live.state import DURATION_BUCKETS, LiveState
from frexport.sources.health import HealthRegistry


class FrexportCollector(Collector):
    def __init__(self, state: LiveState, health: HealthRegistry, analysis: LiveAnalysis) -> None:
        self.state = state
        self.health = health
        self.analysis = analysis

    def collect(self) -> Iterator[Metric]:
        start = time.perf_counter()
        v = self.state.view()
        latest = self.analysis.latest
        statuses = latest.statuses if latest is not None else {}
        findings_now = latest.diagnosis.findings if latest is not None else []
        now = time.time()
        pg_labels = ["rank", "pg", "pg_desc"]
        enq = GaugeMetricFamily("frexport_pg_last_enqueued_collective",
                                "collective_seq_id of the newest collective the rank enqueued in the group",
                                labels=pg_labels)
        sta = GaugeMetricFamily("frexport_pg_last_started_collective",
                                "collective_seq_id of the newest collective that started (NCCL with timing only)",
                                labels=pg_labels)
        com = GaugeMetricFamily("frexport_pg_last_completed_collective",
                                "collective_seq_id of the newest finished collective (gloo: retired)", labels=pg_labels)
        prog = GaugeMetricFamily("frexport_pg_last_progress_timestamp_seconds",
                                 "When the group's last completed collective last advanced on this rank",
                                 labels=pg_labels)
        tmo = GaugeMetricFamily("frexport_pg_timeout_seconds", "The group's collective timeout (timeout_ms)",
                                labels=pg_labels)
        pend = GaugeMetricFamily("frexport_pending_collectives", "Collectives enqueued and not finished",
                                 labels=pg_labels + ["op"])
        age = GaugeMetricFamily("frexport_oldest_pending_collective_age_seconds",
                                "Age of the oldest unfinished collective, from its enqueue time",
                                labels=pg_labels + ["op"])
        status = GaugeMetricFamily("frexport_rank_status", "1 for the rank's current status",
                                   labels=["rank", "status"])
        seen = GaugeMetricFamily("frexport_rank_last_seen_timestamp_seconds",
                                 "When a snapshot of the rank was last taken in", labels=["rank"])
        epoch = GaugeMetricFamily("frexport_rank_restarts", "How often the rank's recorder started anew (epochs)",
                                  labels=["rank"])
        dropped = CounterMetricFamily("frexport_ring_buffer_dropped_entries",
                                      "Entries that left the ring buffer between two snapshots before being seen",
                                      labels=["rank"])
        for rank, rs in sorted(v.ranks.items()):
            r = str(rank)
            for name, g in sorted(rs.groups.items()):
                labels = [r, name, g.pg_desc]
                if g.last_enqueued is not None:
                    enq.add_metric(labels, g.last_enqueued)
                if g.last_started is not None:
                    sta.add_metric(labels, g.last_started)
                if g.last_completed is not None:
                    com.add_metric(labels, g.last_completed)
                if g.last_progress_ns:
                    prog.add_metric(labels, g.last_progress_ns / 1e9)
                if g.timeout_ms:
                    tmo.add_metric(labels, g.timeout_ms / 1000)
                for op, (count, oldest) in sorted(g.pending.items()):
                    pend.add_metric(labels + [op], count)
                    age.add_metric(labels + [op], max(0.0, now - oldest / 1e9))
            for s in STATUSES:
                status.add_metric([r, s], 1.0 if statuses.get(rank, OK) == s else 0.0)
            seen.add_metric([r], rs.last_seen_ns / 1e9)
            epoch.add_metric([r], rs.epoch)
            dropped.add_metric([r], rs.dropped)
        yield from (enq, sta, com, prog, tmo, pend, age, status, seen, epoch, dropped)

        hist = HistogramMetricFamily("frexport_collective_duration_seconds",
                                     "Collective durations (duration_ms, else discovered start to completion)",
                                     labels=["pg_desc", "op"])
        for (desc, op), h in sorted(v.durations.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(DURATION_BUCKETS, h.counts):
                cumulative += n
                buckets.append((_bound(bound), cumulative))
            buckets.append(("+Inf", h.count))
            hist.add_metric([desc, op], buckets, h.total)
        yield hist
        total = CounterMetricFamily("frexport_collectives", "Collectives seen finished, by outcome",
                                    labels=["pg_desc", "op", "state"])
        for (desc, op, outcome), n in sorted(v.collectives.items()):
            total.add_metric([desc, op, outcome], n)
        yield total

        stall = GaugeMetricFamily("frexport_rank_stall_seconds",
                                  "How long a stalled rank has held up the collective it is missing from or stuck "
                                  "in (culprit ranks only)", labels=["rank", "pg", "pg_desc", "op", "kind"])
        for f in findings_now:
            if f.root_cause and f.kind in STALL_KINDS and f.time_ns:
                for rank in f.culprit_ranks or f.blocked_ranks:
                    stall.add_metric([str(rank), f.pg_name, f.pg_desc, f.op or "", f.kind],
                                     max(0.0, now - f.time_ns / 1e9))
        yield stall
        findings = GaugeMetricFamily("frexport_findings", "Current findings of the live analysis",
                                     labels=["kind", "pg"])
        counts: dict[tuple[str, str], int] = {}
        for f in findings_now:
            key = (f.kind, f.pg_name)
            counts[key] = counts.get(key, 0) + 1
        for (kind, pg), n in sorted(counts.items()):
            findings.add_metric([kind, pg], n)
        yield findings
        dumps = CounterMetricFamily("frexport_timeout_dumps", "Dumps PyTorch wrote into a watched dump directory "
                                    "(on timeout or exception) since frexport started", labels=["rank"])
        for rank, n in sorted(v.timeout_dumps.items()):
            dumps.add_metric([str(rank)], n)
        yield dumps
        errors = CounterMetricFamily("frexport_decode_errors", "Dumps or bodies that could not be decoded",
                                     labels=["reason"])
        for reason, n in sorted(self.health.decode_errors().items()):
            errors.add_metric([reason], n)
        yield errors

        up = GaugeMetricFamily("frexport_source_up", "1 if the source's last attempt succeeded", labels=["source"])
        dur = GaugeMetricFamily("frexport_source_scrape_duration_seconds", "Duration of the source's last attempt",
                                labels=["source"])
        last = GaugeMetricFamily("frexport_source_last_success_timestamp_seconds",
                                 "When the source last succeeded", labels=["source"])
        serr = CounterMetricFamily("frexport_source_errors", "Failed attempts by reason", labels=["source", "reason"])
        for h in sorted(self.health.view(), key=lambda h: h.name):
            up.add_metric([h.name], 1.0 if h.up else 0.0)
            dur.add_metric([h.name], h.last_duration_s)
            if h.last_success_ns:
                last.add_metric([h.name], h.last_success_ns / 1e9)
            for reason, n in sorted(h.errors.items()):
                serr.add_metric([h.name, reason], n)
        yield from (up, dur, last, serr)
        if latest is not None:
            g = GaugeMetricFamily("frexport_stall_threshold_seconds",
                                  "How long a wait must last before the live analysis calls it a stall")
            g.add_metric([], latest.stall_after_s)
            yield g
        info = GaugeMetricFamily("frexport_build_info", "frexport version", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
        took = GaugeMetricFamily("frexport_scrape_collector_duration_seconds", "Time to build this scrape")
        took.add_metric([], time.perf_counter() - start)
        yield took


def _bound(b: float) -> str:
    return repr(float(b))
