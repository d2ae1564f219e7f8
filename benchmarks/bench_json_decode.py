"""Per-body cost of every JSON decode alternative, in one run, best of N (issue 26: measure before choosing).

    python benchmarks/bench_json_decode.py [--reps 15] [--base /path/to/older/checkout]

Bodies: a 2000-entry buffer built from the real gloo fixtures (tests/fixtures/real/*/json, renumbered,
PyTorch's compact sorted writing) and a 2000-entry rank of gen_dumps.py (NCCL-shaped, json.dumps'
spacing). For each, per alternative, the best of --reps runs (gc off while timed, collected before):

  whole body, plain data -> RankDump (the job view, a sidecar's first poll):
    json.loads + normalize, msgspec (json_decode.loads) + normalize
  whole body -> RankTrace (analyze):
    json.loads + fast_trace, msgspec + fast_trace, msgspec typed columns (json_decode.trace)
  new tail (100 and 400 entries) -> RankDump (a sidecar's later polls): json_decode.parse_tail + normalize

--base: a checkout of an older frexport (its own compiled scanner built or copied in) whose
`json_scan.trace_from_json` and `json_tail.parse_tail` are timed too, in a child process that takes
its turn in every round (the same bodies, the same load), so the rows compare.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bodies() -> dict[str, bytes]:
    ents: list[dict] = []
    for p in sorted(glob.glob(str(ROOT / "tests/fixtures/real/*/json/trace_*.json"))):
        ents += [e for e in json.loads(Path(p).read_bytes())["entries"] if isinstance(e, dict)]
    base = json.loads((ROOT / "tests/fixtures/real/straggler_2d/json/trace_0.json").read_bytes())
    base["entries"] = [{**ents[i % len(ents)], "record_id": i, "time_created_ns": 1795341593737379459 + i * 1000}
                       for i in range(2000)]
    out = {"real (gloo) x2000": json.dumps(base, separators=(",", ":"), sort_keys=True).encode()}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gen_dumps

    d = Path(os.environ.get("TMPDIR", "/tmp")) / "frexport_bench_json_decode"
    f = d / f"{gen_dumps.DEFAULT_PREFIX}0"
    if not f.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks/gen_dumps.py"), "--ranks", "32", "--entries", "2000",
                        "--format", "json", "--out", str(d), "--workers", "1"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    out["gen_dumps x2000"] = f.read_bytes()
    return out


def cases(body: bytes, base: bool) -> dict:
    """name -> a call of no argument, for the frexport on sys.path (the older one when `base`)."""
    from frexport.decode import fast_trace
    from frexport.decode.normalize import normalize

    ids = [e["record_id"] for e in json.loads(body)["entries"]]
    out: dict = {}

    def tail_normalize(parse_tail, since):
        def run():
            t = parse_tail(body, since)
            raw = dict(t.meta)
            raw["entries"] = t.entries
            return normalize(raw, "x", "json", 0, keep_frames=False)
        return run

    if base:
        from frexport.decode import json_scan, json_tail
        out["analyze: json_scan (old fast path)"] = lambda: json_scan.trace_from_json(body, "x", 0, 1, len(body))
        for back in (100, 400):
            out[f"tail {back}: json_tail.parse_tail (old) + normalize"] = tail_normalize(json_tail.parse_tail,
                                                                                         ids[-back])
        return out
    import msgspec

    from frexport.decode import json_decode

    plain = msgspec.json.Decoder()
    out["decode only: json.loads"] = lambda: json.loads(body)
    out["decode only: msgspec untyped"] = lambda: plain.decode(body)
    out["decode only: msgspec typed structs"] = lambda: json_decode._DUMP.decode(body)
    out["RankDump: json.loads + normalize"] = lambda: normalize(json.loads(body), "x", "json", 0, keep_frames=False)
    out["RankDump: msgspec + normalize"] = lambda: normalize(json_decode.loads(body, "x"), "x", "json", 0,
                                                             keep_frames=False)
    out["analyze: json.loads + fast_trace"] = lambda: fast_trace.trace_from_raw(json.loads(body), "x", "json", 0, 1, 1)
    out["analyze: msgspec + fast_trace"] = lambda: fast_trace.trace_from_raw(json_decode.loads(body, "x"), "x",
                                                                             "json", 0, 1, 1)
    out["analyze: msgspec typed columns (json_decode.trace)"] = lambda: json_decode.trace(body, "x", 0, 1, 1)
    for back in (100, 400):
        out[f"tail {back}: json_decode.parse_tail + normalize"] = tail_normalize(json_decode.parse_tail, ids[-back])
    return out


def timed(f) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def child(base: bool) -> None:
    """Runs the cases of the frexport on its sys.path: reads 'body case' lines, answers seconds."""
    all_bodies = bodies()
    made = {name: cases(b, base) for name, b in all_bodies.items()}
    print(json.dumps({name: list(c) for name, c in made.items()}), flush=True)
    for line in sys.stdin:
        body, case = json.loads(line)
        print(timed(made[body][case]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--base", default=None, help="an older checkout whose JSON scanner and tail parser to time too")
    ap.add_argument("--child", choices=("new", "base"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child == "base")
        return
    trees = {"new": str(ROOT)} | ({"base": args.base} if args.base else {})
    procs, names = {}, {}
    for kind, tree in trees.items():
        procs[kind] = subprocess.Popen([sys.executable, __file__, "--child", kind], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": tree})
        names[kind] = json.loads(procs[kind].stdout.readline())
    print(f"load average before: {os.getloadavg()}")
    best: dict[tuple, float] = {}
    for _ in range(args.reps):
        for body in names["new"]:
            for kind, p in procs.items():
                for case in names[kind][body]:
                    p.stdin.write(json.dumps([body, case]) + "\n")
                    p.stdin.flush()
                    t = float(p.stdout.readline())
                    best[(body, case)] = min(best.get((body, case), t), t)
    print(f"load average after: {os.getloadavg()}")
    for p in procs.values():
        p.stdin.close()
        p.wait()
    for body in names["new"]:
        print(f"\n{body} (best of {args.reps}, ms)")
        ref = best.get((body, "decode only: json.loads"))
        for (b, case), t in sorted(best.items(), key=lambda kv: kv[0][1]):
            if b == body:
                print(f"  {case:55s} {t * 1e3:7.2f}   {t / ref:5.2f}x json.loads")


if __name__ == "__main__":
    main()
