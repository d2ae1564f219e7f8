"""The sidecar's cost per entry on a real busy job, against no watching, in one run (issue 39, point 3).

    python benchmarks/bench_busy_job.py [--ranks 2] [--interval-ms 2] [--seconds 30] [--rounds 3]

A real torch gloo job (torchrun under frexport-launch, the agent enabled, 2000-entry ring buffers:
benchmarks/busy_job.py) issues a small all_reduce every `--interval-ms` per rank. Interleaved rounds,
each measuring `--seconds` of the running job:
  (a) not watched;
  (b) watched by a real `frexport serve` (a separate process, default configuration, poll interval 5 s,
      through the agent's sockets), started for the round while the job is paused (its first whole
      reads are not measured) and stopped after it.
`--entries-via pytorch` runs the sidecar with PyTorch's C++ handler for the entries (no GIL) instead
of the agent's cut pickle. Printed, medians over the rounds: the job's real rate (collectives a second
a rank); the training loop's longest stall (a step late beyond one interval, the most of any rank and
round: what a pause of the trainer's Python costs it); the sidecar's CPU
(% of one core, its decoder processes included) and its CPU per entry recorded (µs, all in: reads,
status reads, decode, counting, analysis, the loop); the trainer's CPU per rank watched and not
watched (% of one core: all its threads; and its worker-server threads alone, where the polls are
served); and in every watched round the entries the sidecar counted (`frexport_collectives_total`)
against those the ranks recorded (their own count), and the ring-buffer entries it reports missed. A last
round watches the job paused: the sidecar's fixed part (status reads, its loop), and its CPU per entry
beyond it. Then (`--fixed-ranks`, 8 by default) a job of that many ranks runs until its buffers are full
and is watched paused: the fixed part at that size. Two cores cannot run 8 ranks at 500 collectives a
second (gloo's waits spin: 8 ranks reached ~50 a second each), so 8 ranks at that rate is printed as
that fixed part plus 4000 times the 2 ranks' cost an entry beyond theirs, each part measured.

`--spans RATIO` turns the watched sidecars' OpenTelemetry spans on, sampled at RATIO (OTEL_TRACES_SAMPLER
traceidratio; 1: every span), sent over OTLP/gRPC to a real receiver in this process: the rounds then
print the spans it received and those the sidecar left out.

The sidecar's CPU is its threads' schedstat (ns; the decoder processes' too): the clock ticks of
/proc/<pid>/stat (printed beside it) are sampled at 100 Hz, 8 or so in a 30 s window of a paused sidecar.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
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
from bench_status_first import sidecar_reads as reads  # noqa: E402
from bench_status_first import thread_cpu_s  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.support.otlp_receiver import GrpcReceiver  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.proctree import descendants, kill_tree  # noqa: E402

BUFFER = 2000


def metrics(port: int) -> dict[str, float]:
    """The sidecar's counted entries (every outcome, rank and group) and the entries it says wrapped
    away unseen."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"counted": 0.0, "missed": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "frexport_collectives_total":
                out["counted"] += s.value
            elif s.name == "frexport_ring_buffer_dropped_entries_total":
                out["missed"] += s.value
            elif s.name == "frexport_otlp_spans_total":  # (spans on: --spans)
                out["spans_" + s.labels["result"]] = s.value
            elif s.name == "frexport_otlp_queue_spans":
                out["queued"] = s.value
    return out


