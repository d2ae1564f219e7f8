"""What an on-demand profile costs the profiled rank: its step time before, during and after one.

    python benchmarks/bench_profile.py [--ranks 2] [--duration 5] [--baseline 15] [--rounds 2] [--step-ms 0]
    TORCH_BIN=.torch/2.15.0/bin python benchmarks/bench_profile.py     # another torch build

A real gloo job (torchrun under frexport-launch, tests/jobs/train_loader.py: a DataLoader batch, a few
matmuls and an all_reduce per step) logs every step's time on every rank. After `--baseline` seconds
rank 0 is asked for `frexport_profile?duration_s=D` (what the sidecar asks on a straggler and
`frexport profile` on request); the request's start and end are noted, and the step times are split
into before, during the request (the profiler's set-up on the handler's thread, then D seconds of
profiling on the training thread, then the export) and after. Printed: median and worst step of each
part, and the request's length. The agent's interval is lifted for the rounds
(FREXPORT_AGENT_PROFILE_INTERVAL=0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]

from frexport.decode.profile_trace import read_trace  # noqa: E402
from frexport.sources.http_client import Target, request  # noqa: E402
from tests.support.proctree import kill_tree  # noqa: E402


def _steps(path: Path) -> list[tuple[float, float]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((float(parts[0]), float(parts[1])))
    return out


def _part(steps, lo, hi) -> str:
    xs = [d for end, d in steps if lo <= end - d and end <= hi]
    if not xs:
        return "no step"
    return f"{len(xs):4d} steps, median {statistics.median(xs) * 1e3:7.1f} ms, worst {max(xs) * 1e3:7.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--baseline", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=0.0, help="each step also sleeps this long (default 0)")
    args = ap.parse_args()
    bin_dir = Path(os.environ.get("TORCH_BIN") or Path(sys.executable).parent)
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    shared = tmp / "shared"
    env = dict(os.environ, OMP_NUM_THREADS="1", MARK_DIR=str(tmp), STEP_LOG=str(tmp / "steps"),
               FREXPORT_AGENT_PROFILE_INTERVAL="0", PYTHONPATH=str(ROOT),
               STEP_S=str(args.step_ms / 1000))
    cmd = [str(Path(sys.executable).parent / "frexport-launch"), "--dir", str(shared), "--",
           str(bin_dir / "torchrun"), "--standalone", f"--nproc-per-node={args.ranks}",
           str(ROOT / "tests" / "jobs" / "train_loader.py")]
    job = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=open(tmp / "job.log", "wb"),
                           stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp / "started_0").exists():
            if time.monotonic() > deadline or job.poll() is not None:
                print((tmp / "job.log").read_text()[-3000:])
                return 1
            time.sleep(0.2)
        sock = Target(unix_path=str(shared / "rank-0.sock"))
        marks = []
        for _ in range(args.rounds):
            time.sleep(args.baseline)
            t0 = time.time()
            resp = request(sock, "POST", f"/handler/frexport_profile?duration_s={args.duration:g}", timeout=120,
                           max_body=64 << 20)
            t1 = time.time()
            events = len(read_trace(resp.body).events) if resp.status == 200 else 0
            marks.append((t0, t1, resp.status, len(resp.body), events))
        time.sleep(args.baseline)
        steps = _steps(Path(f"{tmp / 'steps'}.0"))
        torch_version = (shared / "rank-0.json").read_text().split('"torch_version": "')[1].split('"')[0]
        print(f"torch {torch_version}, {args.ranks} ranks, profile of {args.duration:g} s on rank 0; "
              f"load average {os.getloadavg()[0]:.1f}")
        prev = steps[0][0]
        for i, (t0, t1, status, size, events) in enumerate(marks, 1):
            print(f"round {i}: request {t1 - t0:.1f} s (status {status}, {size / 1024:.0f} KiB gzip'd, "
                  f"{events} host events)")
            print(f"  before:  {_part(steps, prev, t0)}")
            print(f"  during:  {_part(steps, t0, t1)}")
            prev = t1
        print(f"  after:   {_part(steps, prev, steps[-1][0] + 1)}")
        return 0
    finally:
        kill_tree(job.pid)
        job.wait(30)


if __name__ == "__main__":
    sys.exit(main())
