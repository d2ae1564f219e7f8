"""Render each Grafana dashboard with real data, for docs/ (no Grafana server can be run here).

    pip install matplotlib && python dashboards/render.py --out docs/images

It starts the same scenario as the dashboard tests (a real `frexport serve` on NCCL-shaped dumps
of a 4-rank job where rank 2 stalls and rank 1 once used the wrong dtype, scraped by a real
Prometheus with the frexport alert rules), waits for data, then runs every panel's own queries
(variables: namespace=ml, job=train, pg and rank All) against that Prometheus and draws each panel
at its grid position the way Grafana shows it: units from the panel's fieldConfig (and per-column
overrides), stat panels coloured by their thresholds, tables after their transformations, time
series on a clock axis with a right-hand legend of last values, heatmaps from the de-accumulated
buckets, Markdown rendered as text. Each picture says in its title that it is such a rendering,
not a Grafana screenshot.

    --save-data        also write each picture's query results beside it, as <dashboard>.data.json
                       (tests/e2e/test_dashboards.py checks the committed ones against the scenario's)
    --from-data DIR    draw from results saved there, without running the scenario (to iterate on drawing)

Each picture carries the SHA-256 of its results in its PNG text (DATA_KEY), so a picture drawn from other
data than the file beside it is seen.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator  # noqa: E402

SUBST = {"$namespace": "ml", "$job": "train", "$pg": ".*", "$rank": ".*", "$__rate_interval": "30s"}
SPAN_S = 90  # the time range drawn: the scenario's last 90 s
STEP_S = 2
DATA_KEY = "frexport-data-sha256"  # the PNG text chunk naming the results a picture was drawn from

# Grafana 11 light theme
BG, PANEL, BORDER, TEXT, MUTED, GRID = "#f4f5f5", "#ffffff", "#d8d9da", "#24292e", "#6e7178", "#e9eaeb"
COLORS = {"green": "#56a64b", "red": "#e02f44", "orange": "#ff780a", "yellow": "#f2cc0c", "blue": "#3274d9"}
SERIES = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
          "#508642", "#cca300", "#447ebc", "#c15c17"]

# sizes in inches (the figure is drawn at DPI dots per inch)
DPI = 80
COL_IN = 16 / 24  # one grid column: the figure is 16 in wide
ROW_IN = 0.48  # one grid row (Grafana: 30 px + 8 px gap)
HEADER_IN = 1.0
GAP_IN = 0.06
TITLE_IN = 0.3  # a panel's title bar


def _q(expr: str) -> str:
    for k, v in SUBST.items():
        expr = expr.replace(k, v)
    return expr


# ---------------------------------------------------------------- units (Grafana's value formats)

def _num(v: float, digits: int = 3) -> str:
    """At most `digits` significant digits, no exponent, no trailing zeros."""
    if v == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    out = f"{v:.{decimals}f}"
    return out.rstrip("0").rstrip(".") if "." in out else out


def _scaled(v: float, suffixes: list[str], base: float = 1000) -> str:
    i = 0
    while abs(v) >= base and i < len(suffixes) - 1:
        v /= base
        i += 1
    return _num(v) + suffixes[i]


def _duration(v: float) -> str:
    a = abs(v)
    for limit, div, name in ((1e-6, 1e-9, "ns"), (1e-3, 1e-6, "µs"), (1, 1e-3, "ms"), (60, 1, "s"),
                             (3600, 60, "min"), (86400, 3600, "h"), (7 * 86400, 86400, "d")):
        if a < limit:
            return f"{_num(v / div)} {name}"
    return f"{_num(v / (7 * 86400))} wk"


def fmt(v: float | None, unit: str | None) -> str:
    """A value as Grafana shows it for the field's unit."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit == "s":
        return "0 s" if v == 0 else _duration(v)
    if unit == "ms":
        return "0 ms" if v == 0 else _duration(v / 1000)
    if unit == "m":
        return "0 min" if v == 0 else _duration(v * 60)
    if unit == "percentunit":
        return f"{_num(v * 100)}%"
    if unit == "percent":
        return f"{_num(v)}%"
    if unit == "ops":
        return _scaled(v, ["", " K", " M", " G"]) + " ops/s"
    if unit == "bytes":
        return _scaled(v, [" B", " KiB", " MiB", " GiB", " TiB"], 1024)
    if unit in ("dateTimeAsIso", "dateTimeAsSystem"):
        return datetime.fromtimestamp(v / 1000 if v > 1e11 else v, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if unit == "none":
        return _num(v, 6)
    return _scaled(v, ["", " K", " Mil", " Bil", " Tri"])  # "short" and anything else


class UnitLocator(Locator):
    """Round ticks in the unit's display scale (2 d, 4 d, 6 d rather than 1.74 d, 3.47 d)."""

    SCALES = {"s": [1e-6, 1e-3, 1, 60, 3600, 86400, 7 * 86400], "ms": [1e-3, 1, 1000, 60e3, 3600e3, 86400e3],
              "m": [1, 60, 1440, 10080]}

    def __init__(self, unit: str) -> None:
        self.unit = unit

    @classmethod
    def scale(cls, unit: str, top: float) -> float:
        div = 1
        for d in cls.SCALES.get(unit, [1]):
            if top >= 2 * d:
                div = d
        return div

    def format(self, v: float) -> str:
        """A tick label in the axis' one scale."""
        names = {1e-6: "µs", 1e-3: "ms", 1: "s", 60: "min", 3600: "h", 86400: "d", 7 * 86400: "wk"}
        if self.unit not in self.SCALES:
            return fmt(v, self.unit)
        lo, hi = self.axis.get_view_interval()
        div = self.scale(self.unit, max(abs(lo), abs(hi)))
        secs = {"s": 1, "ms": 1e-3, "m": 60}[self.unit]
        return f"{_num(v / div)} {names[div * secs]}"

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, lo, hi):
        integer = self.unit in ("short", "none")
        div = self.scale(self.unit, max(abs(lo), abs(hi)))
        ticks = MaxNLocator(nbins=5, integer=integer, steps=[1, 2, 2.5, 5, 10]).tick_values(lo / div, hi / div)
        return [t * div for t in ticks]


