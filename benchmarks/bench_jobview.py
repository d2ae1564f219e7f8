"""Benchmark of the job-level view (`frexport jobview`) at scale: 512 pods / 4096 ranks.

    python benchmarks/bench_jobview.py [--ranks 4096] [--pods 512] [--entries 400] [--new 20] [--passes 3]
                                       [--also-ranks 1024] [--derived-threshold] [--parts]

gen_dumps writes a Megatron-like job (tp=8 inside a pod, pp=4, dp across pods) with a rank stuck in a
data-parallel collective; each rank's dump is decoded once. Each pod is a simulated peer: its own
LiveState and the real peers endpoint handler (export/peer_api.py), all of them in a process of their
own (as in a job, the view's process holds none of their data: its collector's walks and its peak memory
are its own), reached through the real PeersSource (sources/peers.py) with only the HTTP exchange
replaced by a call over a pipe (the bytes are the real bodies). The pods first hold each rank's entries
up to `--entries - passes * new`; every later pass reveals `--new` more entries per rank (a busy job's
5 s; `--new 0`: a hung job, polled again with nothing new). One pass = gather from every pod (decode the
bodies, merge the windows) + ingest into the view's state + the unscoped live analysis, exactly what one
iteration of the view's loop does; the time the pods' handlers took to build their bodies is shown apart
and not counted (each pod's sidecar does it on its own CPU, all at once): the pods answer before the
pass is timed, each answer waiting in a file the pass reads (`--serve-in-pass`: within the pass, one
after another in the pods' process, so the pass's wall time holds them, as figures before 2026-11-30's
second session were measured).
Printed:
CPU seconds of each part in the view's process (user + system: on a shared machine wall time follows
the other work) and how much of it the garbage collector took, the decoders' CPU seconds (their
processes run beside it, on the other core), the wall time of the pass, bytes moved per pass, the
bytes of the same ranks' full JSON dumps for comparison, and the root causes the pass names.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import gen_dumps  # noqa: E402

from frexport.config import Analysis, Decode, Peers  # noqa: E402
from frexport.decode.read import decode_file  # noqa: E402
from frexport.decode.sandbox import DecoderPool, Limits  # noqa: E402
from frexport.export.encode import to_json  # noqa: E402
from frexport.export.peer_api import PeerApi  # noqa: E402
from frexport.live.diagnosis import LiveAnalysis  # noqa: E402
from frexport.live.gc_pacing import GcPacing  # noqa: E402
from frexport.live.state import LiveState  # noqa: E402
from frexport.model.outcome import first_unsettled  # noqa: E402
from frexport.sources.health import HealthRegistry  # noqa: E402
from frexport.sources.peers import PeersSource  # noqa: E402
from tests.support.proctree import descendants  # noqa: E402


class Pods:
    """The simulated pods, in a process of their own (forked before anything is generated): each pod's
    LiveState and the real peers endpoint handler (export/peer_api.py) over its ranks. In a job they
    are other machines; in this process their data (6 GB at 16384 ranks) would be walked by the view's
    full collections and counted in its memory, so the view's process holds none of it. Commands over
    a pipe: generate the job, reveal a round of entries, answer requests (into files, or as bytes)."""

    def __init__(self) -> None:
        ctx = mp.get_context("fork")  # (nothing is held yet: a cheap fork, no re-import)
        self._conn, child = ctx.Pipe()
        # (not a daemon: generating the job forks workers; it ends when the view's end of the pipe closes)
        self._proc = ctx.Process(target=_pods_main, args=(child,))
        self._proc.start()
        child.close()
        self._lock = threading.Lock()  # (the view's poll threads may ask at once)

    def call(self, *command: object) -> Any:
        with self._lock:
            self._conn.send(command)
            out = self._conn.recv()
        if isinstance(out, BaseException):
            raise out
        return out

    @property
    def pid(self) -> int:
        return self._proc.pid or 0

    def close(self) -> None:
        self.call("stop")
        self._proc.join(30)


def _pods_main(conn: Connection) -> None:
    job: dict[str, Any] = {}
    while True:
        try:
            command, *args = conn.recv()
        except EOFError:  # the view's process is gone
            return
        try:
            if command == "stop":
                conn.send(None)
                return
            conn.send(_POD_COMMANDS[command](job, *args))
        except Exception as exc:  # noqa: BLE001 - sent back and raised in the view's process
            conn.send(exc)


def _generate(job: dict[str, Any], ranks: int, pods: int, entries: int, new: int, passes: int,
              window: int, tmp: str) -> dict[str, Any]:
    """The job, decoded; what the view's side needs to know of it (it holds none of the dumps)."""
    meta = gen_dumps.generate(ranks, entries, tmp, fault="missing_rank", fault_group="dp",
                              frames=False, fmt="json", micro_batches=4, layers=1)
    dumps = {r: decode_file(str(Path(tmp) / f"{gen_dumps.DEFAULT_PREFIX}{r}"), rank=r) for r in range(ranks)}
    states = [LiveState() for _ in range(pods)]
    job.update(dumps=dumps, states=states, per_pod=ranks // pods, entries=entries, new=new, passes=passes,
               apis={f"http://pod-{p}:9464": PeerApi(states[p], window) for p in range(pods)},
               start_ns=max(d.dumped_at_ns or 0 for d in dumps.values()))
    # the first pass whose entries hold an op still unfinished (the peers' wait in the stuck collective):
    # the culprit is due on that pass, its peers' wait being older than the threshold when it shows
    shown = min((i for d in dumps.values() if (i := first_unsettled(d.entries)) is not None), default=None)
    due = next((i for i in range(passes + 1) if shown is not None and entries - (passes - i) * new > shown), None)
    return {"culprit": meta.get("culprit"), "due": due, "peers": sorted(job["apis"]),
            "full_json": sum(len(to_json(d)) for d in dumps.values())}


