"""The live analysis' findings, the culprits' stall time and the threshold."""

from frexport.analysis import findings as F
from tests.unit.export.prometheus.scenario import STALL


def test_findings_are_counted_by_kind_and_group(scenario):
    r = scenario.registry()
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "0"}) == 1
    assert r.get_sample_value("frexport_findings", {"kind": F.STRAGGLER, "pg": "1"}) == 1


def test_only_the_culprit_has_a_stall_time_since_the_collective_was_issued(scenario):
    r = scenario.registry()
    labels = {"pg": "0", "pg_desc": "default_pg", "op": "all_reduce", "kind": F.MISSING_RANK}
    # issued at T0 + 1 s, scraped at T0 + 60 s
    assert r.get_sample_value("frexport_rank_stall_seconds", {**labels, "rank": "2"}) == 59.0
    assert [r.get_sample_value("frexport_rank_stall_seconds", {**labels, "rank": str(k)}) for k in (0, 1, 3)] \
        == [None] * 3
    assert r.get_sample_value("frexport_stall_threshold_seconds") == 30.0


def test_a_finding_that_is_not_a_root_cause_has_no_stall_time(scenario):
    scenario.analysis.latest.diagnosis.findings[0] = F.Finding(**{**STALL.__dict__, "root_cause": False})
    r = scenario.registry()
    assert r.get_sample_value("frexport_rank_stall_seconds", {"pg": "0", "pg_desc": "default_pg", "op": "all_reduce",
                                                              "kind": F.MISSING_RANK, "rank": "2"}) is None
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "0"}) == 1


def test_before_the_first_analysis_there_is_no_threshold_and_no_finding(scenario):
    scenario.analysis.latest = None
    r = scenario.registry()
    assert r.get_sample_value("frexport_stall_threshold_seconds") is None
    assert r.get_sample_value("frexport_findings", {"kind": F.MISSING_RANK, "pg": "0"}) is None
    assert r.get_sample_value("frexport_scrape_collector_success", {"collector": "findings"}) == 1
