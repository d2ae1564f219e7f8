"""The live analysis' findings, the culprits' stall time and the threshold."""

from frexport.analysis import findings as F
from tests.unit.export.prometheus.scenario import STALL


def test_findings_are_counted_by_kind_and_group(scenario):
    r = scenario.registry()
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "nccl:0"}) == 1
    assert r.get_sample_value("frexport_findings", {"kind": F.STRAGGLER, "pg": "nccl:1"}) == 1


def test_only_the_culprit_has_a_stall_time_since_the_collective_was_issued(scenario):
    r = scenario.registry()
    labels = {"pg": "nccl:0", "pg_desc": "default_pg", "op": "all_reduce", "kind": F.MISSING_RANK}
    # issued at T0 + 1 s, scraped at T0 + 60 s
    assert r.get_sample_value("frexport_rank_stall_seconds", {**labels, "rank": "2"}) == 59.0
    assert [r.get_sample_value("frexport_rank_stall_seconds", {**labels, "rank": str(k)}) for k in (0, 1, 3)] \
        == [None] * 3
    assert r.get_sample_value("frexport_stall_threshold_seconds") == 30.0


def test_a_finding_that_is_not_a_root_cause_has_no_stall_time(scenario):
    scenario.analysis.latest.diagnosis.findings[0] = F.Finding(**{**STALL.__dict__, "root_cause": False})
    r = scenario.registry()
    assert r.get_sample_value("frexport_rank_stall_seconds", {"pg": "nccl:0", "pg_desc": "default_pg",
                                                              "op": "all_reduce", "kind": F.MISSING_RANK,
                                                              "rank": "2"}) is None
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "nccl:0"}) == 1


def test_before_the_first_analysis_there_is_no_threshold_and_no_finding(scenario):
    scenario.analysis.latest = None
    r = scenario.registry()
    assert r.get_sample_value("frexport_stall_threshold_seconds") is None
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "nccl:0"}) is None
    assert r.get_sample_value("frexport_scrape_collector_success", {"collector": "findings"}) == 1


def test_a_rank_whose_process_is_gone_is_down_and_its_stall_and_pending_series_end(scenario):
    statuses = scenario.analysis.latest.statuses
    statuses.update({0: "down", 1: "down", 2: "down", 3: "down", 7: "down"})  # 7: a socket left before we started
    r = scenario.registry()
    assert r.get_sample_value("frexport_rank_stall_seconds", {"pg": "nccl:0", "pg_desc": "default_pg",
                                                              "op": "all_reduce", "kind": F.MISSING_RANK,
                                                              "rank": "2"}) is None
    for rank in (0, 1, 2, 3, 7):
        assert r.get_sample_value("frexport_rank_status", {"rank": str(rank), "status": "down"}) == 1.0
        assert r.get_sample_value("frexport_rank_status", {"rank": str(rank), "status": "stalled"}) == 0.0
    assert r.get_sample_value("frexport_oldest_pending_collective_age_seconds",
                              {"rank": "0", "pg": "nccl:0", "pg_desc": "default_pg", "op": "all_reduce",
                               "backend": "nccl"}) is None
    # the diagnosis itself stays: what the ranks were doing when they died
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "nccl:0"}) == 1
