"""Per rank and process group: how far each rank got, what it waits on, and its status.

    # HELP frexport_pg_last_completed_collective collective_seq_id of the newest collective proven finished ...
    # TYPE frexport_pg_last_completed_collective gauge
    frexport_pg_last_completed_collective{backend="gloo",pg="0",pg_desc="default_pg",rank="1"} 9.0
    # HELP frexport_pending_collectives Collectives enqueued and not finished
    # TYPE frexport_pending_collectives gauge
    frexport_pending_collectives{backend="gloo",op="all_reduce",pg="0",pg_desc="default_pg",rank="1"} 1.0
    # HELP frexport_rank_status 1 for the rank's current status
    # TYPE frexport_rank_status gauge
    frexport_rank_status{rank="1",status="ok"} 0.0
    frexport_rank_status{rank="1",status="stalled"} 1.0

The age of the oldest pending collective is measured like the stall (frexport_rank_stall_seconds,
waits.py): against the sidecar's clock where the snapshot's time is one, and, for a dump file that
was there before the sidecar looked (its file time says nothing of when it was taken), against the
newest event any such dump recorded (as the analysis times a wait: "until rank 1's last recorded
event"): the wait those records prove, not days since the job ran.

Sequence numbers and timestamps are values, never labels. A rank or group that expired from the
state is simply absent from the next scrape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from frexport.export.prometheus.bounds import sample_value
from frexport.live.diagnosis import DOWN, OK, STATUSES, LiveAnalysis
from frexport.live.state import LiveState
from frexport.model.dump import DEFAULT_RECORDER, split_group_name

# `pg` is the name the group's ops are filed under (model.dump.group_name: "0", or "nccl2:0" for a
# group's ops in a hooked backend's recorder), unique within the rank, so the rules can group by it;
# `backend` the recorder's backend ("gloo" for the default one).
_PG = ["rank", "pg", "pg_desc", "backend"]


class _Families(NamedTuple):
    enqueued: GaugeMetricFamily
    started: GaugeMetricFamily
    completed: GaugeMetricFamily
    progress: GaugeMetricFamily
    timeout: GaugeMetricFamily
    pending: GaugeMetricFamily
    oldest: GaugeMetricFamily
    status: GaugeMetricFamily
    last_seen: GaugeMetricFamily
    restarts: GaugeMetricFamily
    dropped: CounterMetricFamily


def _families() -> _Families:
    return _Families(
        GaugeMetricFamily("frexport_pg_last_enqueued_collective",
                          "collective_seq_id of the newest collective the rank enqueued in the group", labels=_PG),
        GaugeMetricFamily("frexport_pg_last_started_collective",
                          "collective_seq_id of the newest collective that started (NCCL with timing only)",
                          labels=_PG),
        GaugeMetricFamily("frexport_pg_last_completed_collective",
                          "collective_seq_id of the newest collective proven finished (completed; gloo: "
                          "retired); absent where the recorder proves none", labels=_PG),
        GaugeMetricFamily("frexport_pg_last_progress_timestamp_seconds",
                          "When the group's last completed collective last advanced on this rank", labels=_PG),
        GaugeMetricFamily("frexport_pg_timeout_seconds", "The group's collective timeout (timeout_ms)", labels=_PG),
        GaugeMetricFamily("frexport_pending_collectives", "Collectives enqueued and not finished",
                          labels=_PG + ["op"]),
        GaugeMetricFamily("frexport_oldest_pending_collective_age_seconds",
                          "Age of the oldest unfinished collective, from its enqueue time (until the newest "
                          "recorded event for dumps that predate the sidecar)", labels=_PG + ["op"]),
        GaugeMetricFamily("frexport_rank_status", "1 for the rank's current status", labels=["rank", "status"]),
        GaugeMetricFamily("frexport_rank_last_seen_timestamp_seconds",
                          "When the rank was last read (its entries, or its status alone)",
                          labels=["rank"]),
        GaugeMetricFamily("frexport_rank_restarts", "How often the rank's recorder started anew (epochs)",
                          labels=["rank"]),
        CounterMetricFamily("frexport_ring_buffer_dropped_entries",
                            "Entries that left the ring buffer between two snapshots before being seen",
                            labels=["rank"]),
    )


class RankProgressCollector:
    def __init__(self, state: LiveState, analysis: LiveAnalysis, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.analysis = analysis
        self.clock = clock

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        f = _families()
        view = self.state.view()
        latest = self.analysis.latest
        statuses = latest.statuses if latest is not None else {}
        now = self.clock()
        # one recorder clock for every dump that predates the sidecar: the newest event among them
        recorded_until = max((rs.dump.newest_event_ns() for rs in view.ranks.values()
                              if rs.dump is not None and not rs.dump.dumped_at_is_clock), default=0)
        for rank, rs in sorted(view.ranks.items()):
            r = str(rank)
            until_ns = None if rs.dump is None or rs.dump.dumped_at_is_clock else recorded_until
            for name, g in sorted(rs.groups.items()):
                labels = [r, name, g.pg_desc, split_group_name(name)[1] or DEFAULT_RECORDER]
                enqueued, started, completed = g.current()
                if enqueued is not None:
                    f.enqueued.add_metric(labels, enqueued)
                if started is not None:
                    f.started.add_metric(labels, started)
                if completed is not None:
                    f.completed.add_metric(labels, completed)
                # as floats first: an int too big for one (a future decode path) is clamped, not fatal
                if g.last_progress_ns:
                    f.progress.add_metric(labels, sample_value(g.last_progress_ns) / 1e9)
                if g.timeout_ms:
                    f.timeout.add_metric(labels, sample_value(g.timeout_ms) / 1000)
                # a dead process's pending collective is not aging: its series ends with it
                for op, (count, oldest_ns) in sorted(g.pending.items()) if statuses.get(rank) != DOWN else ():
                    f.pending.add_metric(labels + [op], count)
                    age = now - sample_value(oldest_ns) / 1e9 if until_ns is None else (until_ns - oldest_ns) / 1e9
                    f.oldest.add_metric(labels + [op], max(0.0, age))
            for s in STATUSES:  # every status, so `== 1` and `== 0` both select series
                f.status.add_metric([r, s], 1.0 if statuses.get(rank, OK) == s else 0.0)
            f.last_seen.add_metric([r], sample_value(rs.last_seen_ns) / 1e9)
            f.restarts.add_metric([r], rs.epoch)
            f.dropped.add_metric([r], rs.dropped)
        for rank in sorted(r for r, s in statuses.items() if s == DOWN and r not in view.ranks):
            for s in STATUSES:  # sockets of a job that died before frexport started: down, not absent
                f.status.add_metric([str(rank), s], 1.0 if s == DOWN else 0.0)
        return iter(f)
