"""Grafana dashboards: valid for Grafana 11, every query accepted by a real Prometheus, and the
panels that matter show data for a real stalled scenario (no "No data" when it counts)."""

import json
import re
import subprocess
import sys

import pytest

from tests.support import dashboard_job, paths

ROOT = paths.ROOT
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
BUILTINS = {"__rate_interval", "__interval", "__range", "__all", "__data"}
SUBST = {"$namespace": "ml", "$job": "train", "$pg": ".*", "$rank": ".*", "$__rate_interval": "1m"}


def _load(path):
    return json.loads(path.read_text())


def _panels(d):
    return [p for p in d["panels"] if p["type"] != "row"]


def _exprs(d):
    return [(p["title"], t["expr"]) for p in _panels(d) for t in p.get("targets", [])]


def _promql(expr):
    for k, v in SUBST.items():
        expr = expr.replace(k, v)
    return expr


def test_generated_json_is_what_the_source_produces():
    out = subprocess.run([sys.executable, str(ROOT / "dashboards" / "generate.py"), "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert [p.name for p in DASHBOARDS] == ["frexport-collectives.json", "frexport-health.json",
                                            "frexport-job-overview.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_valid_for_grafana_11(path):
    d = _load(path)
    assert d["uid"] and d["title"] and d["schemaVersion"] == 39
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and g[k] >= 0 for k in "xywh") and g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps"
                cells.add((x, y))
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= names
    for p in _panels(d):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["description"], p["title"]
        for t in p.get("targets", []):
            assert t["datasource"] == p["datasource"]
            assert 'namespace=~"$namespace"' in t["expr"] and 'job=~"$job"' in t["expr"], t["expr"]
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", json.dumps(d)))
    assert used - names - BUILTINS == set(), used - names
    rank = [v for v in d["templating"]["list"] if v["name"] == "rank"]
    assert not rank or rank[0]["multi"] and rank[0]["includeAll"]


@pytest.fixture(scope="module")
def stalled_job(tmp_path_factory):
    """The dashboards' scenario (tests/support/dashboard_job.py): rank 2 never issues the all_reduce its
    peers wait in, rank 1 once used the wrong dtype; yields its Prometheus once FrexportRankStalled fires."""
    with dashboard_job.stalled_job(tmp_path_factory.mktemp("job")) as prom:
        yield prom


@pytest.mark.slow  # the scenario: about 100 s, shared by the module
def test_every_query_is_accepted_by_prometheus(stalled_job):
    checked = 0
    for path in DASHBOARDS:
        for _title, expr in _exprs(_load(path)):
            stalled_job.query(_promql(expr))  # raises with Prometheus' parse error otherwise
            checked += 1
        for v in _load(path)["templating"]["list"]:
            if v["type"] == "query":
                m = re.match(r"label_values\((.*),\s*(\w+)\)$", v["query"]["query"])
                assert m, v["query"]
                stalled_job.query(_promql(m.group(1)))
                checked += 1
    assert checked >= 30


MUST_SHOW_DATA = {
    "frexport-job-overview.json": ["Stalled ranks", "Blocked ranks", "Desynced ranks", "Ranks that are not ok",
                                   "Firing frexport alerts", "Last completed collective per rank",
                                   "Lag behind the group's newest collective", "Oldest pending collective"],
    "frexport-collectives.json": ["Duration quantiles", "Duration heatmap", "Collectives per second",
                                  "Pending collectives", "Slowest ranks now"],
    "frexport-health.json": ["Sources down", "Sources up", "Source scrape duration", "Time to build a scrape",
                             "Failing metrics collectors"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUST_SHOW_DATA))
def test_key_panels_show_data_for_a_stalled_job(stalled_job, name):
    d = _load(ROOT / "dashboards" / name)
    by_title = {p["title"]: p for p in _panels(d)}
    for title in MUST_SHOW_DATA[name]:
        results = [stalled_job.query(_promql(t["expr"])) for t in by_title[title]["targets"]]
        assert any(results), f"{name}: '{title}' would say No data"
    if name == "frexport-job-overview.json":
        stalled = stalled_job.query(_promql(by_title["Stalled ranks"]["targets"][0]["expr"]))
        assert float(stalled[0]["value"][1]) == 1
        not_ok = stalled_job.query(_promql(by_title["Ranks that are not ok"]["targets"][0]["expr"]))
        assert {(s["metric"]["rank"], s["metric"]["status"]) for s in not_ok} == {
            ("2", "stalled"), ("0", "blocked"), ("1", "desynced"), ("3", "blocked")}
        stall = stalled_job.query(_promql(by_title["Ranks that are not ok"]["targets"][1]["expr"]))
        assert [(s["metric"]["rank"], s["metric"]["op"]) for s in stall] == [("2", "all_reduce")]