AXIS_LABEL = {"s": "duration", "ms": "duration", "m": "duration", "ops": "operations per second",
              "percentunit": "percent", "percent": "percent", "bytes": "bytes", "short": "count"}


def _unit_of(panel: dict, column: str | None = None) -> str:
    fc = panel.get("fieldConfig", {})
    for ov in fc.get("overrides", []):
        if ov["matcher"].get("id") == "byName" and ov["matcher"].get("options") == column:
            for prop in ov["properties"]:
                if prop["id"] == "unit":
                    return prop["value"]
    return fc.get("defaults", {}).get("unit", "short")


def _threshold_color(panel: dict, v: float | None) -> str:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    color = "green"
    for s in steps:
        if s["value"] is None or (v is not None and v >= s["value"]):
            color = s["color"]
    return COLORS.get(color, color)


def _ellipsize(s: str, n: int) -> str:
    return s if len(s) <= n else s[:max(1, n - 1)] + "…"


# ---------------------------------------------------------------- data

def collect(dashboards: dict[str, dict], prom) -> dict:
    """Run every panel's queries as Grafana would: range queries for graphs, instant ones for the rest."""
    end = time.time()
    out = {"end": end, "panels": {}}
    for name, d in dashboards.items():
        for i, p in enumerate(d["panels"]):
            results = []
            for t in p.get("targets", []):
                if p["type"] in ("timeseries", "heatmap"):
                    results.append(prom.api("query_range", query=_q(t["expr"]), start=end - SPAN_S, end=end,
                                            step=STEP_S)["result"])
                else:
                    results.append(prom.api("query", query=_q(t["expr"]), time=end)["result"])
            out["panels"][f"{name}/{i}"] = results
    return out


def _frames(panel: dict, results: list[list[dict]]) -> list[dict]:
    """Prometheus table-format frames: one per target, columns Time, labels, Value (Value #ref with several)."""
    frames = []
    several = len(panel["targets"]) > 1
    for t, res in zip(panel["targets"], results):
        value = f"Value #{t.get('refId', 'A')}" if several else "Value"
        labels = sorted({k for s in res for k in s["metric"] if k != "__name__"})
        rows = [{"Time": float(s["value"][0]), **{k: s["metric"].get(k) for k in labels},
                 value: float(s["value"][1])} for s in res]
        frames.append({"columns": ["Time", *labels, value], "rows": rows})
    return frames