class Job:
    """The busy job, paused and resumed through its pause file."""

    def __init__(self, ranks: int, interval_ms: float, work: Path, python: str = sys.executable) -> None:
        self.ranks, self.work = ranks, work
        self.shared, self.pause_file = work / "shared", work / "pause"
        self.generation = 0
        self.counts: list[int] = []  # each rank's collectives at the last pause
        self.stalled_ms: list[float] = []  # each rank's longest stall since the pause before
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_FR_BUFFER_SIZE=str(BUFFER), MARK_DIR=str(work),
                   PAUSE_FILE=str(self.pause_file), INTERVAL_S=str(interval_ms / 1000),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        bin_dir = Path(python).parent  # (another torch build: its environment's python and torchrun)
        self.proc = subprocess.Popen(
            [python, "-m", "frexport.agent.launch", "--dir", str(self.shared), "--", str(bin_dir / "torchrun"),
             "--standalone", f"--nproc-per-node={ranks}", str(HERE / "busy_job.py")],
            env=env, start_new_session=True, stdout=open(work / "job.log", "wb"), stderr=subprocess.STDOUT)

    def rank_pids(self) -> list[int]:
        """The rank processes: torchrun's children running busy_job.py (not their log tees)."""
        out = []
        for pid in descendants(self.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"busy_job.py") for a in args) and not any(b"torchrun" in a for a in args):
                out.append(pid)
        return sorted(out)

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((self.shared / f"rank-{r}.sock").exists() for r in range(self.ranks)) \
                    and len(self.rank_pids()) == self.ranks:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the job did not start:\n{(self.work / 'job.log').read_text()[-3000:]}")

    def pause(self, timeout: float = 60.0) -> list[int]:
        """Pause every rank; returns each rank's count of collectives issued."""
        self.generation += 1
        tmp = self.work / ".pause"
        tmp.write_text(str(self.generation))
        os.replace(tmp, self.pause_file)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            marks = [self._mark(r) for r in range(self.ranks)]
            if all(m is not None for m in marks):
                self.counts = [m[0] for m in marks]  # type: ignore[index]
                self.stalled_ms = [m[1] for m in marks]  # type: ignore[index]
                return self.counts
            time.sleep(0.05)
        raise RuntimeError("the job did not pause")

    def _mark(self, rank: int) -> tuple[int, float] | None:
        try:
            gen, count, stalled = (self.work / f"count_{rank}").read_text().split()
        except (OSError, ValueError):
            return None
        return (int(count), float(stalled)) if int(gen) == self.generation else None

    def resume(self) -> None:
        self.pause_file.unlink()

    def kill(self) -> None:
        kill_tree(self.proc.pid)  # children collected first, then every pid killed
        self.proc.wait(30)


def tree_threads_ns(pid: int) -> dict[tuple[int, int], int]:
    """Each thread's CPU (ns, schedstat) in a process and its live descendants (the sidecar's decoders).
    The clock ticks of /proc/<pid>/stat are sampled at 100 Hz: 0.27 % of a core over 30 s is 8 of
    them, too few to tell a sidecar's fixed part (~0.15 %) from the rest of its cost."""
    out: dict[tuple[int, int], int] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/schedstat") as f:
                    out[(p, int(task))] = int(f.read().split()[0])
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError, IndexError):
                continue
    return out


