"""The live poll's stages per entry, the agent's JSON answer against its cut pickle (issue 39).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_live_tail.py [--new 1000] [--reads 5] [--rounds 3]

A real torch gloo process (world size 1, 2000-entry buffer) issues `--new` all_reduces between
`--reads + 1` pickle dumps of its recorder (PyTorch's own `_dump_fr_trace`, without stack frames, as
the agent takes it). Each read is then served and read the way a live poll is, in this process: the
agent's answer from the sidecar's cursor (agent/live.py `live_dump`, JSON or `format=pickle`: what
the trainer does beyond PyTorch's dump), the sidecar's decode of it (WorkerServerSource._decode_tail:
parse_tail or parse_pickle_tail, then normalize with the older entries carried), the state's ingest
and the live analysis. CPU microseconds per entry read (the entries counted), the least of the
rounds, JSON and pickle interleaved; PyTorch's dump itself is printed apart (the same for both).
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from frexport.agent.live import live_dump  # noqa: E402
from frexport.config import Analysis, WorkerServers  # noqa: E402
from frexport.decode import scanned  # noqa: E402
from frexport.decode.read import decode_bytes  # noqa: E402
from frexport.live.diagnosis import LiveAnalysis  # noqa: E402
from frexport.live.state import LiveState  # noqa: E402
from frexport.sources.health import HealthRegistry  # noqa: E402
from frexport.sources.http_client import Target  # noqa: E402
from frexport.sources.worker_server import RankTarget, WorkerServerSource  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

_RECORDER = """
import pickle, sys, time, torch, torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
dist.init_process_group("gloo")
t, dumps, took = torch.ones(64), [], []
for _ in range(int(sys.argv[2]) + 1):
    for _ in range(int(sys.argv[3])):
        dist.all_reduce(t)
    c = time.thread_time()
    dumps.append(_dump_fr_trace(True, False, False))
    took.append(time.thread_time() - c)
pickle.dump((dumps, took), open(sys.argv[1], "wb"))
"""

STAGES = ("agent", "decode", "ingest", "analysis")


def record(reads: int, new: int) -> tuple[list[bytes], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dumps.pkl"
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                   TORCH_FR_BUFFER_SIZE="2000", OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-c", _RECORDER, str(out), str(reads), str(new)], env=env, check=True,
                       timeout=600)
        return pickle.loads(out.read_bytes())  # (this benchmark's own file: plain bytes and floats)


def one_round(dumps: list[bytes], fmt: str) -> tuple[dict[str, float], int]:
    """CPU seconds per stage over every read after the first, and the entries those reads counted."""
    source = WorkerServerSource(HealthRegistry(), WorkerServers())
    target = RankTarget(0, Target(unix_path="/bench"), "bench")
    state, analysis = LiveState(events=False), LiveAnalysis(Analysis())  # as serve's, spans off (the default)
    last = decode_bytes(dumps[0], "bench", rank=0, dumped_at_ns=1, keep_frames=False)
    state.ingest(last, "bench", 1)
    first = sum(state.collectives.values())
    analysis.run(state.latest_dumps())
    spent = dict.fromkeys(STAGES, 0.0)
    for now, data in enumerate(dumps[1:], 2):
        c = time.process_time()
        cursor = source._cursors.of((0, "gloo"), last.entries)  # the sidecar's: counted with its decode
        t0 = time.process_time()
        body = live_dump(lambda *flags, d=data: d, last.entries[cursor[0]].record_id, fmt)
        t1 = time.process_time()
        dump = source._decode_tail(target, "gloo", body, now, last, window=True, cursor=cursor)
        assert dump is not None, "the tail could not be joined: read more often (--new)"
        t2 = time.process_time()
        state.ingest(dump, "bench", now)
        t3 = time.process_time()
        analysis.run(state.latest_dumps())
        t4 = time.process_time()
        for stage, took in zip(STAGES, (t1 - t0, t2 - t1 + t0 - c, t3 - t2, t4 - t3)):
            spent[stage] += took
        last = dump
    counted = sum(state.collectives.values()) - first
    return spent, counted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", type=int, default=1000, help="collectives between two reads (a half buffer: "
                    "what status first reads at on a busy rank)")
    ap.add_argument("--reads", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    formats = ["json", "pickle"] if scanned.available() else ["json"]
    dumps, took = record(args.reads, args.new)
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for fmt in formats:
            spent, counted = one_round(dumps, fmt)
            per = {stage: s / counted * 1e6 for stage, s in spent.items()}
            best[fmt] = {s: min(v, best.get(fmt, per)[s]) for s, v in per.items()}
    print(f"{args.reads} reads of {args.new} new entries (2000-entry buffer, real torch gloo dumps); PyTorch's "
          f"pickle dump in the trainer: {sorted(took)[len(took) // 2] * 1e3:.1f} ms median a read "
          f"({sorted(took)[len(took) // 2] / args.new * 1e6:.1f} µs an entry read), the same for both")
    print("CPU µs per entry read, least of %d rounds:" % args.rounds)
    print(f"  {'answer':7} {'agent (trainer)':>16} {'decode':>8} {'ingest':>8} {'analysis':>9} {'sidecar':>8}")
    for fmt, per in best.items():
        sidecar = per["decode"] + per["ingest"] + per["analysis"]
        print(f"  {fmt:7} {per['agent']:16.2f} {per['decode']:8.2f} {per['ingest']:8.2f} {per['analysis']:9.2f} "
              f"{sidecar:8.2f}")
    if not scanned.available():
        print(f"  (no pickle answer: the compiled scanner is not in use: {scanned.status()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