def table_rows(panel: dict, results: list[list[dict]]) -> tuple[list[str], list[dict]]:
    """The table Grafana shows: the frames after the panel's transformations (merge, organize, filterByValue)."""
    frames = _frames(panel, results)
    trans = panel.get("transformations", [])
    if any(t["id"] == "merge" for t in trans) and len(frames) > 1:
        frames = [f for f in frames if f["rows"]] or frames[:1]  # Grafana drops empty frames first
    if any(t["id"] == "merge" for t in trans) and len(frames) > 1:
        values = [c for f in frames for c in f["columns"] if c.startswith("Value")]
        key = [c for c in frames[0]["columns"] if c not in values and all(c in f["columns"] for f in frames)]
        columns, merged = [], {}
        for f in frames:
            columns += [c for c in f["columns"] if c not in columns]
        for f in frames:
            for r in f["rows"]:
                k = tuple(r.get(c) for c in key)
                merged.setdefault(k, {}).update(r)
        frames = [{"columns": columns, "rows": list(merged.values())}]
    columns, rows = frames[0]["columns"], [r for f in frames for r in f["rows"]] if frames else ([], [])
    for t in trans:
        o = t.get("options", {})
        if t["id"] == "organize":
            gone = {k for k, v in o.get("excludeByName", {}).items() if v}
            ren = o.get("renameByName", {})
            columns = [ren.get(c, c) for c in columns if c not in gone]
            rows = [{ren.get(k, k): v for k, v in r.items() if k not in gone} for r in rows]
        elif t["id"] == "filterByValue":
            for flt in o.get("filters", []):
                if flt["config"]["id"] == "isNotNull":
                    rows = [r for r in rows if r.get(flt["fieldName"]) is not None]
    rows.sort(key=lambda r: tuple(str(r.get(c, "")).zfill(6) for c in columns))
    if "sort_desc" in panel["targets"][0]["expr"] or "topk" in panel["targets"][0]["expr"]:
        vcol = columns[-1]
        rows.sort(key=lambda r: -(r.get(vcol) or 0))
    return columns, rows


def stat_value(results: list[list[dict]]) -> float | None:
    """A stat panel's value: its first query's first series."""
    res = results[0] if results else []
    return float(res[0]["value"][1]) if res else None


def last_not_null(ys: list[float]) -> float | None:
    """A series' value in the legend (Grafana's lastNotNull)."""
    return next((v for v in reversed(ys) if math.isfinite(v)), None)


def heatmap_unit(panel: dict) -> str:
    return panel.get("options", {}).get("yAxis", {}).get("unit") or _unit_of(panel)


def heat_grid(results: list[list[dict]]) -> tuple[list[float], list[str], np.ndarray]:
    """A heatmap's cells: sample times, the `le` of each row drawn (those between the lowest and highest
    with counts) and the counts per row and time."""
    buckets = sorted(results[0], key=lambda s: float(s["metric"].get("le", "inf").replace("+Inf", "inf")))
    times = sorted({float(v[0]) for s in buckets for v in s["values"]})
    idx = {t: i for i, t in enumerate(times)}
    cum = np.zeros((len(buckets), len(times)))
    for j, s in enumerate(buckets):
        for t, v in s["values"]:
            cum[j, idx[float(t)]] = float(v)
    grid = np.diff(cum, axis=0, prepend=0)  # cumulative buckets -> counts per bucket, as Grafana does
    grid = np.clip(grid, 0, None)
    keep = np.where(grid.sum(axis=1) > 0)[0]
    lo_j, hi_j = (keep.min(), keep.max()) if len(keep) else (0, len(buckets) - 1)
    les = [s["metric"].get("le", "+Inf") for s in buckets][lo_j:hi_j + 1]
    return times, les, grid[lo_j:hi_j + 1]


def _legend(fmt_: str, metric: dict) -> str:
    if fmt_ == "__auto" or not fmt_:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__") + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt_).strip()


# ---------------------------------------------------------------- drawing

