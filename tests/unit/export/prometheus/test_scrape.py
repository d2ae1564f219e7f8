"""One scrape over every collector: a failing one is reported and skipped, the rest still served;
duplicate names are refused; process_* and python_* are there."""

import logging
import sys

import pytest
from prometheus_client.core import GaugeMetricFamily

from frexport import logs
from frexport.evidence.sink import EvidenceSink
from frexport.export.prometheus import BuildInfoCollector, FindingsCollector, ScrapeCollector, scrape_collector


def _families(registry) -> set[str]:
    return {m.name for m in registry.collect()}


def _boom(self):
    raise RuntimeError("a bug in a collector")


def _success(registry) -> dict[str, float]:
    return {s.labels["collector"]: s.value for m in registry.collect() if m.name == "frexport_scrape_collector_success"
            for s in m.samples}


def test_a_failing_collector_costs_only_its_own_families(scenario, monkeypatch):
    healthy = _families(scenario.registry())
    monkeypatch.setattr(FindingsCollector, "collect", _boom)
    r = scenario.registry()
    findings = {"frexport_findings", "frexport_rank_stall_seconds", "frexport_stall_threshold_seconds"}
    assert findings <= healthy
    assert _families(r) == healthy - findings
    assert _success(r) == {"rank_progress": 1, "collectives": 1, "findings": 0, "waits": 1, "sources": 1,
                           "recorders": 1, "build_info": 1, "evidence": 1}
    assert r.get_sample_value("frexport_scrape_collector_duration_seconds", {"collector": "findings"}) >= 0
    # what the alert rules and dashboards read is still there
    assert r.get_sample_value("frexport_rank_status", {"rank": "2", "status": "stalled"}) == 1


def test_a_collector_failing_midway_leaves_no_half_families():
    class Half:
        def describe(self):
            yield GaugeMetricFamily("test_first", "x")
            yield GaugeMetricFamily("test_second", "x")

        def collect(self):
            g = GaugeMetricFamily("test_first", "x")
            g.add_metric([], 1)
            yield g
            raise RuntimeError("after the first family")

    scrape = ScrapeCollector({"half": Half(), "build_info": BuildInfoCollector()})
    names = [m.name for m in scrape.collect()]
    assert "test_first" not in names and "frexport_build_info" in names


def test_the_failure_is_logged_with_its_traceback(scenario, monkeypatch, caplog):
    monkeypatch.setattr(FindingsCollector, "collect", _boom)
    log = logs.get()
    log.addHandler(caplog.handler)  # the daemon's logger may not propagate
    try:
        with caplog.at_level(logging.ERROR, logs.LOGGER):
            list(scenario.registry().collect())
    finally:
        log.removeHandler(caplog.handler)
    failed = [rec for rec in caplog.records if "findings" in rec.getMessage()]
    assert failed and failed[0].exc_info and "a bug in a collector" in str(failed[0].exc_info[1])


def test_a_sinks_self_metrics_are_isolated_too(scenario, monkeypatch):
    r = scenario.registry()
    monkeypatch.setattr(EvidenceSink, "collect", _boom)
    assert _success(r)["evidence"] == 0 and _success(r)["rank_progress"] == 1
    assert r.get_sample_value("frexport_evidence_bundles_total", {"result": "written"}) is None


def test_a_name_exposed_twice_is_refused(scenario):
    with pytest.raises(ValueError, match="frexport_build_info"):
        ScrapeCollector({"a": BuildInfoCollector(), "b": BuildInfoCollector()})
    with pytest.raises(ValueError, match="frexport_build_info"):
        scenario.registry().register(BuildInfoCollector())  # the sidecar's registry auto-describes
    scenario.sinks[0].name = "findings"
    with pytest.raises(ValueError, match="findings"):
        scrape_collector(scenario.state, scenario.health, scenario.analysis, scenario.sinks)


def test_describe_names_what_collect_yields(scenario):
    """The docs test and the duplicate check trust describe(): it must match what a scrape has."""
    scrape = scrape_collector(scenario.state, scenario.health, scenario.analysis, scenario.sinks, scenario.clock)
    assert {(m.name, m.type) for m in scrape.describe()} == {(m.name, m.type) for m in scrape.collect()}


def test_the_sidecar_serves_process_and_python_metrics(scenario):
    r = scenario.registry(process=True)
    impl = sys.implementation.name
    info = {"implementation": {"cpython": "CPython"}.get(impl, impl), "major": str(sys.version_info.major),
            "minor": str(sys.version_info.minor), "patchlevel": str(sys.version_info.micro),
            "version": ".".join(map(str, sys.version_info[:3]))}
    assert r.get_sample_value("python_info", info) == 1
    assert r.get_sample_value("python_gc_collections_total", {"generation": "0"}) is not None
    if sys.platform == "linux":  # ProcessCollector reads /proc
        assert r.get_sample_value("process_resident_memory_bytes") > 0
        assert r.get_sample_value("process_cpu_seconds_total") > 0
