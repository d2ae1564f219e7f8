"""dashboards/render.py: values in the panels' units, tables after their transformations."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("render", ROOT / "dashboards" / "render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


@pytest.mark.parametrize("value, unit, shown", [
    (292737, "s", "3.39 d"), (0.0002, "s", "200 µs"), (0.0247, "s", "24.7 ms"), (646504, "s", "1.07 wk"),
    (345123, "short", "345 K"), (3, "short", "3"), (0.828, "ops", "0.828 ops/s"), (0.25, "percentunit", "25%"),
    (42, "m", "42 min"), (1795000000, "dateTimeAsIso", "2026-11-18 11:06:40"), (None, "s", "—"),
])
def test_values_are_shown_in_the_panel_unit(value, unit, shown):
    assert render.fmt(value, unit) == shown
    assert "e+" not in render.fmt(value, unit) and "e-" not in render.fmt(value, unit)


def _overview_table():
    d = json.loads((ROOT / "dashboards" / "frexport-job-overview.json").read_text())
    return next(p for p in d["panels"] if p["title"] == "Ranks that are not ok")


def _row(value, **labels):
    return {"metric": {"namespace": "ml", "job": "train", **labels}, "value": [100.0, str(value)]}


def test_the_not_ok_table_merges_its_three_queries_per_rank():
    p = _overview_table()
    status = [_row(1, rank="0", status="blocked"), _row(1, rank="2", status="stalled")]
    stall = [_row(0.5, rank="2", pg="nccl:0", pg_desc="default_pg", op="all_reduce", kind="missing_rank")]
    pending = [_row(9.0, rank="0", pg="nccl:0", pg_desc="default_pg", op="all_reduce")]
    columns, rows = render.table_rows(p, [status, stall, pending])
    assert "Time" not in columns and "Value #A" not in columns
    assert {r["rank"]: (r["status"], r.get("stalled for"), r.get("oldest pending")) for r in rows} == {
        "0": ("blocked", None, 9.0), "2": ("stalled", 0.5, None)}
    assert render._unit_of(p, "stalled for") == "s" and render._unit_of(p, "status") == "short"


def test_an_empty_query_does_not_merge_every_rank_into_one_row():
    p = _overview_table()
    status = [_row(1, rank=str(r), status="blocked") for r in range(4)]
    columns, rows = render.table_rows(p, [status, [], []])
    assert sorted(r["rank"] for r in rows) == ["0", "1", "2", "3"]


def test_thresholds_color_the_stats():
    d = json.loads((ROOT / "dashboards" / "frexport-job-overview.json").read_text())
    stalled = next(p for p in d["panels"] if p["title"] == "Stalled ranks")
    assert render._threshold_color(stalled, 0) == render.COLORS["green"]
    assert render._threshold_color(stalled, 1) == render.COLORS["red"]