class Page:
    def __init__(self, dashboard: dict, stem: str, end: float) -> None:
        self.rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
        self.w_in, self.h_in = 24 * COL_IN, HEADER_IN + self.rows * ROW_IN + 0.1
        self.fig = plt.figure(figsize=(self.w_in, self.h_in), facecolor=BG)
        self.renderer = self.fig.canvas.get_renderer()
        t0 = datetime.fromtimestamp(end - SPAN_S, timezone.utc).strftime("%H:%M:%S")
        t1 = datetime.fromtimestamp(end, timezone.utc).strftime("%H:%M:%S UTC")
        self.fig.text(0.1 / self.w_in, 1 - 0.12 / self.h_in,
                      f"Rendering of the Grafana dashboard “{dashboard['title']}” from its own queries on a real "
                      "Prometheus (not a Grafana screenshot)", fontsize=14, fontweight="bold", color=TEXT, va="top")
        self.fig.text(0.1 / self.w_in, 1 - 0.47 / self.h_in,
                      f"dashboards/{stem}.json, drawn by dashboards/render.py (matplotlib); Prometheus scrapes a real "
                      "frexport sidecar reading a live 4-rank job (tests/support/dashboard_job.py) in which rank 2 "
                      "stops.\n"
                      f"Variables: namespace=ml, job=train, pg=All, rank=All.   Time range: last {SPAN_S} s, "
                      f"{t0} – {t1}.",
                      fontsize=9, color=MUTED, va="top")

    def box(self, x_in: float, y_in: float, w_in: float, h_in: float) -> list[float]:
        """Figure coordinates of a box given in inches from the top left."""
        return [x_in / self.w_in, 1 - (y_in + h_in) / self.h_in, w_in / self.w_in, h_in / self.h_in]

    def panel_box(self, g: dict) -> tuple[float, float, float, float]:
        return (g["x"] * COL_IN + GAP_IN, HEADER_IN + g["y"] * ROW_IN + GAP_IN,
                g["w"] * COL_IN - 2 * GAP_IN, g["h"] * ROW_IN - 2 * GAP_IN)

    def frame(self, p: dict, face: str = PANEL, title_color: str = TEXT):
        x, y, w, h = self.panel_box(p["gridPos"])
        ax = self.fig.add_axes(self.box(x, y, w, h))
        ax.set_axis_off()
        ax.add_patch(FancyBboxPatch((0, 0), 1, 1, boxstyle="round,pad=0,rounding_size=0.01", transform=ax.transAxes,
                                    facecolor=face, edgecolor=BORDER, linewidth=0.8))
        ax.text(0.12 / w, 1 - 0.06 / h, _ellipsize(p["title"], int(w * 11)), transform=ax.transAxes, va="top",
                fontsize=10, fontweight="bold", color=title_color)
        return x, y + TITLE_IN, w, h - TITLE_IN  # the content area, in inches

    # -- panel types

    def row(self, p: dict) -> None:
        x, y, w, h = self.panel_box(p["gridPos"])
        self.fig.text(x / self.w_in, 1 - (y + h / 2) / self.h_in, "▾ " + p["title"], fontsize=12,
                      fontweight="bold", color=TEXT, va="center")

    def stat(self, p: dict, results: list[list[dict]]) -> None:
        v = stat_value(results)
        color = _threshold_color(p, v) if v is not None else PANEL
        x, y, w, h = self.frame(p, face=color, title_color="white" if v is not None else TEXT)
        ax = self.fig.add_axes(self.box(x, y, w, h))
        ax.set_axis_off()
        ax.text(0.5, 0.5, "No data" if v is None else fmt(v, _unit_of(p)), ha="center", va="center",
                fontsize=min(34, h * 30), fontweight="bold", color="white" if v is not None else MUTED)

    def table(self, p: dict, results: list[list[dict]]) -> None:
        x, y, w, h = self.frame(p)
        ax = self.fig.add_axes(self.box(x + 0.08, y, w - 0.16, h - 0.06))
        ax.set_axis_off()
        ax.set_xlim(0, w - 0.16)
        ax.set_ylim(h - 0.06, 0)
        columns, rows = table_rows(p, results)
        if not rows:
            ax.text((w - 0.16) / 2, (h - 0.06) / 2, "No data", ha="center", va="center", color=MUTED, fontsize=11)
            return
        cells = [[fmt(r.get(c), _unit_of(p, c)) if isinstance(r.get(c), float) else (r.get(c) or "")
                  for c in columns] for r in rows]
        want = [max(len(c), *(len(row[i]) for row in cells)) + 2 for i, c in enumerate(columns)]
        size = 8.5 if sum(want) * 0.075 <= w - 0.16 else 7.5  # a denser font for wide tables
        char_in = 0.078 * size / 8.5  # width of one character, with room to spare
        avail = int((w - 0.16) / char_in)
        floor = [min(want[0], 24)] + [min(w_, 9) for w_ in want[1:]]  # the first column (the name) keeps the most
        while sum(want) > avail and any(a > b for a, b in zip(want, floor)):
            i = max(range(len(want)), key=lambda k: want[k] - floor[k])  # shrink the widest, truncate with "…"
            want[i] -= 1
        hidden = []
        while sum(want) > avail and len(columns) > 1:  # Grafana scrolls sideways: name what is off to the right
            hidden.insert(0, columns[-1])
            columns, want, cells = columns[:-1], want[:-1], [row[:-1] for row in cells]
        line_h = 0.26
        n_fit = int((h - 0.06) / line_h) - 1 - (1 if hidden else 0)
        shown = cells if len(cells) <= n_fit else cells[:n_fit - 1]
        xs = [sum(want[:i]) * char_in for i in range(len(columns))]
        for i, c in enumerate(columns):
            ax.text(xs[i], line_h * 0.5, _ellipsize(c, want[i] - 1), fontsize=size, fontweight="bold", color=TEXT,
                    va="center")
        ax.axhline(line_h, color=BORDER, linewidth=0.8)
        for j, row in enumerate(shown):
            yy = line_h * (j + 1.5)
            if j % 2:
                ax.add_patch(Rectangle((0, line_h * (j + 1)), w, line_h, facecolor="#f7f8fa", edgecolor="none"))
            for i, cell in enumerate(row):
                ax.text(xs[i], yy, _ellipsize(cell, want[i] - 1), fontsize=size, color=TEXT, va="center",
                        family="DejaVu Sans")
        notes = []
        if len(shown) < len(cells):
            notes.append(f"… {len(cells) - len(shown)} more rows")
        if hidden:
            notes.append(f"→ {len(hidden)} more columns to the right: " + ", ".join(hidden))
        for k, note in enumerate(notes):
            ax.text(0, line_h * (len(shown) + 1.5 + k), _ellipsize(note, avail), fontsize=size, color=MUTED,
                    va="center", style="italic")

    def _legend_table(self, ax, entries: list[tuple[str, str, str]], unit_col: str, rows_fit: int) -> None:
        ax.set_axis_off()
        ax.set_xlim(0, 1)
        ax.set_ylim(rows_fit + 0.5, -0.5)
        ax.text(1, 0, unit_col, ha="right", va="center", fontsize=8, fontweight="bold", color=MUTED)
        width_chars = int(ax.get_position().width * self.w_in / 0.068) - 10
        shown = entries if len(entries) <= rows_fit else entries[:rows_fit - 1]
        for j, (name, color, last) in enumerate(shown, start=1):
            ax.plot([0, 0.05], [j, j], color=color, linewidth=3, solid_capstyle="butt")
            ax.text(0.07, j, _ellipsize(name, max(8, width_chars)), va="center", fontsize=8, color=TEXT)
            ax.text(1, j, last, ha="right", va="center", fontsize=8, color=TEXT)
        if len(shown) < len(entries):
            ax.text(0.07, len(shown) + 1, f"… {len(entries) - len(shown)} more series", va="center", fontsize=8,
                    color=MUTED, style="italic")

    def _time_axes(self, p: dict, x: float, y: float, w: float, h: float, legend_w: float, legend_h: float = 0):
        left, bottom = 0.85, 0.5  # room for tick labels and axis labels
        plot_w = w - left - legend_w - 0.15
        ax = self.fig.add_axes(self.box(x + left, y + 0.05, plot_w, h - 0.05 - bottom - legend_h))
        ax.set_facecolor(PANEL)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_color(BORDER)
        ax.grid(True, color=GRID, linewidth=0.8)
        ax.tick_params(labelsize=8, colors=MUTED, length=0)
        # clock ticks every 30 s, or every minute where the plot is narrow (the labels must not touch)
        ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=[0, 30] if plot_w > 2.6 else [0]))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))
        ax.set_xlabel("time (UTC)", fontsize=8, color=MUTED, labelpad=2)
        return ax

    def timeseries(self, p: dict, results: list[list[dict]]) -> None:
        x, y, w, h = self.frame(p)
        unit = _unit_of(p)
        n_series = sum(len(r) for r in results)
        below = w < 4.5  # a narrow panel: the legend goes under the graph, as Grafana does when it lacks room
        legend_w = 0 if below else min(4.2, w * 0.42)
        legend_h = min(n_series + 1, 4) * 0.21 + 0.05 if below and n_series else 0
        ax = self._time_axes(p, x, y, w, h, legend_w, legend_h)
        entries = []
        for t, res in zip(p["targets"], results):
            for s in res:
                color = SERIES[len(entries) % len(SERIES)]
                xs = [datetime.fromtimestamp(float(v[0]), timezone.utc) for v in s["values"]]
                ys = [float(v[1]) for v in s["values"]]
                ax.plot(xs, ys, color=color, linewidth=1.6, drawstyle="steps-post" if unit == "short" else "default")
                last = last_not_null(ys)
                entries.append((_legend(t.get("legendFormat", ""), s["metric"]), color, fmt(last, unit)))
        ax.set_xlim(datetime.fromtimestamp(self.end - SPAN_S, timezone.utc),
                    datetime.fromtimestamp(self.end, timezone.utc))
        locator = UnitLocator(unit)
        ax.yaxis.set_major_locator(locator)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: locator.format(v)))
        label = p.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("axisLabel")
        ax.set_ylabel(label or AXIS_LABEL.get(unit, unit), fontsize=8, color=MUTED)
        if not entries:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color=MUTED, fontsize=11)
            ax.set_yticks([])
            return
        ys = [v for line in ax.lines for v in line.get_ydata() if math.isfinite(v)] or [0]
        lo, hi = min(0, min(ys)), max(ys)
        if hi - lo < 1e-9:  # only zeros: Grafana gives the axis a 0..1 range
            hi = lo + 1
        ax.set_ylim(lo, hi + (hi - lo) * 0.08)
        if below:
            lax = self.fig.add_axes(self.box(x + 0.15, y + h - legend_h - 0.05, w - 0.3, legend_h))
            self._legend_table(lax, entries, "Last *", int(legend_h / 0.21) - 1)
        else:
            lax = self.fig.add_axes(self.box(x + w - legend_w - 0.1, y + 0.05, legend_w, h - 0.1))
            self._legend_table(lax, entries, "Last *", int((h - 0.1) / 0.21) - 1)

    def heatmap(self, p: dict, results: list[list[dict]]) -> None:
        x, y, w, h = self.frame(p)
        unit = heatmap_unit(p)
        ax = self._time_axes(p, x, y, w, h, 1.1)
        if not results or not results[0]:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color=MUTED)
            return
        times, les, grid = heat_grid(results)
        t_edges = [datetime.fromtimestamp(t, timezone.utc) for t in times]
        t_edges.append(datetime.fromtimestamp(times[-1] + STEP_S, timezone.utc))
        masked = np.ma.masked_where(grid <= 0, grid)
        mesh = ax.pcolormesh(mdates.date2num(t_edges), np.arange(len(les) + 1), masked, cmap="Oranges",
                             edgecolors=PANEL, linewidth=0.3)
        start = datetime.fromtimestamp(self.end - SPAN_S, timezone.utc)
        ax.set_xlim(mdates.date2num(start), mdates.date2num(t_edges[-1]))
        ax.set_yticks(np.arange(len(les)) + 0.5)
        ax.set_yticklabels([("≤ " + fmt(float(le), unit)) if le != "+Inf" else "> " + fmt(float(les[-2]), unit)
                            for le in les], fontsize=7.5)
        ax.set_ylabel("duration bucket", fontsize=8, color=MUTED)
        ax.grid(False)
        cax = self.fig.add_axes(self.box(x + w - 1.0, y + 0.05, 0.12, h - 0.55))
        cb = self.fig.colorbar(mesh, cax=cax)
        cb.ax.tick_params(labelsize=7, colors=MUTED, length=0)
        cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, "short")))
        cb.set_label("collectives per 30 s", fontsize=7.5, color=MUTED)
        cb.outline.set_edgecolor(BORDER)

    def text(self, p: dict) -> None:
        x, y, w, h = self.frame(p)
        content = p.get("options", {}).get("content", "")
        content = content.replace("${runbook_base}", "runbooks.md")
        self._markdown(content, x + 0.15, y + 0.05, w - 0.3, h - 0.1)

    def _markdown(self, md: str, x: float, y: float, w: float, h: float) -> None:
        """Paragraphs and bullet lists, with **bold**, `code` and [links](url) (shown as their text, in blue)."""
        size, line_in = 9, 0.2
        cy = y
        for block in md.split("\n"):
            bullet = block.lstrip().startswith(("- ", "* "))
            text = block.lstrip()[2:] if bullet else block
            if not text.strip():
                cy += line_in * 0.5
                continue
            spans = []
            for m in re.finditer(r"\*\*(.+?)\*\*|`(.+?)`|\[(.+?)\]\((.+?)\)|([^*`\[]+|.)", text):
                if m.group(1):
                    spans.append((m.group(1), {"fontweight": "bold"}))
                elif m.group(2):
                    spans.append((m.group(2), {"family": "DejaVu Sans Mono", "color": "#a0365d"}))
                elif m.group(3):
                    spans.append((m.group(3), {"color": COLORS["blue"]}))
                else:
                    spans.append((m.group(5), {}))
            indent = 0.25 if bullet else 0.0
            cx = x + indent
            if bullet:
                self._put(x + 0.08, cy, "•", {})
            for chunk, style in spans:
                for word in re.findall(r"\S+\s*|\s+", chunk):
                    ww = self._width(word, style, size)
                    if cx + ww > x + w and cx > x + indent:
                        cx, cy = x + indent, cy + line_in
                    if cy + line_in > y + h:
                        return
                    self._put(cx, cy, word, style, size)
                    cx += ww
            cy += line_in * 1.25

    def _put(self, x: float, y: float, s: str, style: dict, size: float = 9):
        return self.fig.text(x / self.w_in, 1 - y / self.h_in, s, va="top", fontsize=size,
                             color=style.get("color", TEXT), **{k: v for k, v in style.items() if k != "color"})

    def _width(self, s: str, style: dict, size: float) -> float:
        t = self._put(0, 0, s.replace(" ", "\u00a0"), style, size)
        wid = t.get_window_extent(renderer=self.renderer).width / self.fig.dpi
        t.remove()
        return wid


