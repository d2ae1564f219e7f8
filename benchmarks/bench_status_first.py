"""Live cost, status first vs polling every entry: a real busy torch job, in one run.

    python benchmarks/bench_status_first.py [--ranks 8] [--seconds 40] [--step-ms 5] [--stall-after 5]
                                            [--warm 40] [--analysis-interval 0.5s]

A real gloo job (torchrun under frexport-launch, `--ranks` ranks, a collective every `--step-ms`, a
2000-entry ring buffer) is run three times: alone, with `frexport serve` polling it the way it did
before status first (the agent's tail every 5 s: `status_first: false`), and with status first (its
status every second, entries only when needed). Each run measures, over `--seconds`:
- the trainer's cost of being polled: the CPU of every rank's worker-server threads
  (`pt_workerserver`, where PyTorch runs the handlers and their dumps), in % of one core per rank;
  and the whole job's CPU, for context (on a 2-core machine 8 busy ranks saturate it, so this one
  mostly shows noise);
- the sidecar's CPU (with its decoder processes), in % of one core;
- then rank 2 hangs in its data loader, and the time until /metrics names it `stalled`, minus the
  stall threshold: the detection latency.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from bench_sidecar import tree_cpu_seconds  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.support.ports import free_port  # noqa: E402
from tests.support.proctree import kill_tree  # noqa: E402

BIN = Path(sys.executable).parent


def thread_cpu_s(pid: int, name: str | None = None) -> float:
    """CPU seconds of a process's threads named `name` (all threads: None), from schedstat (ns: the
    clock-tick counts of /proc/<pid>/task/*/stat round each of a rank's nine server threads to 10 ms,
    as much as a whole poll costs)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            if name is not None:
                with open(f"/proc/{pid}/task/{task}/comm") as f:
                    if f.read().strip() != name:
                        continue
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def _ranks(job: subprocess.Popen) -> list[int]:
    """The rank processes of a torchrun job (python processes whose command runs train.py)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in out.splitlines()
            if "tests/jobs/train.py" in line and "torchrun" not in line and "frexport-launch" not in line]


def _statuses(port: int) -> dict[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {int(s.labels["rank"]): s.labels["status"] for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "frexport_rank_status" and s.value == 1.0}


def sidecar_reads(port: int) -> dict[str, float]:
    """The sidecar's read counters: status reads, and entries reads by reason."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "frexport_status_reads_total":
                out["status"] = s.value
            elif s.name == "frexport_entries_reads_total":
                out[s.labels["reason"]] = s.value
    return out


def run(design: str, ranks: int, seconds: float, step_ms: float, stall_after: float, warm: float,
        analysis_interval: str | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"frx-bench-{design}-"))
    shared = work / "shared"
    stuck_file = work / "now"
    env = dict(os.environ, OMP_NUM_THREADS="1", STEPS="100000000", STEP_S=str(step_ms / 1000), STUCK_RANK="2",
               STUCK_FILE=str(stuck_file), MARK_DIR=str(work), TORCH_FR_BUFFER_SIZE="2000")
    job = subprocess.Popen([str(BIN / "frexport-launch"), "--dir", str(shared), "--", str(BIN / "torchrun"),
                            "--standalone", f"--nproc-per-node={ranks}", str(ROOT / "tests/jobs/train.py")],
                           env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sidecar = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all((shared / f"rank-{r}.sock").exists() for r in range(ranks)):
            time.sleep(0.5)
        port = free_port()
        if design != "alone":
            senv = dict(os.environ,
                        FREXPORT_SOURCES__WORKER_SERVERS__STATUS_FIRST="true" if design == "status first" else "false")
            if analysis_interval:
                senv["FREXPORT_ANALYSIS__INTERVAL"] = analysis_interval
            sidecar = subprocess.Popen([sys.executable, "-m", "frexport", "serve", "--listen", f"127.0.0.1:{port}",
                                        "--sockets-dir", str(shared), "--stall-after", f"{stall_after}s"],
                                       env=senv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(warm)  # the ring buffers fill; the sidecar's first whole reads are behind us
        pids = _ranks(job)
        serve0 = {p: thread_cpu_s(p, "pt_workerserver") for p in pids}
        all0 = {p: thread_cpu_s(p) for p in pids}
        side0 = tree_cpu_seconds(sidecar.pid) if sidecar else 0.0
        reads0 = sidecar_reads(port) if sidecar else {}
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        reads = {k: v - reads0.get(k, 0.0) for k, v in sidecar_reads(port).items()} if sidecar else {}
        serving = sum(thread_cpu_s(p, "pt_workerserver") - serve0[p] for p in pids) / len(pids) / wall
        whole = sum(thread_cpu_s(p) - all0[p] for p in pids) / wall
        side = (tree_cpu_seconds(sidecar.pid) - side0) / wall if sidecar else 0.0
        latency = None
        if sidecar:
            stuck_file.write_text("now")
            mark = work / "stuck"
            while not mark.exists() and time.monotonic() - t0 < seconds + 60:
                time.sleep(0.02)
            stuck_at = float(mark.read_text())
            while time.time() - stuck_at < stall_after + 60:
                if _statuses(port).get(2) == "stalled":
                    latency = time.time() - stuck_at - stall_after
                    break
                time.sleep(0.05)
        return {"design": design, "ranks": len(pids), "serving_pct_per_rank": 100 * serving,
                "job_cores": whole, "sidecar_pct": 100 * side, "latency_s": latency, "reads": reads}
    finally:
        if sidecar is not None:
            sidecar.kill()
            sidecar.wait(10)
        kill_tree(job.pid)
        job.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--stall-after", type=float, default=5.0)
    ap.add_argument("--warm", type=float, default=40.0, help="seconds before measuring (the buffers fill)")
    ap.add_argument("--analysis-interval", help="the sidecar's analysis interval (default: its own, 5 s)")
    args = ap.parse_args()
    rows = [run(d, args.ranks, args.seconds, args.step_ms, args.stall_after, args.warm, args.analysis_interval)
            for d in ("alone", "poll everything", "status first")]
    print(f"{args.ranks} ranks, a collective every {args.step_ms:g} ms, 2000-entry buffers, {args.seconds:g} s "
          f"measured after {args.warm:g} s, stall threshold {args.stall_after:g} s, analysis every "
          f"{args.analysis_interval or '5s'}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'design':<16} {'trainer: serving polls':>24} {'job CPU':>9} {'sidecar CPU':>12} {'stall named after':>18}")
    for r in rows:
        lat = "-" if r["latency_s"] is None else f"threshold + {r['latency_s']:.2f} s"
        print(f"{r['design']:<16} {r['serving_pct_per_rank']:>17.3f} %/rank {r['job_cores']:>6.2f} c "
              f"{r['sidecar_pct']:>10.2f} % {lat:>18}")
    for r in rows[1:]:
        reads = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["reads"].items()) if v)
        print(f"  {r['design']}: reads while measured ({args.ranks} ranks): {reads or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
