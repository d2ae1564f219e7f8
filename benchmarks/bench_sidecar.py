"""Benchmarks of the sidecar: what it costs, how fast it reacts.

    python benchmarks/bench_sidecar.py [--seconds 60] [--only scrape,poll,poll-live,traces,latency,agent]

- scrape:  one /metrics scrape built from the live state of 8 ranks x 10 process groups
           (2000-entry snapshots, pending ops, findings); median of 50; series count.
- poll:    `frexport serve` (a separate process) polling 8 ranks every 5 s; each rank is a replay
           worker server (unix socket) whose 2000-entry ring buffer advances by 100 collectives per
           5 s, like a busy job; CPU (% of one core, the sidecar and its decoder processes) and RSS
           of the sidecar over --seconds.
- poll-live: the same, the replay servers also serving frexport.agent's frexport_fr_live (the
           sidecar then asks each rank for the entries from its cursor on).
- traces:  the same with OTLP export on, to a real gRPC receiver: spans/s and sidecar CPU.
- latency: a dump file written into a watched directory -> the rank's snapshot in the state
           (inotify), 20 samples: median and max.
- agent:   frexport.agent inside a real torch gloo trainer with a full 2000-entry buffer: trainer
           CPU per poll (medians of per-thread CPU, interleaved rounds) of /handler/fr_trace_json,
           frexport_fr_pickle and frexport_fr_live (whole, and 100 entries after a cursor), and the
           equivalent share of one core at a 5 s poll interval.
The replay servers stand in for 8 trainers (a 2-core machine cannot run 8 busy ones besides the
sidecar); the agent benchmark measures the trainer side with real torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from tests.support.ports import free_port  # noqa: E402
from tests.support.unix_http import QuietHandler, serve_unix  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process, its live descendants (the sidecar's decoder processes) and its reaped children."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:13 if p != pid else 15]) / CLK
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass
    return total


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- a replay worker server ----------------------------------------------------------------------

def _entry(rid: int, seq: int, pg: tuple, created: int) -> dict:
    return {"collective_seq_id": seq, "input_dtypes": ["BFloat16"], "input_sizes": [[4096, 1024]], "is_p2p": False,
            "op_id": seq, "output_dtypes": ["BFloat16"], "output_sizes": [[4096, 1024]], "p2p_seq_id": 0,
            "pg_id": int(pg[0]), "process_group": list(pg), "profiling_name": "nccl:all_reduce", "record_id": rid,
            "retired": True, "state": "completed", "thread_id": "1", "thread_name": "pt_main_thread",
            "time_created_ns": created, "time_discovered_completed_ns": created + 2_000_000,
            "time_discovered_started_ns": created + 100_000, "timeout_ms": 600000, "duration_ms": 1.5}


class ReplayRank:
    """A rank's recorder that advances by `rate` collectives per second, over `groups` groups.
    `live`: it also serves frexport.agent's frexport_fr_live (the entries from `?after=` on)."""

    def __init__(self, rank: int, path: str, groups: int = 10, entries: int = 2000, rate: float = 20.0,
                 base: int = 5000, live: bool = False) -> None:
        self.rank, self.groups, self.entries, self.rate, self.base = rank, groups, entries, rate, base
        self.start = time.time()
        rank_self = self

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802
                name, _, query = self.path.partition("?")
                after = None
                if name == "/handler/frexport_fr_live" and live:
                    after = int(query.split("after=", 1)[1]) if "after=" in query else -1
                self.send(rank_self.body(after))

            def do_GET(self):  # noqa: N802
                self.send(b'["frexport_fr_live", "fr_trace_json", "ping"]' if live else b'["fr_trace_json", "ping"]')

        self.server = serve_unix(path, Handler)

    def body(self, after: int | None = None) -> bytes:
        return replay_body(self.start, self.entries, self.groups, self.rate, base=self.base, after=after)