def draw(dashboard: dict, stem: str, data: dict, out: Path, digest: str | None = None) -> None:
    plt.rcParams.update({"font.family": "DejaVu Sans", "figure.dpi": DPI})
    page = Page(dashboard, stem, data["end"])
    page.end = data["end"]
    for i, p in enumerate(dashboard["panels"]):
        results = data["panels"].get(f"{stem}/{i}", [])
        kind = p["type"]
        if kind == "row":
            page.row(p)
        elif kind == "stat":
            page.stat(p, results)
        elif kind == "table":
            page.table(p, results)
        elif kind == "timeseries":
            page.timeseries(p, results)
        elif kind == "heatmap":
            page.heatmap(p, results)
        elif kind == "text":
            page.text(p)
        else:
            raise ValueError(f"{stem}: panel type {kind!r} has no renderer")
    page.fig.savefig(out, dpi=DPI, facecolor=BG, pil_kwargs={"optimize": True}, metadata={DATA_KEY: digest})
    plt.close(page.fig)


def run_scenario() -> dict:
    from tests.support.dashboard_job import stalled_job

    with tempfile.TemporaryDirectory(prefix="frx-render-") as d, stalled_job(Path(d)) as prom:
        return collect(load_dashboards(), prom)


def load_dashboards() -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(HERE.glob("*.json"))}


