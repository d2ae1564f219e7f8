"""The job view's scale benchmark (benchmarks/bench_jobview.py) still measures what it says, on a small
job: the view reads every pod (in a process of their own) each pass and names the culprit on the pass
it is due. Its figures at 4096 and 16384 ranks are in benchmarks/README.md; this keeps the harness
behind them from breaking silently as the source it drives changes."""

import json
import re
import subprocess
import sys

from tests.support import paths


def test_the_scale_benchmark_names_the_culprit_on_its_pass_with_the_pods_apart():
    out = subprocess.run([sys.executable, str(paths.BENCHMARKS / "bench_jobview.py"), "--ranks", "64",
                          "--pods", "8", "--passes", "2", "--parts"], capture_output=True, text=True, timeout=300,
                         cwd=paths.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    culprit = int(re.search(r"\(culprit (\d+)\)", out.stdout).group(1))
    rows = json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith("[")))
    assert [r["pass"] for r in rows] == ["first", "steady 1", "steady 2"]
    assert all(r["snapshots"] == 64 and r["bytes"] > 0 for r in rows), rows  # every pod read, every pass
    # the decoders a pass started (a new interpreter each): the first pass starts the pool's, the later none here
    assert rows[0]["decoders_started"] >= 1 and [r["decoders_started"] for r in rows[1:]] == [0, 0], rows
    assert "started)" in out.stdout.split("\n  steady")[0]
    due, named = map(int, re.search(r"first shows on pass (\d+); the culprit is named on pass (\d+)",
                                    out.stdout).groups())
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
    before, peak = map(int, re.search(r"the pods are another\): (\d+) MB before its first pass, its peak (\d+) MB",
                                      out.stdout).groups())
    assert 0 < before < peak, out.stdout