def _reveal(job: dict[str, Any], i: int) -> None:
    """Pass i's entries, polled by each pod's own sidecar (not timed: not the view's work)."""
    keep = job["entries"] - (job["passes"] - i) * job["new"]
    seen = job["start_ns"] + i * 5_000_000_000
    for r, d in job["dumps"].items():
        job["states"][r // job["per_pod"]].ingest(replace(d, entries=d.entries[:keep], dumped_at_ns=seen),
                                                  "bench", seen)


def _serve(job: dict[str, Any], requests: list[tuple[str, str]], spool: str | None) -> tuple[float, list[bytes]]:
    """Each request's answer (into `spool`/<its index>, or returned) and the CPU seconds they took."""
    t, out = time.process_time(), []
    for i, (peer, path) in enumerate(requests):
        p, _, q = path.partition("?")
        status, body, _ = job["apis"][peer].handle(p, q)
        assert status == 200, body
        if spool is None:
            out.append(body)
        else:
            Path(spool, str(i)).write_bytes(body)
    return time.process_time() - t, out


_POD_COMMANDS: dict[str, Callable[..., Any]] = {"generate": _generate, "reveal": _reveal, "serve": _serve}


class PodPeers(PeersSource):
    """The real source; a peer's GET is answered by the pods' process (no sockets: 512 servers would
    measure the loopback, not the view)."""

    def __init__(self, pods: Pods, peers: list[str], window: int, decoder: DecoderPool,
                 concurrency: int | None = None) -> None:
        # polls at once: jobview's default (Peers.concurrency), a body waiting for a decoder while another is read
        super().__init__(HealthRegistry(), Peers(urls=peers, poll_interval=0.0,
                                                 concurrency=concurrency or Peers.concurrency), window, decoder)
        self.pods = pods
        self.pass_wait_s = None  # every pod's answer within the pass it measures
        self.served_s = 0.0  # CPU time in the pods' handlers: their own CPUs, in parallel in a real job
        self.spool = Path(tempfile.mkdtemp(prefix="frx-jobview-bodies-"))
        self._ready: dict[str, tuple[str, Path]] = {}  # peer -> (the request, its answer's file) served ahead

    def serve_ahead(self) -> None:
        """Every pod's answer to the request the view's next pass makes, built now, before the pass is
        timed: in a job each pod builds it on its own CPU while the others build theirs, so a pass on the
        view's machine does not wait for 2048 of them one after another. Each answer waits in a file, so
        the bodies of a first pass (~1.2 GB at 16384 ranks) are held in no process's memory, and the pass
        reads each one as it would receive it."""
        self._index_held()
        requests = [(peer, self._ranks_path(peer)) for peer in self.cfg.urls]
        served, _ = self.pods.call("serve", requests, str(self.spool))
        self.served_s += served
        self._ready = {peer: (path, self.spool / str(i)) for i, (peer, path) in enumerate(requests)}

    def _get(self, peer: str, path: str, timeout: float | None = None, max_body: int | None = None) -> bytes:
        ready = self._ready.pop(peer, None)
        if ready is not None and ready[0] == path:
            return ready[1].read_bytes()
        served, (body,) = self.pods.call("serve", [(peer, path)], None)
        self.served_s += served
        return body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--pods", type=int, default=512)
    ap.add_argument("--entries", type=int, default=400, help="entries per rank generated")
    ap.add_argument("--new", type=int, default=20, help="new entries per rank per steady pass")
    ap.add_argument("--passes", type=int, default=3, help="steady-state passes after the first")
    ap.add_argument("--window", type=int, default=Analysis.window)
    ap.add_argument("--no-gc-pacing", action="store_true", help="leave the collector as CPython paces it "
                    "(the loop turns automatic collection off, collects the young once a pass and freezes "
                    "the survivors: live/gc_pacing.py)")
    ap.add_argument("--derived-threshold", action="store_true", help="derive the stall threshold from the job's "
                    "step time, as the default configuration does (analysis.stall_after unset: each pass reads "
                    "every rank's newest entries, live/step_time.py); without it a fixed 30 s, as the earlier "
                    "figures were measured")
    ap.add_argument("--concurrency", type=int, default=None, help="polls at once (default: jobview's, "
                    "peers.concurrency; figures before 2026-11-30's second session were measured with 2, as many "
                    "as decoders, so each decoder waited while the view read its last answer)")
    ap.add_argument("--serve-in-pass", action="store_true", help="the pods build their answers within the pass, "
                    "one after another in the pods' process, as the figures before the twenty-second session "
                    "were measured (their CPU is not counted in the view's, but the wall time holds it)")
    ap.add_argument("--profile", metavar="FILE", help="write a cProfile of the last pass's analysis to FILE "
                    "(pstats format; the pass's figures then include the profiler's own cost)")
    ap.add_argument("--parts", action="store_true", help="also print each pass's CPU seconds in each part of the "
                    "analysis (timers around the functions where the analysis calls them: their own cost is a "
                    "few microseconds a call)")
    ap.add_argument("--also-ranks", type=int, action="append", default=[], metavar="N",
                    help="first run the same job at N ranks (as many per pod), in a process of its own, and end "
                         "with how the steady pass grows from N to --ranks (repeatable)")
    args = ap.parse_args(argv)
    others = {n: _run_alone(args, n) for n in args.also_ranks}

    pods = Pods()
    with tempfile.TemporaryDirectory(prefix="frx-jobview-") as tmp:
        t = time.monotonic()
        job = pods.call("generate", args.ranks, args.pods, args.entries, args.new, args.passes, args.window, tmp)
        print(f"generated and decoded {args.ranks} ranks x {args.entries} entries in {time.monotonic() - t:.1f} s "
              f"(culprit {job['culprit']})")
    per_pod = args.ranks // args.pods
    cfg = Analysis() if args.derived_threshold else Analysis(stall_after=30.0)
    view_state, analysis = LiveState(max_ranks=args.ranks, count=False), LiveAnalysis(cfg, scoped=False)  # as jobview's
    decoder = DecoderPool(Decode.workers, Limits(require_memory_limit=False))
    pacing = GcPacing()
    if not args.no_gc_pacing:
        pacing.start()
    source = PodPeers(pods, job["peers"], args.window, decoder, args.concurrency)
    rss_before = _rss_mb()  # what the view's process holds before its first pass (its imports, no pods)
    rows = []
    collector = GcClock()
    parts = PartClocks() if args.parts else None
    for i in range(args.passes + 1):
        pods.call("reveal", i)
        served = source.served_s
        if not args.serve_in_pass:
            source.serve_ahead()  # (the pods' CPU, shown apart)
        before = source.bytes_total
        wall, t0, d0, gc0 = time.perf_counter(), time.process_time(), decoders_cpu_s(pods), collector.total
        started = decoder.started
        snaps = source.collect()
        served = source.served_s - served
        t1 = time.process_time()
        for s in snaps:
            view_state.ingest(s.dump, s.source, s.taken_ns)
        t2 = time.process_time()
        profiler = cProfile.Profile() if args.profile and i == args.passes else None
        if profiler:
            profiler.enable()
        result = analysis.run(view_state.latest_dumps())
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        if not args.no_gc_pacing:
            pacing.after_pass()  # as the loop does after each pass
        t3 = time.process_time()
        wall, decoding = time.perf_counter() - wall, decoders_cpu_s(pods) - d0
        moved = source.bytes_total - before
        roots = [f"{f.kind} {list(f.culprit_ranks)}" for f in result.diagnosis.findings if f.root_cause]
        rows.append({"pass": "first" if i == 0 else f"steady {i}", "pods_serving_s": round(served, 2),
                     "gather_s": round(t1 - t0, 2),
                     "ingest_s": round(t2 - t1, 2), "analysis_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
                     "gc_s": round(collector.total - gc0, 2), "decoders_s": round(decoding, 2),
                     "wall_s": round(wall, 2), "bytes": moved,
                     "snapshots": len(snaps), "root_causes": roots[:2],
                     "decoders_started": decoder.started - started,  # (a replaced worker starts an interpreter)
                     "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024})
        if parts is not None:
            rows[-1]["parts"] = parts.take()
    print(f"{args.pods} pods x {per_pod} ranks; window {args.window}; {args.new} new entries per rank per pass; "
          f"full JSON dumps of these ranks: {job['full_json'] / 1e6:.0f} MB; CPU seconds in the view's process "
          f"(the decoders' and the wall time apart)")
    for row in rows:
        restarted = f" ({row['decoders_started']} started)" if row["decoders_started"] else ""
        print(f"  {row['pass']:9}  [pods serving {row['pods_serving_s']:5.2f} s]  gather {row['gather_s']:5.2f} s"
              f"  ingest {row['ingest_s']:5.2f} s  analysis "
              f"{row['analysis_s']:5.2f} s  total {row['total_s']:5.2f} s (gc {row['gc_s']:4.2f} s)  "
              f"[decoders {row['decoders_s']:5.2f} s{restarted}, "
              f"wall {row['wall_s']:5.2f} s]  "
              f"moved {row['bytes'] / 1e6:7.1f} MB ({row['bytes'] / job['full_json']:.1%} of full dumps)  "
              f"{row['root_causes']}  [peak RSS {row['peak_rss_mb']} MB]")
        if "parts" in row:
            print("             of the analysis: " + ", ".join(f"{k} {v:.3f} s" for k, v in row["parts"].items()))
    named = next((i for i, row in enumerate(rows) if row["root_causes"]), None)
    print(f"the stuck collective first shows on pass {job['due']}; the culprit is named on pass {named} "
          f"(0: the first pass). The view's process (the pods are another): {rss_before} MB before its first "
          f"pass, its peak {rows[-1]['peak_rss_mb']} MB")
    print(json.dumps(rows))
    for n, other in others.items():
        _compare(n, other, args.ranks, rows)
    if not args.no_gc_pacing:  # (the view's objects alone: the pods' are in their own process)
        t = time.process_time()
        pacing.stop()
        gc.collect()
        full = time.process_time() - t
        print(f"  a full collection: {full:.2f} s; the loop runs one {full / pacing.full_share:.0f} s after the last "
              f"({pacing.full_share:.0%} of its time)")
    decoder.close()
    pods.close()
    shutil.rmtree(source.spool, ignore_errors=True)
    return 0


def _run_alone(args: argparse.Namespace, ranks: int) -> list[dict]:
    """The pass rows of this benchmark at `ranks` ranks, run in a child process (its memory its own)."""
    per_pod = max(1, args.ranks // args.pods)
    cmd = [sys.executable, __file__, "--ranks", str(ranks), "--pods", str(max(1, ranks // per_pod)),
           "--entries", str(args.entries), "--new", str(args.new), "--passes", str(args.passes),
           "--window", str(args.window)] + (["--no-gc-pacing"] if args.no_gc_pacing else []) + \
        (["--derived-threshold"] if args.derived_threshold else []) + \
        (["--serve-in-pass"] if args.serve_in_pass else []) + \
        (["--concurrency", str(args.concurrency)] if args.concurrency else [])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
    print(out, end="", flush=True)
    return json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("[")))


def _compare(small: int, small_rows: list[dict], big: int, big_rows: list[dict]) -> None:
    """How the steady pass grows from `small` to `big` ranks: the medians of the steady passes."""
    def steady(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows if r["pass"] != "first")

    print(f"{small} -> {big} ranks ({big / small:g}x), steady passes' medians in one run:")
    for key, what in (("total_s", "the view's CPU"), ("analysis_s", "of it analysis"), ("wall_s", "wall")):
        a, b = steady(small_rows, key), steady(big_rows, key)
        print(f"  {what:15} {a:6.2f} s -> {b:6.2f} s: {b / a if a else float('inf'):.2f}x")
    a, b = small_rows[0]["total_s"], big_rows[0]["total_s"]
    print(f"  first pass, the view's CPU: {a:.2f} s -> {b:.2f} s: {b / a if a else float('inf'):.2f}x")


CLK = os.sysconf("SC_CLK_TCK")


def _rss_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


class PartClocks:
    """CPU seconds in each part of the live analysis (--parts): each function wrapped, for this process,
    where the analysis looks it up (a module's global, a class's method), so a call made from elsewhere
    is counted as well. Where a 16384-rank pass goes, part by part (docs/performance.md)."""

    def __init__(self) -> None:
        from frexport.analysis import engine
        from frexport.live import diagnosis
        from frexport.model.trace_window import TraceWindow

        self.seconds: dict[str, float] = {}
        for label, owner, name in (
                ("follow", TraceWindow, "update"), ("engine", diagnosis, "analyze"),
                ("stragglers", engine, "straggler_findings"), ("group columns", engine._Context, "group_cols"),
                ("matching", engine, "match_group"), ("behind", engine, "behind"),
                ("who waits", engine, "find_waits"), ("root causes", engine, "root_causes"),
                ("statuses", diagnosis, "statuses_of")):
            self.seconds[label] = 0.0
            setattr(owner, name, self._timed(label, getattr(owner, name)))

    def _timed(self, label: str, f: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                self.seconds[label] += time.process_time() - start
        return timed

    def take(self) -> dict[str, float]:
        """The seconds since the last call."""
        out = dict(self.seconds)
        self.seconds = dict.fromkeys(out, 0.0)
        return out


class GcClock:
    """CPU seconds spent in the garbage collector."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.total += time.process_time() - self._start


def decoders_cpu_s(pods: Pods) -> float:
    """User + system CPU seconds of this process's children but the pods': the live decoders (from
    /proc: they are not waited for) and those recycled and reaped."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = reaped.ru_utime + reaped.ru_stime
    for pid in set(descendants(os.getpid())) - {pods.pid}:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK
        except (OSError, ValueError, IndexError):
            pass
    return total


if __name__ == "__main__":
    sys.exit(main())