def picture_data(data: dict, stem: str) -> str:
    """One picture's query results, as saved beside it."""
    return json.dumps({"end": data["end"], "panels": {k: v for k, v in data["panels"].items()
                                                      if k.split("/")[0] == stem}})


def load_data(directory: Path) -> dict:
    """The results of every picture saved in `directory`, as collect() gave them."""
    saved = [json.loads(p.read_text()) for p in sorted(directory.glob("*.data.json"))]
    if not saved:
        raise SystemExit(f"{directory}: no *.data.json (render with --save-data first)")
    return {"end": saved[0]["end"], "panels": {k: v for d in saved for k, v in d["panels"].items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "images"))
    ap.add_argument("--save-data", action="store_true", help="also write each picture's query results beside it")
    ap.add_argument("--from-data", metavar="DIR", help="draw from query results saved there with --save-data")
    args = ap.parse_args()
    data = load_data(Path(args.from_data)) if args.from_data else run_scenario()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, dashboard in load_dashboards().items():
        text = picture_data(data, stem)
        if args.save_data:
            (out / f"{stem}.data.json").write_text(text)
        draw(dashboard, stem, data, out / f"{stem}.png", hashlib.sha256(text.encode()).hexdigest())
        print(f"wrote {out / stem}.png ({(out / f'{stem}.png').stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
