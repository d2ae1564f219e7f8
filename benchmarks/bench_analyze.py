"""Benchmark `frexport analyze` against PyTorch's analyzer on the same dumps, in one run.

    python benchmarks/bench_analyze.py --sizes 64x2000,1024x2000 [--fault missing_rank] [--timeout 600]

For each size it generates (or reuses, under benchmarks/out/) a dump directory with gen_dumps.py,
then runs, each as its own process tree:
- frexport:  python -m frexport analyze DIR --format json
- reference: python -m torch.distributed.flight_recorder.fr_trace DIR --prefix nccl_trace_rank_
- unpickle:  a single process that only pickle.loads every file (the floor a serial tool pays)
and prints wall time and peak RSS of the whole process tree (frexport decodes in worker
processes: their memory counts), sampled from /proc every 50 ms, plus the reference/frexport
ratio and whether frexport named the injected culprit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen_dumps import CULPRIT, generate  # noqa: E402

_PICKLE_ONLY = """
import os, pickle, sys
d = sys.argv[1]
n = 0
for name in os.listdir(d):
    with open(os.path.join(d, name), "rb") as f:
        pickle.load(f)
    n += 1
print(n)
"""


def _processes() -> tuple[dict[int, list[int]], dict[int, int]]:
    """(children by parent pid, resident kB by pid) from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss[int(entry)] = int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children, rss


def _tree(pid: int, children: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants."""
    children, rss = _processes()
    return sum(rss.get(p, 0) for p in _tree(pid, children))


def measure(cmd: list[str], timeout: float) -> dict:
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    peak = 0
    out_chunks: list[bytes] = []

    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)
    err_chunks: list[bytes] = []
    err_reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    err_reader.start()
    timed_out = False
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kb(proc.pid))
        if time.monotonic() - start > timeout:
            timed_out = True
            _kill_tree(proc.pid)
            break
        time.sleep(0.05)
    proc.wait()
    reader.join(5)
    err_reader.join(5)
    return {"wall_s": time.monotonic() - start, "peak_mb": peak / 1024, "rc": proc.returncode,
            "timed_out": timed_out, "stdout": b"".join(out_chunks).decode(errors="replace"),
            "stderr": b"".join(err_chunks).decode(errors="replace")}


def _kill_tree(pid: int) -> None:
    import signal

    for p in _tree(pid, _processes()[0]):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64x2000,1024x2000", help="RANKSxENTRIES, comma separated")
    ap.add_argument("--fault", default="missing_rank", choices=("none", "missing_rank", "desync", "size_mismatch"))
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args()

    rows = []
    for size in args.sizes.split(","):
        ranks, entries = (int(x) for x in size.lower().split("x"))
        d = Path(args.out) / f"d{ranks}x{entries}-{args.fault}"
        if not (d / f"nccl_trace_rank_{ranks - 1}").exists():
            t = time.monotonic()
            # NCCL names all_gather_into_tensor "_allgather_base", which PyTorch's analyzer rejects
            # ("not a supported operation"): name it all_gather so the reference can finish.
            total = generate(ranks, entries, str(d), fault=args.fault, gather_op="all_gather")
            print(f"generated {d}: {total / 1e6:.0f} MB in {time.monotonic() - t:.0f} s", flush=True)
        runs = {"frexport": [args.python, "-m", "frexport", "analyze", str(d), "--format", "json"],
                "unpickle only": [args.python, "-c", _PICKLE_ONLY, str(d)]}
        if not args.skip_reference:
            runs["reference"] = [args.python, "-m", "torch.distributed.flight_recorder.fr_trace", str(d),
                                 "--prefix", "nccl_trace_rank_"]
        results = {}
        for tool, cmd in runs.items():
            r = results[tool] = measure(cmd, args.timeout)
            state = f"not done after {args.timeout:.0f} s" if r["timed_out"] else f"rc {r['rc']}"
            print(f"{size:>12} {tool:<14} {r['wall_s']:8.1f} s {r['peak_mb']:8.0f} MB  ({state})", flush=True)
        verdict = ""
        try:
            doc = json.loads(results["frexport"]["stdout"])
            first = doc["findings"][0] if doc["findings"] else None
            named = first is not None and list(first["culprit_ranks"]) == [CULPRIT]
            verdict = (f"{doc['verdict']}; first finding {first['kind']} culprit {first['culprit_ranks']}"
                       f" ({'the injected culprit' if named else 'NOT the injected rank ' + str(CULPRIT)})"
                       if first else doc["verdict"])
        except (ValueError, KeyError, IndexError):
            verdict = "frexport output unreadable: " + results["frexport"]["stderr"][-300:]
        ref = results.get("reference")
        ref_lines = ref["stderr"].count("\n") if ref else 0
        rows.append((size, results, verdict, ref_lines))
    print()
    print(f"{'size':>12} | {'frexport':>18} | {'reference':>24} | {'unpickle only':>18} | ratio (ref/frx)")
    for size, results, verdict, ref_lines in rows:
        f, u, ref = results["frexport"], results["unpickle only"], results.get("reference")
        ref_text = "skipped" if ref is None else (
            f"> {ref['wall_s']:.0f} s (killed)" if ref["timed_out"] else f"{ref['wall_s']:.1f} s {ref['peak_mb']:.0f} MB")
        ratio = "" if ref is None or ref["timed_out"] else f"{ref['wall_s'] / f['wall_s']:.1f}x time, " \
                                                        f"{ref['peak_mb'] / max(f['peak_mb'], 1):.1f}x memory"
        print(f"{size:>12} | {f['wall_s']:6.1f} s {f['peak_mb']:6.0f} MB | {ref_text:>24} | "
              f"{u['wall_s']:6.1f} s {u['peak_mb']:6.0f} MB | {ratio}")
        print(f"{'':>12}   frexport: {verdict}")
        if ref is not None:
            print(f"{'':>12}   reference printed {ref_lines} lines of findings to stderr")
    return 0


if __name__ == "__main__":
    sys.exit(main())
