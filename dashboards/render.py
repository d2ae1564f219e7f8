"""Draw each dashboard's layout with real data, for docs/ (no Grafana server runs here).

    pip install matplotlib && python dashboards/render.py --out docs/images

It starts the same scenario as the dashboard tests (a real `frexport serve` on NCCL-shaped dumps
of a 4-rank job where rank 2 stalls and rank 1 once used the wrong dtype, scraped by a real
Prometheus), waits for data, then draws every panel at its grid position: time series from
Prometheus' query_range, stats and tables from instant queries, text panels as text. It is a
picture of the layout and the data, not a Grafana screenshot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests")]

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SUBST = {"$namespace": "ml", "$job": "train", "$pg": ".*", "$rank": ".*", "$__rate_interval": "30s"}


def _q(expr: str) -> str:
    for k, v in SUBST.items():
        expr = expr.replace(k, v)
    return expr


def _legend(fmt: str, metric: dict) -> str:
    out = fmt
    for k, v in metric.items():
        out = out.replace("{{" + k + "}}", v)
    return out if out != "__auto" else ",".join(f"{k}={v}" for k, v in metric.items() if k != "__name__")[:40]


def draw(dashboard: dict, prom, out: Path, span_s: int = 120) -> None:
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    fig = plt.figure(figsize=(16, rows * 0.42))
    fig.suptitle(dashboard["title"], fontsize=14, x=0.01, y=0.995, ha="left")
    end = time.time()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        ax = fig.add_axes([g["x"] / 24 + 0.004, 1 - (g["y"] + g["h"]) / rows * 0.93 - 0.05,
                           g["w"] / 24 - 0.008, g["h"] / rows * 0.93 - 0.014])
        ax.set_title(p["title"], fontsize=9, loc="left")
        if p["type"] == "row":
            ax.axis("off")
            ax.set_title(p["title"], fontsize=11, loc="left", fontweight="bold")
            continue
        if p["type"] == "timeseries":
            for t in p["targets"]:
                res = prom.api("query_range", query=_q(t["expr"]), start=end - span_s, end=end, step=2)["result"]
                for s in res[:12]:
                    xs = [float(v[0]) - end for v in s["values"]]
                    ax.plot(xs, [float(v[1]) for v in s["values"]], label=_legend(t["legendFormat"], s["metric"]))
            ax.tick_params(labelsize=7)
            if ax.lines:
                ax.legend(fontsize=6, loc="upper left")
            else:
                ax.text(0.5, 0.5, "No data", ha="center", va="center", color="grey")
            continue
        ax.set_xticks([])
        ax.set_yticks([])
        if p["type"] == "stat":
            res = prom.query(_q(p["targets"][0]["expr"]))
            value = float(res[0]["value"][1]) if res else None
            color = "#d44a3a" if value else "#299c46"
            ax.set_facecolor(color)
            ax.text(0.5, 0.4, "No data" if value is None else f"{value:g}", ha="center", va="center", fontsize=22,
                    color="white")
        elif p["type"] == "table":
            lines = []
            for t in p["targets"][:2]:
                for s in prom.query(_q(t["expr"]))[:6]:
                    labels = {k: v for k, v in s["metric"].items() if k not in ("__name__", "namespace", "job", "pod")}
                    lines.append("  ".join(f"{k}={v}" for k, v in labels.items()) + f"   {float(s['value'][1]):.4g}")
            ax.text(0.01, 0.95, "\n".join(lines) or "No data", va="top", family="monospace", fontsize=7)
        elif p["type"] == "heatmap":
            res = prom.api("query_range", query=_q(p["targets"][0]["expr"]), start=end - span_s, end=end,
                           step=2)["result"]
            buckets = sorted(res, key=lambda s: float(s["metric"].get("le", "inf").replace("+Inf", "inf")))
            grid = [[float(v[1]) for v in s["values"]] for s in buckets]
            if grid and grid[0]:
                ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis")
                ax.set_ylabel("le bucket", fontsize=7)
            else:
                ax.text(0.5, 0.5, "No data", ha="center", va="center", color="grey")
        elif p["type"] == "text":
            ax.text(0.01, 0.95, p["options"]["content"].replace("${runbook_base}", "runbooks.md")[:600],
                    va="top", fontsize=7, wrap=True)
    fig.savefig(out, dpi=70)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "images"))
    args = ap.parse_args()
    from promserver import PromServer
    from sidecar import Sidecar
    from synth import STEP_NS, T0, dump, entry, write

    d = Path(tempfile.mkdtemp(prefix="frx-render-"))

    def snapshot(steps):
        job = {r: [entry(i, i + 1, created=T0 + i * STEP_NS + r * 1000, duration_ms=1.0 + (i % 7) * 3 + r,
                         dtype="BFloat16" if (r == 1 and i == 5) else "Float") for i in range(steps)]
               for r in range(4)}
        for r in (0, 1, 3):
            job[r].append(entry(steps, steps + 1, state="started", created=T0 + steps * STEP_NS))
        write(d, {r: dump(es, world=4) for r, es in job.items()})

    rules = HERE.parent / "config" / "prometheus" / "frexport-rules.yaml"
    snapshot(10)
    with Sidecar("--dump-dir", str(d), "--stall-after", "1s", env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}) as sc, \
            PromServer(targets=[(f"127.0.0.1:{sc.port}", {"job": "train", "namespace": "ml", "pod": "p0"})],
                       rule_files=[str(rules)]) as prom:
        for steps in range(12, 40, 2):  # the job progresses, then rank 2 stalls at the last step
            time.sleep(4)
            snapshot(steps)
        time.sleep(20)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted(HERE.glob("*.json")):
            draw(json.loads(path.read_text()), prom, out / f"{path.stem}.png")
            print(f"wrote {out / path.stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