def replay_body(start: float, entries: int = 2000, groups: int = 10, rate: float = 20.0,
                now: float | None = None, base: int = 5000, after: int | None = None) -> bytes:
    """The JSON a busy rank's recorder returns `now - start` seconds into the job (`base`
    collectives had run before `start`); with `after`, frexport_fr_live's answer (-1: no cursor)."""
    total = base + int(((now or time.time()) - start) * rate)
    t0 = int(start * 1e9)
    es = [_entry(r, r // groups, (str(r % groups), f"g{r % groups}"), t0 + r * 10_000_000)
          for r in range(max(0, total - entries), total)]
    for e in es[-3:]:
        e.update(state="started", retired=False, time_discovered_completed_ns=0)
        del e["duration_ms"]
    doc = {"version": "2.10", "comm_lib_version": "2.21.5", "pg_config": {}, "pg_status": {},
           "nccl_comm_state": {}}
    if after is not None:
        doc["frexport_first_record"] = es[0]["record_id"] if es else None
        es = [e for e in es if e["record_id"] >= after]
    doc["entries"] = es
    return json.dumps(doc).encode()


def _serve_replays(directory: str, ranks: int, rate: float, live: bool = False) -> None:
    """Run in a child process: the replay servers must not share the sidecar's CPU accounting."""
    for r in range(ranks):
        ReplayRank(r, os.path.join(directory, f"rank-{r}.sock"), rate=rate, live=live)
    while True:
        time.sleep(3600)


# --- benchmarks ------------------------------------------------------------------------------------

def bench_scrape() -> None:
    from prometheus_client import generate_latest

    from frexport.config import Analysis
    from frexport.decode.read import decode_bytes
    from frexport.export.prometheus import sidecar_registry
    from frexport.live.diagnosis import LiveAnalysis
    from frexport.live.state import LiveState
    from frexport.sources.health import HealthRegistry

    state, health = LiveState(), HealthRegistry()
    now = time.time_ns()
    for r in range(8):
        body = replay_body(time.time() - 100)
        state.ingest(decode_bytes(body, "bench", rank=r, dumped_at_ns=now), f"socket:rank-{r}", now)
        health.record(f"socket:rank-{r}", True, 0.01, now)
    analysis = LiveAnalysis(Analysis())
    analysis.run(state.latest_dumps())
    registry = sidecar_registry(state, health, analysis)  # as `frexport serve` has it, process_* included
    times = []
    for _ in range(50):
        t = time.perf_counter()
        text = generate_latest(registry)
        times.append(time.perf_counter() - t)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(f"scrape: 8 ranks x 10 groups: median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms, {series} series, {len(text) / 1024:.0f} KiB (target < 50 ms)")


def bench_poll(seconds: float, traces: bool, live: bool = False) -> None:
    from multiprocessing import Process

    tmp = Path(tempfile.mkdtemp(prefix="frx-bench-"))
    replay = Process(target=_serve_replays, args=(str(tmp), 8, 20.0, live), daemon=True)
    replay.start()
    while len(list(tmp.glob("rank-*.sock"))) < 8:
        time.sleep(0.1)
    env = dict(os.environ)
    receiver = None
    if traces:
        from tests.support.otlp_receiver import GrpcReceiver

        receiver = GrpcReceiver().__enter__()
        env.update(FREXPORT_TRACES__ENABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                   OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_EXPORTER_OTLP_INSECURE="true")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "frexport", "serve", "--sockets-dir", str(tmp), "--listen",
                             f"127.0.0.1:{port}", "--poll-interval", "5s"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(12)  # warm-up: imports, first snapshots (2000 new entries per rank)
        c0, t0 = tree_cpu_seconds(proc.pid), time.monotonic()
        m0 = cpu_seconds(proc.pid)
        spans0 = len(receiver.received.spans) if receiver else 0
        peak = 0.0
        while time.monotonic() - t0 < seconds:
            time.sleep(1)
            peak = max(peak, rss_mb(proc.pid))
        elapsed = time.monotonic() - t0
        cpu = (tree_cpu_seconds(proc.pid) - c0) / elapsed
        main_cpu = (cpu_seconds(proc.pid) - m0) / elapsed
        label = ("poll+traces" if traces else "poll") + (" (frexport_fr_live)" if live else " (fr_trace_json)")
        extra = ""
        if receiver:
            rate = (len(receiver.received.spans) - spans0) / (time.monotonic() - t0)
            extra = f", {rate:.0f} spans/s exported ({len(receiver.received.spans)} in total)"
        print(f"{label}: 8 ranks x 2000 entries, +100 collectives per rank per 5 s poll: sidecar CPU "
              f"{cpu * 100:.2f} % of one core with its decoder processes = {cpu * 5000:.0f} ms per poll "
              f"({main_cpu * 100:.2f} % in the main process), peak RSS {peak:.0f} MB over {seconds:.0f} s{extra}, "
              f"load average {os.getloadavg()[0]:.1f} (targets < 2 %, < 150 MB)")
    finally:
        proc.terminate()
        proc.wait(10)
        replay.terminate()
        if receiver:
            receiver.__exit__()


def bench_latency() -> None:
    from frexport.config import DumpDir
    from frexport.live.state import LiveState
    from frexport.sources.dump_dir import DumpDirSource
    from frexport.sources.health import HealthRegistry
    from tests.support.live import pump
    from tests.support.synth import dump, entry

    tmp = Path(tempfile.mkdtemp(prefix="frx-lat-"))
    state = LiveState()
    src = DumpDirSource(HealthRegistry(), DumpDir(str(tmp)))
    src.start()
    samples = []
    try:
        for i in range(20):
            data = json.dumps(dump([entry(k, k + 1) for k in range(200)], world=2)).encode()
            path = tmp / f"trace_{i}.json"
            t = time.monotonic()
            with open(path, "wb") as f:
                f.write(data)
            while i not in state.latest_dumps():
                pump(src, state)
                time.sleep(0.001)
            samples.append(time.monotonic() - t)
    finally:
        src.stop()
    print(f"latency: dump written -> state updated (inotify close-write, 200-entry JSON): median "
          f"{statistics.median(samples) * 1000:.1f} ms, max {max(samples) * 1000:.1f} ms (target < 1 s)")


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time of each thread of a process, in ns (schedstat: finer than the 10 ms of /proc/stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def bench_agent(polls: int = 40) -> None:
    from frexport.sources.http_client import Target, request
    from tests.support.torchjob import TorchJob

    tmp = Path(tempfile.mkdtemp(prefix="frx-agent-"))
    shared = tmp / "shared"
    env = {"STEPS": "2100", "STEP_S": "0", "HOLD_S": "900", "MARK_DIR": str(tmp)}
    with TorchJob("train.py", shared, nproc=2, env=env) as job:
        job.wait_for(lambda: (tmp / "done_0").exists(), timeout=300, what="2100 collectives")
        meta = json.loads((shared / "rank-0.json").read_text())
        pid = meta["pid"]
        sock = Target(unix_path=str(shared / "rank-0.sock"))
        time.sleep(1)
        newest = json.loads(request(sock, "POST", "/handler/frexport_fr_live").body)["entries"][-1]["record_id"]
        # a live poll in a busy job: the sidecar's cursor is ~100 entries behind the newest
        variants = [("fr_trace_json", "fr_trace_json"), ("frexport_fr_pickle", "frexport_fr_pickle"),
                    ("frexport_fr_live (all)", "frexport_fr_live"),
                    ("frexport_fr_live (100 after the cursor)", f"frexport_fr_live?after={newest - 99}")]
        results = {}
        for _label, path in variants:
            for _ in range(3):
                request(sock, "POST", f"/handler/{path}", timeout=60)  # warm-up (the first pickle symbolizes)
        for _ in range(2):  # interleaved rounds: the machine's load changes alike for every variant
            for label, path in variants:
                for _ in range(polls // 2):
                    before = thread_cpu_ns(pid)
                    s = time.monotonic()
                    size = len(request(sock, "POST", f"/handler/{path}", timeout=30).body)
                    lat = time.monotonic() - s
                    after = thread_cpu_ns(pid)
                    deltas = [after[t] - before.get(t, 0) for t in after]
                    results.setdefault(label, []).append((sum(deltas), max(deltas), lat, size))
        base = statistics.median(r[1] for r in results["fr_trace_json"])
        for label, _ in variants:
            rows = results[label]
            total, handler = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
            print(f"agent {label}: trainer CPU per poll of a 2000-entry buffer, median of {len(rows)}: "
                  f"{total / 1e6:.1f} ms in the process, {handler / 1e6:.1f} ms in the serving thread "
                  f"({handler / base:.2f}x fr_trace_json), {statistics.median(r[3] for r in rows) / 1024:.0f} KiB, "
                  f"client latency {statistics.median(r[2] for r in rows) * 1000:.1f} ms, "
                  f"{total / 1e9 / 5 * 100:.3f} % of one core at a 5 s interval")
        print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measuring time of the poll benchmarks")
    ap.add_argument("--only", default="scrape,latency,poll,poll-live,traces,agent")
    args = ap.parse_args()
    todo = args.only.split(",")
    if "scrape" in todo:
        bench_scrape()
    if "latency" in todo:
        bench_latency()
    if "poll" in todo:
        bench_poll(args.seconds, traces=False)
    if "poll-live" in todo:
        bench_poll(args.seconds, traces=False, live=True)
    if "traces" in todo:
        bench_poll(args.seconds, traces=True)
    if "agent" in todo:
        bench_agent()
    return 0


if __name__ == "__main__":
    sys.exit(main())
