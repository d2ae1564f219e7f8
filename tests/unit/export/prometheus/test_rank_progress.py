"""Per rank and group progress, pending work and statuses, read with registry.get_sample_value."""

from prometheus_client import CollectorRegistry

from frexport.config import Analysis
from frexport.export.prometheus import RankProgressCollector
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.state import LiveState
from tests.support.synth import T0, entry
from tests.unit.export.prometheus.scenario import FIRST, NOW_NS, SECOND, S, snapshot


def _pg(rank, pg="nccl:0", desc="default_pg", backend="nccl", **extra):
    """The labels of a group's series: synth's entries are NCCL-shaped, so group "0" is filed as "nccl:0"."""
    return {"rank": str(rank), "pg": pg, "pg_desc": desc, "backend": backend, **extra}


def test_the_culprit_is_behind_its_peers_in_the_default_group(scenario):
    r = scenario.registry()
    enqueued = {k: r.get_sample_value("frexport_pg_last_enqueued_collective", _pg(k)) for k in range(4)}
    assert enqueued == {0: 11, 1: 11, 2: 10, 3: 11}
    assert {r.get_sample_value("frexport_pg_last_completed_collective", _pg(k)) for k in range(4)} == {10}
    assert r.get_sample_value("frexport_pg_last_started_collective", _pg(0)) == 11
    assert r.get_sample_value("frexport_pg_timeout_seconds", _pg(2)) == 600


def test_pending_work_and_its_age_come_from_the_clock(scenario):
    r = scenario.registry()
    pending = _pg(0, op="all_reduce")
    assert r.get_sample_value("frexport_pending_collectives", pending) == 1
    # collective 11 was enqueued at T0 + 1 s; the scrape is at T0 + 60 s
    assert r.get_sample_value("frexport_oldest_pending_collective_age_seconds", pending) == 59.0
    assert r.get_sample_value("frexport_pending_collectives", _pg(2, op="all_reduce")) is None


def test_progress_is_the_sidecar_clock_once_it_advances_and_the_dump_time_at_first_sight(scenario):
    r = scenario.registry()
    # rank 3 completed more collectives in its second snapshot: progress is when the sidecar saw it
    assert r.get_sample_value("frexport_pg_last_progress_timestamp_seconds", _pg(3)) == SECOND / S
    # rank 0 was seen once: the enqueue time of its newest finished collective (10, record 9)
    assert r.get_sample_value("frexport_pg_last_progress_timestamp_seconds", _pg(0)) == (T0 + 9 * 10**8) / S


def test_every_status_is_a_series_and_one_of_them_is_1(scenario):
    r = scenario.registry()
    for rank, now in {0: "blocked", 2: "stalled"}.items():
        values = {s: r.get_sample_value("frexport_rank_status", {"rank": str(rank), "status": s})
                  for s in ("ok", "stalled", "blocked", "desynced", "straggling")}
        assert values == {s: 1.0 if s == now else 0.0 for s in values}


def test_ranks_without_an_analysis_yet_are_ok(scenario):
    scenario.analysis.latest = None
    r = scenario.registry()
    assert r.get_sample_value("frexport_rank_status", {"rank": "2", "status": "ok"}) == 1


def test_last_seen_and_dropped_entries(scenario):
    r = scenario.registry()
    assert r.get_sample_value("frexport_rank_last_seen_timestamp_seconds", {"rank": "0"}) == FIRST / S
    assert r.get_sample_value("frexport_rank_last_seen_timestamp_seconds", {"rank": "3"}) == SECOND / S
    # rank 3's snapshots held records 0-4, then 7-10: 5 and 6 wrapped away unseen
    assert r.get_sample_value("frexport_ring_buffer_dropped_entries_total", {"rank": "3"}) == 2
    assert r.get_sample_value("frexport_ring_buffer_dropped_entries_total", {"rank": "0"}) == 0


def _registry(state: LiveState) -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    r.register(RankProgressCollector(state, LiveAnalysis(Analysis()), lambda: NOW_NS / S))
    return r


def test_a_restarted_rank_counts_a_restart():
    state = LiveState()
    state.ingest(snapshot([entry(i, i + 1) for i in range(5)], 0, FIRST), "s", FIRST)
    later = T0 + 100 * S
    state.ingest(snapshot([entry(i, i + 1, created=later + i) for i in range(2)], 0, later), "s", later)
    assert _registry(state).get_sample_value("frexport_rank_restarts", {"rank": "0"}) == 1


def test_an_expired_rank_leaves_no_series():
    state = LiveState()
    for rank in (0, 1):
        state.ingest(snapshot([entry(0, 1)], rank, FIRST if rank == 0 else SECOND), "s", FIRST if rank == 0 else SECOND)
    state.expire(SECOND, after_ns=10 * S)
    r = _registry(state)
    assert r.get_sample_value("frexport_rank_last_seen_timestamp_seconds", {"rank": "0"}) is None
    assert r.get_sample_value("frexport_pg_last_enqueued_collective", _pg(0)) is None
    assert r.get_sample_value("frexport_rank_last_seen_timestamp_seconds", {"rank": "1"}) == SECOND / S
