"""What one read of the Flight Recorder costs a busy trainer, by kind of read and torch build (issue 39).

    python benchmarks/bench_serving_cost.py [--python PATH ...] [--seconds 10]

For each torch build (`--python`: an environment's interpreter, repeatable; default this one), the busy
job of bench_busy_job.py (2 ranks under the agent, a small all_reduce every 2 ms: 500 collectives a
second a rank, 2000-entry ring buffers) runs while this process reads every rank through its worker
server at a fixed rate, one kind of read per window: none, the status (`frexport_fr_status`), and the
entries from a cursor on (`frexport_fr_live?format=pickle&after=`, the agent's cut of PyTorch's pickle
dump, as the sidecar reads them). Printed: the CPU of the ranks' worker-server threads
(`pt_workerserver`) per read and as % of a core a rank.

Why it matters: PyTorch dumps the whole ring buffer at every entries read, so the trainer's cost per
entry is the dump's cost per buffered entry times how much of the buffer each read covers again. At
500 collectives a second that is at least 500 x (a read's cost / 2000) a second even if each read took
a full buffer of new entries, which a reader cannot do safely; the sidecar reads at half a buffer.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_busy_job import BUFFER, Job  # noqa: E402
from bench_status_first import thread_cpu_s  # noqa: E402

from frexport.decode.read import decode_bytes  # noqa: E402
from frexport.sources.http_client import Target, request  # noqa: E402

RATE = 500.0  # the busy job's collectives a second a rank (a 2 ms interval)
SERVER = "pt_workerserver"  # PyTorch's worker-server threads: where every read is served


def serving_ms(job: Job, read: Callable[[Target], None], per_s: float, seconds: float) -> tuple[float, float]:
    """(ms of the server threads a read, % of a core a rank) with the job running and `read` called on
    every rank `per_s` times a second."""
    targets = [Target(unix_path=str(job.shared / f"rank-{r}.sock")) for r in range(job.ranks)]
    pids = job.rank_pids()
    job.resume()
    time.sleep(2.0)  # the buffers full again, the loop at its pace
    before = {p: thread_cpu_s(p, SERVER) for p in pids}
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for t in targets:
            read(t)
        n += 1
        time.sleep(max(0.0, start + n / per_s - time.monotonic()))
    wall = time.monotonic() - start
    cpu = sum(thread_cpu_s(p, SERVER) - before[p] for p in pids) / len(pids)
    job.pause()
    return cpu / max(n, 1) * 1000, cpu / wall * 100


class Cursor:
    """Reads each rank's entries from the record after the last one it got, as the sidecar does."""

    def __init__(self) -> None:
        self.after: dict[str, int] = {}

    def __call__(self, t: Target) -> None:
        key = str(t.unix_path)
        resp = request(t, "POST", f"/handler/frexport_fr_live?format=pickle&after={self.after.get(key, 0)}",
                       max_body=64 << 20)
        entries = decode_bytes(resp.body, key).entries  # (frexport's own decoder: plain data only)
        if entries:
            self.after[key] = entries[-1].record_id + 1


def one_build(python: str, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="frx-serving-") as tmp:
        job = Job(2, 1000.0 / RATE, Path(tmp), python=python)
        try:
            job.wait_ready()
            job.pause()
            idle_ms, idle_pct = serving_ms(job, lambda t: None, 1.0, seconds)
            status_ms, status_pct = serving_ms(job, lambda t: request(t, "POST", "/handler/frexport_fr_status"),
                                               4.0, seconds)
            entries_ms, entries_pct = serving_ms(job, Cursor(), 0.5, seconds)
        finally:
            job.kill()
    floor = RATE * entries_ms / BUFFER / 10  # % of a core: every read a whole buffer of new entries
    print(f"torch {_torch_version(python)} ({python})")
    print(f"  no reads:       {idle_pct:6.3f} % a rank")
    print(f"  status reads:   {status_ms:6.2f} ms a read  ({status_pct:.3f} % a rank at 4 a second)")
    print(f"  entries reads:  {entries_ms:6.2f} ms a read  ({entries_pct:.3f} % a rank at 0.5 a second: every "
          f"{BUFFER // 2} entries at {RATE:.0f} a second, the sidecar's pace)")
    print(f"  at {RATE:.0f} collectives a second: {floor:.2f} % a rank if every read took {BUFFER} new entries, "
          f"{2 * floor:.2f} % at half a buffer")


def _torch_version(python: str) -> str:
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append", default=[], help="a torch environment's interpreter (repeatable)")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    for python in args.python or [sys.executable]:
        one_build(python, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
