"""Which Flight Recorders each rank is read from, and torch's c10d health check (recorders.py); a
group recorded by two recorders (gloo's and a hooked backend's) is two sets of per-group series."""

from dataclasses import replace

from prometheus_client import CollectorRegistry

from frexport.config import Analysis
from frexport.export.prometheus import RankProgressCollector, RecordersCollector
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.state import LiveState
from frexport.model.recorders import merge_recorders
from tests.support.synth import entry
from tests.unit.export.prometheus.scenario import FIRST, NOW_NS, S, snapshot


def _read(rank: int, recorders: dict[str, list[dict]], unhealthy: tuple[str, ...] | None = None):
    """A rank's dump as a worker-server poll makes it: one snapshot per recorder, merged."""
    dumps = {name: snapshot(entries, rank, FIRST) for name, entries in recorders.items()}
    return replace(merge_recorders(dumps), unhealthy_backends=unhealthy)


def _registry(state: LiveState) -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    r.register(RecordersCollector(state))
    r.register(RankProgressCollector(state, LiveAnalysis(Analysis()), lambda: NOW_NS / S))
    return r


def _state() -> LiveState:
    gloo = [entry(i, i + 1, backend="gloo", retired=True) for i in range(3)]
    nccl2 = [entry(i, i + 1, backend="nccl2") for i in range(5)]
    state = LiveState()
    state.ingest(_read(0, {"gloo": gloo, "nccl2": nccl2}, unhealthy=()), "socket:rank-0", FIRST)
    state.ingest(_read(1, {"gloo": gloo}, unhealthy=("nccl2",)), "socket:rank-1", FIRST)
    state.ingest(snapshot(gloo, 2, FIRST), "dumps:/d", FIRST)  # a dump file: its recorder is not known
    return state


def test_each_rank_lists_the_recorders_it_is_read_from():
    r = _registry(_state())
    info = {(s.labels["rank"], s.labels["recorder"]): s.value for m in r.collect()
            if m.name == "frexport_rank_recorder_info" for s in m.samples}
    assert info == {("0", "gloo"): 1, ("0", "nccl2"): 1, ("1", "gloo"): 1}


def test_the_c10d_health_check_is_shown_where_the_rank_answered_it():
    r = _registry(_state())
    assert r.get_sample_value("frexport_rank_c10d_healthy", {"rank": "0"}) == 1
    assert r.get_sample_value("frexport_rank_c10d_healthy", {"rank": "1"}) == 0
    assert r.get_sample_value("frexport_rank_c10d_healthy", {"rank": "2"}) is None
    assert r.get_sample_value("frexport_rank_backend_unhealthy", {"rank": "1", "backend": "nccl2"}) == 1
    assert r.get_sample_value("frexport_rank_backend_unhealthy", {"rank": "0", "backend": "nccl2"}) is None


def test_one_group_in_two_recorders_is_two_series_with_their_backend():
    r = _registry(_state())
    labels = {"rank": "0", "pg_desc": "default_pg"}
    assert r.get_sample_value("frexport_pg_last_enqueued_collective", {**labels, "pg": "0", "backend": "gloo"}) == 3
    assert r.get_sample_value("frexport_pg_last_enqueued_collective",
                              {**labels, "pg": "nccl2:0", "backend": "nccl2"}) == 5
