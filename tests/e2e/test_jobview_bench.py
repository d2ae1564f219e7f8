"""The job view's scale benchmark (benchmarks/bench_jobview.py) still measures what it says, on a small
job: the view reads every pod (in a process of their own) each pass and names the culprit on the pass
it is due. Its figures at 4096 and 16384 ranks are in benchmarks/README.md; this keeps the harness
behind them from breaking silently as the source it drives changes."""

import json
import re
import subprocess
import sys

import pytest

from tests.support import paths


def test_the_scale_benchmark_names_the_culprit_on_its_pass_with_the_pods_apart():
    out = subprocess.run([sys.executable, str(paths.BENCHMARKS / "bench_jobview.py"), "--ranks", "64",
                          "--pods", "8", "--passes", "2", "--parts", "--also-ranks", "32"], capture_output=True,
                         text=True, timeout=300,
                         cwd=paths.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    culprit = int(re.findall(r"\(culprit (\d+)\)", out.stdout)[-1])  # (--also-ranks: the 32-rank run prints first)
    rows = json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith("[")))
    assert [r["pass"] for r in rows] == ["first", "steady 1", "steady 2"]
    assert all(r["snapshots"] == 64 and r["bytes"] > 0 for r in rows), rows  # every pod read, every pass
    # the decoders a pass started (a new interpreter each): the first pass starts the pool's, the later none here
    assert rows[0]["decoders_started"] >= 1 and [r["decoders_started"] for r in rows[1:]] == [0, 0], rows
    assert "started)" in out.stdout.split("64 ranks x")[1].split("\n  steady")[0]
    due, named = map(int, re.findall(r"first shows on pass (\d+); the culprit is named on pass (\d+)", out.stdout)[-1])
    assert named == due, out.stdout
    assert rows[named]["root_causes"] == [f"missing_rank [{culprit}]"], rows
    # --parts: each part of the analysis timed where the analysis calls it (a wrapper it went around reads 0),
    # the engine's parts within the engine's time
    for r in rows:
        parts = r["parts"]
        assert all(v > 0 for v in parts.values()), r
        inside = sum(v for k, v in parts.items() if k not in ("follow", "engine", "statuses"))
        assert inside <= parts["engine"] + 2e-4 and parts["engine"] + parts["follow"] <= r["analysis_s"] + 0.01, r
    # the view's own memory, measured in a process that holds none of the pods' data
    before, peak = map(int, re.findall(r"the pods are another\): (\d+) MB before its first pass, its peak (\d+) MB",
                                       out.stdout)[-1])
    assert 0 < before < peak, out.stdout
    # the machine's own speed beside each pass, and the growth from 32 ranks also at equal machine speed
    assert all(r["yardstick_s"] > 0 for r in rows), rows
    grown = re.search(r"wall +([\d.]+) s -> +([\d.]+) s: ([\d.]+)x \(([\d.]+)x at equal yardstick\)", out.stdout)
    machine = re.search(r"yardstick +([\d.]+) s -> +([\d.]+) s: the machine ([\d.]+)x as slow", out.stdout)
    assert grown and machine, out.stdout
    small, big = (float(x) for x in machine.groups()[:2])
    assert float(machine.group(3)) == pytest.approx(big / small, abs=0.01)
    assert float(grown.group(4)) == pytest.approx(float(grown.group(3)) / (big / small), rel=0.02, abs=0.01)
