"""Where each local rank waits: the series Prometheus joins across pods to find a job's culprit.

    # HELP frexport_rank_waiting_collective collective_seq_id of the collective the rank waits in ...
    # TYPE frexport_rank_waiting_collective gauge
    frexport_rank_waiting_collective{op="_reduce_scatter_base",pg="43",pg_desc="dp",rank="37"} 300733.0
    # HELP frexport_rank_waiting_p2p p2p_seq_id of the send or recv the rank waits in; peer is ...
    # TYPE frexport_rank_waiting_p2p gauge
    frexport_rank_waiting_p2p{op="send",peer="45",pg="103",pg_desc="pp",rank="61"} 41.0
    # HELP frexport_rank_waiting_since_timestamp_seconds When the rank began to wait in the op (sidecar clock)
    # TYPE frexport_rank_waiting_since_timestamp_seconds gauge
    frexport_rank_waiting_since_timestamp_seconds{op="_reduce_scatter_base",pg="43",pg_desc="dp",rank="37"} 1.79e9

A sidecar sees only its pod's ranks, so it cannot tell which rank of another pod holds up a
collective that spans pods. It can say, for each of its ranks and process groups, which collective
the rank waits in (its oldest unfinished one: collective_seq_id as the value, op as a label), which
point-to-point op it waits in and for which peer, and since when. With every rank's
`frexport_pg_last_enqueued_collective`, the job-wide rules (config/prometheus/frexport-rules.yaml,
group frexport.job) find the ranks that never issued a collective their peers wait in and wait
nowhere themselves. The waits are the live analysis' (same rules as `frexport analyze`: completed,
or retired where the backend does not report completion; members of a batch_isend_irecv finish with
their coalesced end). A rank whose worker server refuses connections waits nowhere: it is gone.

"Since" is placed on the sidecar's clock as the analysis measured the wait: the snapshot's time
minus how long the rank had been waiting in it. `frexport_rank_last_seen_timestamp_seconds - since`
is then how long the wait had lasted when the rank was last seen, the age `frexport analyze` would
give, also for a dump file read long after it was written. A file that was in the directory before
the sidecar started and whose time cannot be its dump time (later than its group's timeout after the
op it waits in: a checkout, a copy) has none: there it is the wait the analysis proved from the
recorder's own times or the watchdog's timeout (docs/diagnosis.md, "Clocks").
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from frexport.live.diagnosis import LiveAnalysis
from frexport.live.state import LiveState
from frexport.model.signature import op_name

PG_LABELS = ["rank", "pg", "pg_desc", "op"]


class WaitsCollector:
    def __init__(self, state: LiveState, analysis: LiveAnalysis) -> None:
        self.state = state
        self.analysis = analysis

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        coll = GaugeMetricFamily("frexport_rank_waiting_collective",
                                 "collective_seq_id of the collective the rank waits in (its oldest unfinished one "
                                 "in the group)", labels=PG_LABELS)
        p2p = GaugeMetricFamily("frexport_rank_waiting_p2p",
                                "p2p_seq_id of the send or recv the rank waits in; peer is the global rank it "
                                "pairs with", labels=PG_LABELS + ["peer"])
        since = GaugeMetricFamily("frexport_rank_waiting_since_timestamp_seconds",
                                  "When the rank began to wait in the op (sidecar clock)", labels=PG_LABELS)
        return coll, p2p, since

    def collect(self) -> Iterator[Metric]:
        coll, p2p, since = self._families()
        latest = self.analysis.latest
        if latest is not None:
            ranks = self.state.view().ranks
            for w in sorted(latest.diagnosis.waits, key=lambda w: (w.rank, w.group.name, w.p2p)):
                rs = ranks.get(w.rank)
                if rs is None or rs.dump is None or w.rank in latest.down:
                    continue
                labels = [str(w.rank), w.group.name, w.group.desc, op_name(w.sig)]
                if w.p2p:
                    if w.peer is None:
                        continue
                    p2p.add_metric(labels + [str(w.peer)], w.seq)
                else:
                    coll.add_metric(labels, w.seq)
                # the wait's age as measured on the snapshot, placed on the sidecar's clock
                dumped = rs.dump.dumped_at_ns
                if not rs.dump.dumped_at_is_clock:  # a file from before we looked: what the analysis proved
                    start_ns = rs.last_seen_ns - (w.waited.ns if w.waited is not None else 0)
                elif dumped and w.created_ns:
                    start_ns = rs.last_seen_ns - (dumped - w.created_ns)
                else:
                    start_ns = w.created_ns
                since.add_metric(labels, start_ns / 1e9)
        yield from (coll, p2p, since)