def cpu_between(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> tuple[float, int]:
    """CPU seconds the threads used between two `tree_threads_ns`, and how many threads ended between them
    (their time since `before` is not in it: the figure is then a floor)."""
    used = sum(ns - before.get(key, 0) for key, ns in after.items())
    return used / 1e9, len(before.keys() - after.keys())


def measure(job: Job, seconds: float) -> dict:
    """Resume the paused job, measure `seconds` of it, pause it again."""
    pids = job.rank_pids()
    before = job.counts
    job.resume()
    all0 = {p: thread_cpu_s(p) for p in pids}
    serve0 = {p: thread_cpu_s(p, "pt_workerserver") for p in pids}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    trainer = sum(thread_cpu_s(p) - all0[p] for p in pids) / len(pids) / wall
    serving = sum(thread_cpu_s(p, "pt_workerserver") - serve0[p] for p in pids) / len(pids) / wall
    after = job.pause()
    recorded = sum(a - b for a, b in zip(after, before))
    return {"wall": wall, "trainer": trainer, "serving": serving, "recorded": recorded, "counts": after,
            "stalled_ms": max(job.stalled_ms)}


def paused_window(job: Job, seconds: float) -> dict:
    """`seconds` of the job paused (nothing recorded): what a watching sidecar costs without entries."""
    time.sleep(seconds)
    return {"wall": seconds, "trainer": 0.0, "serving": 0.0, "recorded": 0, "counts": job.counts,
            "stalled_ms": 0.0}


def watched_round(job: Job, seconds: float, profile: str | None = None, entries_via: str = "agent",
                  paused: bool = False, spans: tuple[float, str] | None = None) -> dict:
    """A fresh `frexport serve` reads the paused job, then watches `seconds` of it running (`paused`: of
    it still paused, its fixed part). `spans`: (sampling ratio, the OTLP receiver's endpoint)."""
    start_counts = job.counts
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":"))
    if spans is not None:
        env.update(FREXPORT_TRACES__ENABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT=spans[1],
                   OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_EXPORTER_OTLP_INSECURE="true",
                   OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG=str(spans[0]))
    log = open(job.work / f"sidecar-{job.generation}.log", "wb")
    sidecar = subprocess.Popen([sys.executable, "-m", "frexport", "serve", "--listen", f"127.0.0.1:{port}",
                                "--sockets-dir", str(job.shared), "--poll-interval", "5s",
                                "--entries-via", entries_via],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # its first whole reads: every finished entry in the buffers is counted once
        first = sum(min(c, BUFFER) for c in start_counts)
        seen = _wait_count(port, first, 60.0)
        deadline = time.monotonic() + 60
        while spans is not None and seen.get("queued") != 0 and time.monotonic() < deadline:
            time.sleep(0.5)  # and their spans sent: the window holds no span of the first reads
            seen = metrics(port)
        spy = None
        if profile:  # py-spy's samples of the measured window (raw: folded stacks, counts)
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
                                    "--subprocesses", "-f", "raw", "-r", "200", "-d", str(int(seconds)),
                                    "-o", f"{profile}.{job.generation}.txt", "-p", str(sidecar.pid)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c0, t0 = tree_cpu_seconds(sidecar.pid), tree_threads_ns(sidecar.pid)
        m = paused_window(job, seconds) if paused else measure(job, seconds)
        used, m["threads_ended"] = cpu_between(t0, tree_threads_ns(sidecar.pid))
        m["sidecar"] = used / m["wall"]
        m["sidecar_ticks"] = (tree_cpu_seconds(sidecar.pid) - c0) / m["wall"]  # the coarse clock, a check
        # the paused job's last entries are read when due (a group moved, then 10 s): all counted?
        expected = first + sum(a - b for a, b in zip(m["counts"], start_counts))
        _wait_count(port, expected, 40.0)
        time.sleep(6)  # one more status read and poll: nothing counted twice
        seen = metrics(port)
        m["reads"] = reads(port)
        if spy is not None:
            spy.wait(30)
        m.update(expected=expected, counted=seen["counted"], missed=seen["missed"],
                 spans={k[6:]: v for k, v in seen.items() if k.startswith("spans_")})
        return m
    finally:
        sidecar.kill()
        sidecar.wait(10)


def _wait_count(port: int, expected: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    seen: dict = {}
    while time.monotonic() < deadline:
        try:
            seen = metrics(port)
        except OSError:
            seen = {}
        if seen.get("counted", -1) >= expected:
            return seen
        time.sleep(0.5)
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--interval-ms", type=float, default=2.0, help="a collective every this many ms per rank")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", help="py-spy the sidecar's measured windows into PROFILE.<n>.txt (raw)")
    ap.add_argument("--warm", type=float, default=10.0, help="running before the first round (buffers fill)")
    ap.add_argument("--entries-via", choices=("agent", "pytorch"), default="agent",
                    help="the sidecar's `--entries-via`: whose handler serves the entries")
    ap.add_argument("--spans", type=float, metavar="RATIO",
                    help="the watched sidecars send spans, sampled at RATIO, to a real OTLP receiver here")
    ap.add_argument("--fixed-ranks", type=int, default=8,
                    help="then a job of this many ranks, buffers full, watched paused: the fixed part at that "
                         "size (0: not run; 2 cores cannot run 8 ranks at 500 a second, so 8 ranks at that rate "
                         "is this fixed part plus the 2 ranks' cost an entry beyond theirs)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frx-busy-"))
    # stopped by `timeout` or kill: the finally below still kills the job (its ranks spin on gloo)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    job = Job(args.ranks, args.interval_ms, work)
    plain: list[dict] = []
    watched: list[dict] = []
    receiver = GrpcReceiver().__enter__() if args.spans is not None else None
    spans = (args.spans, receiver.endpoint) if receiver is not None else None
    try:
        job.wait_ready()
        time.sleep(max(args.warm, BUFFER * args.interval_ms / 1000 * 1.5))
        job.pause()
        for i in range(args.rounds):
            plain.append(measure(job, args.seconds))
            received = len(receiver.received.spans) if receiver is not None else 0
            watched.append(watched_round(job, args.seconds, args.profile, args.entries_via, spans=spans))
            sent = "" if receiver is None else (
                f"; spans received {len(receiver.received.spans) - received}, the sidecar's "
                + ", ".join(f"{k} {v:.0f}" for k, v in sorted(watched[-1]["spans"].items())))
            print(f"round {i + 1}: not watched: trainer {plain[-1]['trainer'] * 100:.2f} %/rank; watched: trainer "
                  f"{watched[-1]['trainer'] * 100:.2f} %/rank, sidecar {watched[-1]['sidecar'] * 100:.2f} %, "
                  f"counted {watched[-1]['counted']:.0f} of {watched[-1]['expected']}, missed "
                  f"{watched[-1]['missed']:.0f}{sent}", flush=True)
        # the sidecar's fixed part: watching the same ranks with nothing recorded
        idle = watched_round(job, args.seconds, None, args.entries_via, paused=True, spans=spans)
    finally:
        job.kill()
        if receiver is not None:
            receiver.__exit__()
    wide = fixed_part(args, work / "wide") if args.fixed_ranks else None
    report(args, plain, watched, idle, wide)
    return 0


