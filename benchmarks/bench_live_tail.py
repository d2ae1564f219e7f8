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

The same reads are then measured as the other recorders write their entries (`--shapes`), which no
backend on a CPU can produce: each entry of the real dumps rewritten as torch 2.15's FlightRecorderHook
writes it for nccl2, the default `nccl` (`nccl2`: completed, retired, a duration, its discovered start
and end the same time), and as legacy ProcessGroupNCCL writes it without timing (`nccl`: completed,
a discovered start and end, no duration), then pickled as PyTorch's pickler does (strings memoized
by value, nothing else: `TorchPickler`), so that the agent's cut and the compiled scanner read them
as they read torch's own. Only the answer the sidecar asks by default (the pickle) is measured there.

`--spans RATIOS` (`1,0.01` by default; `none`: not measured): what OpenTelemetry spans add per entry read
of the gloo dumps, with spans sampled at each ratio (OTEL_TRACES_SAMPLER traceidratio): the state's
events for the sink (its ingest with them, less without), the sink's mapping of the events to spans (the
sampler's decisions included), and the OTLP protobuf encoding of the spans sent (the SDK's encoder, as
the exporters call it; no network: `bench_busy_job.py --spans` measures the real export).
"""

from __future__ import annotations

import argparse
import io
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
from frexport.decode.safe_pickle import loads_plain  # noqa: E402
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
SHAPES = ("gloo", "nccl2", "nccl")  # gloo: the dumps as recorded; the others rewritten (module doc)


class TorchPickler(pickle._Pickler):  # (the Python pickler: its memo and batching can be overridden)
    """Protocol 2 as PyTorch's pickler writes a dump: only strings memoized, and equal strings once
    (the data comes from loads_plain, which shares each memoized string, and `_rewritten` interns its
    own); every dict's and list's items after a MARK, even one."""

    def memoize(self, obj: object) -> None:
        if type(obj) is str:
            super().memoize(obj)

    def _batch_setitems(self, items) -> None:  # type: ignore[no-untyped-def]
        self._marked([x for kv in items for x in kv], pickle.SETITEMS)

    def _batch_appends(self, items) -> None:  # type: ignore[no-untyped-def]
        self._marked(list(items), pickle.APPENDS)

    def _marked(self, objs: list, op: bytes) -> None:
        if objs:
            self.write(pickle.MARK)
            for x in objs:
                self.save(x)
            self.write(op)


def _rewritten(data: bytes, shape: str) -> bytes:
    """One of the real dumps with each entry as the `shape` recorder writes it (module doc)."""
    if shape == "gloo":
        return data
    doc = loads_plain(data, "bench")
    for e in doc["entries"]:
        e["profiling_name"] = sys.intern(shape + ":" + e["profiling_name"].split(":", 1)[1])
        e["state"], e["retired"] = "completed", True
        e["time_discovered_completed_ns"] = e["time_created_ns"] + 40_000
        if shape == "nccl2":  # (retire_completed: the duration, and "now" for both times)
            e["time_discovered_started_ns"] = e["time_discovered_completed_ns"]
            e["duration_ms"] = 0.02 + e["record_id"] % 13 * 0.001
        else:
            e["time_discovered_started_ns"] = e["time_created_ns"] + 10_000
    out = io.BytesIO()
    TorchPickler(out, protocol=2).dump(doc)
    return out.getvalue()


def record(reads: int, new: int) -> tuple[list[bytes], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dumps.pkl"
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                   TORCH_FR_BUFFER_SIZE="2000", OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-c", _RECORDER, str(out), str(reads), str(new)], env=env, check=True,
                       timeout=600)
        return pickle.loads(out.read_bytes())  # (this benchmark's own file: plain bytes and floats)


def one_round(dumps: list[bytes], fmt: str, recorder: str = "gloo") -> tuple[dict[str, float], int]:
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
        cursor = source._cursors.of((0, recorder), last.entries)  # the sidecar's: counted with its decode
        t0 = time.process_time()
        body = live_dump(lambda *flags, d=data: d, last.entries[cursor[0]].record_id, fmt)
        t1 = time.process_time()
        assert fmt == "json" or len(body) < len(data), "the agent could not cut this pickle: not torch's layout"
        dump = source._decode_tail(target, recorder, body, now, last, window=True, cursor=cursor)
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


def span_costs(dumps: list[bytes], ratio: float) -> tuple[dict[str, float], int]:
    """CPU seconds of each part spans add (module doc) over every read after the first, and the spans sent."""
    from collections import deque

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from frexport.export.otlp.pipeline import OtlpSink, _Work
    from frexport.export.otlp.sampling import TraceSampling

    decoded = [decode_bytes(d, "bench", rank=0, dumped_at_ns=i + 1, keep_frames=False) for i, d in enumerate(dumps)]
    ingest, events = {}, []
    for with_events in (False, True):
        state = LiveState(events=with_events)
        state.ingest(decoded[0], "bench", 1)
        c = time.process_time()
        for now, dump in enumerate(decoded[1:], 2):
            events += state.ingest(dump, "bench", now)
        ingest[with_events] = time.process_time() - c
    sink = OtlpSink(InMemorySpanExporter(), "bench", sampling=TraceSampling.from_env(
        {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(ratio)}))
    c = time.process_time()
    spans = sink._spans_of(_Work(deque(events), [], 0))
    mapped = time.process_time() - c
    c = time.process_time()
    for i in range(0, len(spans), 512):
        encode_spans(spans[i:i + 512]).SerializeToString()
    return {"events": ingest[True] - ingest[False], "map": mapped, "encode": time.process_time() - c}, len(spans)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", type=int, default=1000, help="collectives between two reads (a half buffer: "
                    "what status first reads at on a busy rank)")
    ap.add_argument("--reads", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="entries as these recorders write them "
                    f"(of {', '.join(SHAPES)}; the module doc says how)")
    ap.add_argument("--spans", default="1,0.01", help="what spans add, sampled at these ratios (`none`: not "
                    "measured)")
    args = ap.parse_args(argv)
    formats = ["json", "pickle"] if scanned.available() else ["json"]
    dumps, took = record(args.reads, args.new)
    cases = [(fmt, "gloo") for fmt in formats if "gloo" in args.shapes.split(",")]
    cases += [("pickle", shape) for shape in args.shapes.split(",") if shape != "gloo" and scanned.available()]
    shaped = {shape: [_rewritten(d, shape) for d in dumps] for _fmt, shape in cases}
    best: dict[tuple[str, str], dict[str, float]] = {}
    for _ in range(args.rounds):
        for case in cases:
            spent, counted = one_round(shaped[case[1]], case[0], case[1])
            per = {stage: s / counted * 1e6 for stage, s in spent.items()}
            best[case] = {s: min(v, best.get(case, per)[s]) for s, v in per.items()}
    print(f"{args.reads} reads of {args.new} new entries (2000-entry buffer, real torch gloo dumps); PyTorch's "
          f"pickle dump in the trainer: {sorted(took)[len(took) // 2] * 1e3:.1f} ms median a read "
          f"({sorted(took)[len(took) // 2] / args.new * 1e6:.1f} µs an entry read), the same for both")
    print("CPU µs per entry read, least of %d rounds:" % args.rounds)
    print(f"  {'answer':7} {'entries as':10} {'agent (trainer)':>16} {'decode':>8} {'ingest':>8} {'analysis':>9} "
          f"{'sidecar':>8}")
    for (fmt, shape), per in best.items():
        sidecar = per["decode"] + per["ingest"] + per["analysis"]
        print(f"  {fmt:7} {shape:10} {per['agent']:16.2f} {per['decode']:8.2f} {per['ingest']:8.2f} "
              f"{per['analysis']:9.2f} {sidecar:8.2f}")
    if not scanned.available():
        print(f"  (no pickle answer: the compiled scanner is not in use: {scanned.status()})")
    if args.spans != "none":
        print_span_costs(dumps, [float(r) for r in args.spans.split(",")], args.rounds, args.new)
    return 0


def print_span_costs(dumps: list[bytes], ratios: list[float], rounds: int, new: int) -> None:
    try:
        import opentelemetry.exporter.otlp.proto.common  # noqa: F401 - the `otlp` extra
    except ImportError:
        print("spans: not measured (the otlp extra is not installed: pip install '.[otlp]')")
        return
    print(f"spans, CPU µs per entry read of the gloo dumps, least of {rounds} rounds:")
    print(f"  {'sampled':8} {'sent':>6} {'events':>7} {'map':>7} {'encode':>7} {'spans':>7}")
    read = (len(dumps) - 1) * new  # entries read after the first read
    for ratio in ratios:
        best: dict[str, float] = {}
        for _ in range(rounds):
            spent, sent = span_costs(dumps, ratio)
            per = {part: s / read * 1e6 for part, s in spent.items()}
            best = {part: min(v, best.get(part, v)) for part, v in per.items()}
        print(f"  {ratio:<8g} {sent:6d} {best['events']:7.2f} {best['map']:7.2f} {best['encode']:7.2f} "
              f"{sum(best.values()):7.2f}")


if __name__ == "__main__":
    sys.exit(main())
