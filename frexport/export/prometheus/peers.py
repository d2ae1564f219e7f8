"""The job-level view's trust in its peers (sources/peers.py): what it refused and why.

    # HELP frexport_peer_rank_collisions Ranks claimed by more than one peer now (never merged)
    # TYPE frexport_peer_rank_collisions gauge
    frexport_peer_rank_collisions 1.0
    # HELP frexport_peer_ranks_over_share Ranks a peer sent over its fair share of max_ranks, at its last answer
    # TYPE frexport_peer_ranks_over_share gauge
    frexport_peer_ranks_over_share{peer="http://10.0.0.9:9464"} 4088.0
    # HELP frexport_jobview_rank_capacity Ranks the job view holds at most: max_ranks, or the job's world ...
    # TYPE frexport_jobview_rank_capacity gauge
    frexport_jobview_rank_capacity 16384.0
    # HELP frexport_jobview_ranks_not_taken Ranks the peers sent that the view did not take at its last pass
    # TYPE frexport_jobview_ranks_not_taken gauge
    frexport_jobview_ranks_not_taken 0.0
    # HELP frexport_peer_dropped_total Peer ranks and rows dropped by the field rules and bounds, and collisions
    # TYPE frexport_peer_dropped_total counter
    frexport_peer_dropped_total{what="rows"} 3.0
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class PeersCollector:
    name = "peers"

    def __init__(self, source) -> None:  # sources/peers.py's PeersSource (export does not import sources)
        self.source = source

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily,
                                 CounterMetricFamily]:
        return (GaugeMetricFamily("frexport_peer_rank_collisions",
                                  "Ranks claimed by more than one peer now (never merged)"),
                GaugeMetricFamily("frexport_jobview_rank_capacity",
                                  "Ranks the job view holds at most: max_ranks, or the job's world where larger"),
                GaugeMetricFamily("frexport_jobview_ranks_not_taken",
                                  "Ranks the peers sent that the view did not take at its last pass"),
                GaugeMetricFamily("frexport_peer_ranks_over_share", "Ranks a peer sent over its fair share of "
                                  "max_ranks, at its last answer", labels=["peer"]),
                CounterMetricFamily("frexport_peer_dropped", "Peer ranks and rows dropped by the field rules "
                                    "and bounds, and rank collisions", labels=["what"]))

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        collisions, capacity, not_taken, over, dropped = self._families()
        s = self.source
        collisions.add_metric([], len(s.collisions))
        capacity.add_metric([], s.capacity)
        taken, sent = s.cut
        not_taken.add_metric([], sent - taken)
        for peer, n in sorted(s.over_share().items())[:1024]:
            over.add_metric([peer[:256]], n)
        dropped.add_metric(["rows"], s.rows_dropped_total)
        dropped.add_metric(["ranks"], s.ranks_dropped_total)
        dropped.add_metric(["collisions"], s.collisions_total)
        return iter((collisions, capacity, not_taken, over, dropped))