def fixed_part(args: argparse.Namespace, work: Path) -> dict:
    """A job of `--fixed-ranks` ranks, run until every buffer is full, watched paused."""
    work.mkdir()
    job = Job(args.fixed_ranks, args.interval_ms, work)
    try:
        job.wait_ready()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(5)
            if min(job.pause()) > BUFFER:
                break
            job.resume()
        return watched_round(job, args.seconds, None, args.entries_via, paused=True)
    finally:
        job.kill()


def report(args: argparse.Namespace, plain: list[dict], watched: list[dict], idle_round: dict,
           wide: dict | None) -> None:
    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    rate = statistics.median(r["recorded"] / r["wall"] / args.ranks for r in plain + watched)
    side = med(watched, "sidecar")
    per_entry = statistics.median(r["sidecar"] * r["wall"] / r["recorded"] * 1e6 for r in watched)
    extra = med(watched, "trainer") - med(plain, "trainer")
    # per collective: the rounds' rates differ (a crowded machine), and a rank's CPU follows its rate
    per_op = {name: statistics.median(r["trainer"] * r["wall"] * args.ranks / r["recorded"] * 1e6 for r in rows)
              for name, rows in (("plain", plain), ("watched", watched))}
    print(f"\n{args.ranks} ranks, entries via {args.entries_via}, a collective every {args.interval_ms:g} ms"
          f"{'' if args.spans is None else f', spans sampled at {args.spans:g}'}: "
          f"{rate:.0f} a second a rank achieved, "
          f"{BUFFER}-entry buffers, {args.seconds:g} s x {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    print(f"sidecar:  {side * 100:.2f} % of one core ({side * 100 / args.ranks:.3f} % per rank), "
          f"{per_entry:.2f} µs per entry recorded, all in")
    ticks = med(watched, "sidecar_ticks")
    print(f"          (the same windows by the clock ticks of /proc/<pid>/stat: {ticks * 100:.2f} %; "
          f"threads that ended in a window, their CPU not counted: "
          f"{sum(r['threads_ended'] for r in watched + [idle_round])})")
    idle = idle_round["sidecar"]
    beyond = (side - idle) / (rate * args.ranks) * 1e6  # µs an entry, the fixed part left out
    print(f"          fixed part (the same ranks watched, paused: nothing recorded): {idle * 100:.3f} % of one core; "
          f"beyond it {beyond:.2f} µs an entry")
    at_8 = beyond * 4000 / 1e4  # % of a core: 8 ranks x 500 a second, beyond the fixed part
    if wide is None:
        print(f"          at 8 ranks x 500 a second (4000 entries a second): {at_8:.2f} % of one core plus "
              f"the fixed part of 8 ranks (target 1 % all in: 2.5 µs an entry)")
    else:
        n = args.fixed_ranks
        total = wide["sidecar"] * 100 + at_8 * n / 8
        print(f"          fixed part of {n} ranks (their buffers full, paused): {wide['sidecar'] * 100:.3f} % "
              "of one core")
        print(f"          at {n} ranks x 500 a second ({n * 500} entries a second): {wide['sidecar'] * 100:.3f} + "
              f"{at_8 * n / 8:.3f} = {total:.2f} % of one core, {total * 1e4 / (n * 500):.2f} µs an entry all in "
              f"(target at 8 ranks: 1 %, 2.5 µs an entry)")
    print(f"trainer:  {med(plain, 'trainer') * 100:.2f} % of a core per rank not watched, "
          f"{med(watched, 'trainer') * 100:.2f} % watched ({extra * 100:+.2f} %; target at most +0.5 %); "
          f"serving polls: {med(watched, 'serving') * 100:.3f} % per rank (not watched "
          f"{med(plain, 'serving') * 100:.3f} %)")
    print(f"          the training loop's longest stall (a step started late beyond one interval): "
          f"{max(r['stalled_ms'] for r in plain):.1f} ms not watched, "
          f"{max(r['stalled_ms'] for r in watched):.1f} ms watched (entries via {args.entries_via})")
    more = per_op["watched"] - per_op["plain"]
    print(f"          per collective: {per_op['plain']:.1f} µs not watched, {per_op['watched']:.1f} µs watched "
          f"({more:+.1f} µs = {more * 500 / 1e4:+.2f} % "
          f"of a core a rank at 500 a second); serving polls at 500 a second: "
          f"{med(watched, 'serving') * 100 * 500 / rate:.2f} % a rank")
    for i, r in enumerate(watched):
        bad = r["counted"] != r["expected"] or r["missed"]
        print(f"round {i + 1}: entries counted {r['counted']:.0f}, recorded {r['expected']} "
              f"({r['counted'] - r['expected']:+.0f}), missed (ring wrapped unseen) {r['missed']:.0f}"
              f"{'  <-- WRONG' if bad else ''}; reads since the sidecar started: "
              + ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["reads"].items()) if v))


if __name__ == "__main__":
    sys.exit(main())
