"""Which Flight Recorders the sidecar reads for each rank (model/recorders.py): gloo's default one,
the legacy NCCL one, and, from torch 2.15, one per hooked backend (nccl2, ...). A rank read through
an empty recorder looks healthy whatever it does; this family says which one holds its data, and
through whose handlers (`via`: frexport.agent's, or PyTorch's own where the agent is absent or
does not know this torch and left them alone), and how (`read`: `status_first`, its status every
second and its entries when needed, where the agent serves a status-only read; else `whole_dump`).

    # HELP frexport_rank_recorder_info The Flight Recorders read for a rank (one per backend that records)
    # TYPE frexport_rank_recorder_info gauge
    frexport_rank_recorder_info{rank="0",read="status_first",recorder="gloo",via="frexport.agent"} 1.0
    frexport_rank_recorder_info{rank="0",read="status_first",recorder="nccl2",via="frexport.agent"} 1.0
    # HELP frexport_rank_c10d_healthy 1 while torch's c10d health check finds no backend aborted (torch >= 2.15)
    # TYPE frexport_rank_c10d_healthy gauge
    frexport_rank_c10d_healthy{rank="0"} 0.0
    # HELP frexport_rank_backend_unhealthy 1 for each backend torch's c10d health check reports aborted
    # TYPE frexport_rank_backend_unhealthy gauge
    frexport_rank_backend_unhealthy{backend="nccl2",rank="0"} 1.0

The health check turns only when a backend aborts (its watchdog's timeout, an async error), so it
confirms a hang late; the stall metrics come long before it.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from frexport.live.state import LiveState


def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    return (GaugeMetricFamily("frexport_rank_recorder_info",
                              "The Flight Recorders read for a rank (one per backend that records)",
                              labels=["rank", "recorder", "via", "read"]),
            GaugeMetricFamily("frexport_rank_c10d_healthy",
                              "1 while torch's c10d health check finds no backend aborted (torch >= 2.15)",
                              labels=["rank"]),
            GaugeMetricFamily("frexport_rank_backend_unhealthy",
                              "1 for each backend torch's c10d health check reports aborted",
                              labels=["rank", "backend"]))


class RecordersCollector:
    def __init__(self, state: LiveState) -> None:
        self.state = state

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        info, healthy, unhealthy = _families()
        for rank, dump in sorted(self.state.latest_dumps().items()):
            r = str(rank)
            for recorder in dump.recorders:
                info.add_metric([r, recorder, dump.read_via or "files", dump.read_mode or "files"], 1.0)
            if dump.unhealthy_backends is not None:
                healthy.add_metric([r], 0.0 if dump.unhealthy_backends else 1.0)
                for backend in dump.unhealthy_backends:
                    unhealthy.add_metric([r, backend], 1.0)
        return iter((info, healthy, unhealthy))
