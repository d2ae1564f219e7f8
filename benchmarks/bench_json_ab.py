"""`frexport analyze --format json` of one JSON dump directory with two checkouts and the 2-process
`json.loads` floor, in one run, interleaved, best of N (issue 26's no-regression check).

    python benchmarks/bench_json_ab.py DIR [DIR ...] --base /path/to/older/checkout [--reps 3]

Each repetition runs, in a rotating order, `python -m frexport analyze DIR --format json` with
PYTHONPATH at this checkout ("new") and at --base ("base"), and bench_analyze.py's floor (json.loads of
every file in 2 forked processes). Wall and CPU (user + system of the process and every descendant it
waited for, from wait4) per run; the best of the repetitions, and each one's ratio to the floor. The
first repetition also checks that both checkouts print the same report.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_analyze  # noqa: E402


def run(cmd: list[str], env: dict, cwd: str) -> tuple[float, float, bytes]:
    t0 = time.perf_counter()
    # in the checkout: `python -m` puts the working directory first on sys.path, before PYTHONPATH
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""  # (small: a traceback at most)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1) or b"Traceback" in err:  # 1: a finding (the verdict)
        raise SystemExit(f"{cmd} failed: status {status}: {err[-2000:]!r}")
    return wall, ru.ru_utime + ru.ru_stime, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--base", required=True)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    trees = {"new": str(HERE.parent), "base": args.base}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for d in args.dirs:
        d = str(Path(d).resolve())
        cmds = {kind: ([sys.executable, "-m", "frexport", "analyze", d, "--format", "json"],
                       {**os.environ, "PYTHONPATH": tree}, tree) for kind, tree in trees.items()}
        cmds["json.loads 2p"] = ([sys.executable, "-c", bench_analyze._LOADS_ONLY, d, bench_analyze.PREFIX, "2",
                                  "json"], dict(os.environ), str(HERE.parent))
        best: dict[str, tuple[float, float]] = {}
        order = list(cmds)
        for rep in range(args.reps):
            outs = {}
            for kind in order[rep % len(order):] + order[:rep % len(order)]:
                wall, cpu, outs[kind] = run(*cmds[kind])
                w, c = best.get(kind, (wall, cpu))
                best[kind] = (min(w, wall), min(c, cpu))
                print(f"  {Path(d).name} rep {rep} {kind}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
            if rep == 0 and outs["new"] != outs["base"]:
                print(f"  {Path(d).name}: the two checkouts' reports DIFFER", flush=True)
        fw, fc = best["json.loads 2p"]
        print(f"{Path(d).name}, best of {args.reps}:")
        for kind, (w, c) in best.items():
            print(f"  {kind:14s} {w:7.2f} s wall {c:7.2f} s CPU   {w / fw:5.2f}x wall {c / fc:5.2f}x CPU of the floor")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
