"""Grafana dashboards: valid for Grafana 11, every query accepted by a real Prometheus, the panels
that matter show data for a real stalled scenario (no "No data" when it counts), and the pictures of
them in docs/ still show what that scenario gives."""

import hashlib
import importlib.util
import json
import math
import re
import subprocess
import sys

import pytest
from PIL import Image

from tests.support import dashboard_job, paths

ROOT = paths.ROOT
IMAGES = ROOT / "docs" / "images"
_spec = importlib.util.spec_from_file_location("render", ROOT / "dashboards" / "render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)
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
def scenario(tmp_path_factory):
    """The dashboards' scenario (tests/support/dashboard_job.py: rank 2 never issues the all_reduce its
    peers wait in, rank 1 once used the wrong dtype) and every panel's query results at the moment
    dashboards/render.py draws them: when FrexportRankStalled fires."""
    with dashboard_job.stalled_job(tmp_path_factory.mktemp("job")) as prom:
        yield prom, render.collect(render.load_dashboards(), prom)


@pytest.fixture(scope="module")
def stalled_job(scenario):
    return scenario[0]


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


# ---------------------------------------------------------------- the pictures in docs/

DURATIONS = {"s": 1, "ms": 1e-3, "m": 60}  # panel units: seconds per unit
SCALES = ((1, "under a second"), (3600, "seconds to minutes"), (86400, "hours"), (math.inf, "days or more"))
RUN_SPECIFIC = ((re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"), (re.compile(r"dumps:/\S+"), "dumps:DIR"))


def _gist(v, unit: str):
    """What a reader takes from a value, without what differs from run to run: text and counts exactly,
    durations by their scale (a wait of seconds or minutes, not weeks), other measures (rates) as 0 or not."""
    if isinstance(v, str):
        for pattern, placeholder in RUN_SPECIFIC:
            v = pattern.sub(placeholder, v)
        return v
    if v is None or math.isnan(v):
        return None
    if unit in DURATIONS:
        return "0" if v == 0 else next(name for limit, name in SCALES if abs(v) * DURATIONS[unit] < limit)
    if unit in ("short", "none") and float(v).is_integer():
        return int(v)
    return "0" if v == 0 else "not 0"


def story(data: dict) -> dict[str, object]:
    """What each panel of each picture shows, as _gist reads it: a stat's value, a table's rows, a graph's
    series with their last value (the legend), a heatmap's non-empty buckets."""
    out: dict[str, object] = {}
    for stem, d in render.load_dashboards().items():
        for i, p in enumerate(d["panels"]):
            results = data["panels"].get(f"{stem}/{i}", [])
            key, unit = f"{stem}: {p['title']}", render._unit_of(p)
            if p["type"] == "stat":
                out[key] = _gist(render.stat_value(results), unit)
            elif p["type"] == "table":
                columns, rows = render.table_rows(p, results)
                out[key] = [tuple(columns), *sorted((tuple(_gist(r.get(c), render._unit_of(p, c)) for c in columns)
                                                     for r in rows), key=repr)]
            elif p["type"] == "timeseries":
                out[key] = sorted(((_gist(render._legend(t.get("legendFormat", ""), s["metric"]), unit),
                                    _gist(render.last_not_null([float(v) for _, v in s["values"]]), unit))
                                   for t, res in zip(p["targets"], results) for s in res), key=repr)
            elif p["type"] == "heatmap" and results and results[0]:
                _, les, grid = render.heat_grid(results)
                out[key] = sorted({_gist(float(le), render.heatmap_unit(p)) for le, row in zip(les, grid)
                                   if row.sum() > 0})
    return out


def _difference(pictured, now) -> str:
    if isinstance(pictured, list) and isinstance(now, list):  # rows or series: name only those that differ
        pictured, now = [x for x in pictured if x not in now], [x for x in now if x not in pictured]
    return f"the picture shows {pictured!r}, the scenario gives {now!r}"


@pytest.mark.slow
def test_the_pictures_show_what_the_scenario_gives_now(scenario):
    """A picture in docs/ that no longer tells what the code gives (its data, saved beside it) fails like
    any test."""
    pictured, now = story(render.load_data(IMAGES)), story(scenario[1])
    stale = [f"{k}: {_difference(pictured.get(k), now.get(k))}"
             for k in sorted(pictured.keys() | now.keys()) if pictured.get(k) != now.get(k)]
    assert not stale, "docs/images/ is stale: python dashboards/render.py --save-data\n" + "\n".join(stale)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_each_picture_is_drawn_from_the_data_beside_it(path):
    data = IMAGES / f"{path.stem}.data.json"
    drawn_from = Image.open(IMAGES / f"{path.stem}.png").text.get(render.DATA_KEY)
    assert drawn_from == hashlib.sha256(data.read_bytes()).hexdigest(), f"{path.stem}.png is not drawn from {data}"
