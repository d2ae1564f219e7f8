"""Each source's health, decode errors and timeout dumps."""

from tests.unit.export.prometheus.scenario import FIRST, S


def test_a_source_that_failed_last_is_down_and_keeps_its_last_success(scenario):
    r = scenario.registry()
    up = {k: r.get_sample_value("frexport_source_up", {"source": f"socket:rank-{k}"}) for k in range(4)}
    assert up == {0: 1, 1: 1, 2: 0, 3: 1}
    rank2 = {"source": "socket:rank-2"}
    assert r.get_sample_value("frexport_source_last_success_timestamp_seconds", rank2) == FIRST / S
    assert r.get_sample_value("frexport_source_scrape_duration_seconds", rank2) == 5.0
    assert r.get_sample_value("frexport_source_errors_total", {**rank2, "reason": "timeout"}) == 1
    assert r.get_sample_value("frexport_source_errors_total", {"source": "socket:rank-0", "reason": "timeout"}) is None


def test_a_source_never_successful_has_no_last_success(scenario):
    scenario.health.record("dumps:/shared/dumps", False, 0.1, FIRST, reason="down")
    r = scenario.registry()
    assert r.get_sample_value("frexport_source_up", {"source": "dumps:/shared/dumps"}) == 0
    assert r.get_sample_value("frexport_source_last_success_timestamp_seconds", {"source": "dumps:/shared/dumps"}) \
        is None


def test_decode_errors_and_timeout_dumps(scenario):
    r = scenario.registry()
    assert r.get_sample_value("frexport_decode_errors_total", {"reason": "truncated"}) == 1
    assert r.get_sample_value("frexport_timeout_dumps_total", {"rank": "2"}) == 1
    scenario.state.count_timeout_dump(2)
    assert scenario.registry().get_sample_value("frexport_timeout_dumps_total", {"rank": "2"}) == 2
