"""Benchmark `frexport analyze` against PyTorch's analyzer and a plain-unpickling floor, on the same dumps.

    python benchmarks/bench_analyze.py --sizes 64x2000,1024x2000 [--fault missing_rank] [--timeout 600]
    python benchmarks/bench_analyze.py --sizes 4096x2000 --skip-reference --workers 2

For each size (RANKSxENTRIES) and fault it generates - or reuses, cached under benchmarks/out/ with a
fingerprint of the generator and its parameters - a dump directory made by gen_dumps.py, then runs,
one after the other, each as its own process tree:
  frexport    <python> -m frexport analyze DIR --format json
  reference   <python> -m torch.distributed.flight_recorder.fr_trace DIR --prefix nccl_trace_rank_
  floors      <python> -c "<pickle.loads (json.loads) of every file>" in 1 and in 2 processes
For each it reports wall time, the peak resident memory of the WHOLE process tree (VmRSS of the
process and all its descendants, summed, sampled every 50 ms from /proc; the max of the sums) and
ru_maxrss from wait4 (the largest single process, for reference). A run past --timeout is killed
with its whole tree and reported as "not done after N s".

Then a table: size, tool, wall s, peak tree RSS MB, ru_maxrss MB, exit status, reference/frexport
ratios; and the verdicts: whether frexport's JSON ({"verdict", "findings": [{"kind",
"culprit_ranks", ...}]}) names the injected culprit (or, for --fault none, reports no finding), and
what the reference printed (its messages, the ranks it blames, or how it crashed).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import gen_dumps  # noqa: E402

from tests.support.proctree import descendants  # noqa: E402

PREFIX = gen_dumps.DEFAULT_PREFIX
SAMPLE_S = 0.05

# The floor: only decode every file with the standard library (pickle.loads or json.loads of its
# bytes), in PROCS processes (forked; each takes every PROCS-th file). No analysis at all.
_LOADS_ONLY = r"""
import json, os, pickle, sys
d, prefix, procs = sys.argv[1], sys.argv[2], int(sys.argv[3])
loads = json.loads if sys.argv[4] == "json" else pickle.loads
names = sorted(n for n in os.listdir(d) if n.startswith(prefix))
def run(part):
    n = entries = 0
    for name in part:
        with open(os.path.join(d, name), "rb") as f:
            dump = loads(f.read())
        n += 1
        entries += len(dump.get("entries", ()))
    return n, entries
pids = []
for i in range(1, procs):
    pid = os.fork()
    if pid == 0:
        run(names[i::procs])
        os._exit(0)
    pids.append(pid)
n, entries = run(names[0::procs])
for pid in pids:
    os.waitpid(pid, 0)
print(f"{len(names)} files ({procs} processes), {entries * procs} entries (approx.)" if procs > 1
      else f"{n} files, {entries} entries")
"""

# ---------------------------------------------------------------------------------------------
# process-tree memory


def tree_pids(pid: int) -> list[int]:
    """pid and all its descendants (alive now)."""
    return [pid] + descendants(pid)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0  # gone, or a zombie (no VmRSS line)


def tree_rss_kb(pid: int) -> int:
    return sum(_rss_kb(p) for p in tree_pids(pid))


def kill_tree(pid: int) -> None:
    pids = tree_pids(pid)
    for p in pids:  # stop first so nothing forks new children while we kill
        try:
            os.kill(p, signal.SIGSTOP)
        except OSError:
            pass
    for p in tree_pids(pid) + pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)  # the session/group we started it in
    except OSError:
        pass


def measure(cmd: list[str], timeout: float, cwd: str | None = None, env: dict | None = None) -> dict:
    """Run cmd; wall time, peak RSS of its process tree, ru_maxrss, exit status, output files."""
    tmp = tempfile.mkdtemp(prefix="bench_analyze_")
    out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                start_new_session=True)
    peak_kb = 0
    samples = 0
    timed_out = False
    status = None
    rusage = None
    while True:
        try:
            wpid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            break
        if wpid:
            break
        peak_kb = max(peak_kb, tree_rss_kb(proc.pid))
        samples += 1
        if time.monotonic() - start > timeout:
            timed_out = True
            kill_tree(proc.pid)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(SAMPLE_S)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status) if status is not None else None
    # descendants that outlived the main process (daemonized workers) would be leaked: kill them
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    cpu = (rusage.ru_utime + rusage.ru_stime) if rusage else 0.0
    return {"cmd": cmd, "wall_s": wall, "cpu_s": cpu, "peak_tree_mb": peak_kb / 1024, "samples": samples,
            "ru_maxrss_mb": (rusage.ru_maxrss / 1024) if rusage else 0.0, "rc": proc.returncode,
            "timed_out": timed_out, "stdout_path": out_path, "stderr_path": err_path, "tmp": tmp}


def _read(path: str, limit: int | None = None) -> str:
    with open(path, "rb") as f:
        if limit is not None:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - limit))
        return f.read().decode(errors="replace")


# ---------------------------------------------------------------------------------------------
# dumps


def _fingerprint(params: dict) -> str:
    """Hash of the generator's code (comments and docstrings ignored) and of the parameters."""
    tree = ast.parse(Path(gen_dumps.__file__).read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    h = hashlib.sha256(ast.dump(tree).encode())
    h.update(json.dumps(params, sort_keys=True).encode())
    return h.hexdigest()[:16]


def dump_dir(out_root: Path, ranks: int, entries: int, fault: str, args: argparse.Namespace) -> tuple[Path, dict]:
    params = {"ranks": ranks, "entries": entries, "fault": fault, "tp": args.tp, "pp": args.pp, "seed": args.seed,
              "p2p": args.p2p, "record_jitter": args.record_jitter, "culprit": args.culprit,
              "no_frames": args.no_frames, "extra_frames": args.extra_frames, "unshared": args.unshared,
              "format": args.format}
    tag = f"d{ranks}x{entries}-{fault}-tp{args.tp}pp{args.pp}-s{args.seed}"
    if args.format != "pickle":
        tag += f"-{args.format}"
    if args.no_frames:
        tag += "-noframes"
    if args.extra_frames:
        tag += f"-xf{args.extra_frames}"
    if args.unshared:
        tag += "-unshared"
    if args.p2p != "batched":
        tag += f"-{args.p2p}"
    if args.record_jitter != 12:
        tag += f"-j{args.record_jitter}"
    if args.culprit is not None:
        tag += f"-c{args.culprit}"
    d = out_root / tag
    meta_path = out_root / (tag + ".json")
    fp = _fingerprint(params)
    if meta_path.exists() and d.is_dir():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        names = set(os.listdir(d))
        if meta.get("fingerprint") == fp and all(f"{PREFIX}{r}" in names for r in range(ranks)) \
                and len(names) == ranks:
            print(f"reusing {d} ({meta['bytes'] / 1e6:.0f} MB, generated in {meta['seconds']:.0f} s)", flush=True)
            return d, meta
    if d.exists():
        shutil.rmtree(d)
    print(f"generating {d} ...", flush=True)
    # in a child process: a fork inherits the parent's peak RSS into ru_maxrss, so this process must
    # stay small for the ru_maxrss figures of the measured tools to mean anything
    cmd = [sys.executable, str(HERE / "gen_dumps.py"), "--ranks", str(ranks), "--entries", str(entries),
           "--out", str(d), "--tp", str(args.tp), "--pp", str(args.pp), "--fault", fault, "--seed", str(args.seed),
           "--p2p", args.p2p, "--record-jitter", str(args.record_jitter), "--meta-out", str(meta_path)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    if args.culprit is not None:
        cmd += ["--culprit", str(args.culprit)]
    cmd += ["--format", args.format, "--extra-frames", str(args.extra_frames)]
    cmd += ["--no-frames"] if args.no_frames else []
    cmd += ["--unshared"] if args.unshared else []
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    meta = json.loads(meta_path.read_text())
    meta["fingerprint"] = fp
    meta_path.write_text(json.dumps(meta))
    print(f"generated {d}: {meta['bytes'] / 1e6:.0f} MB in {meta['seconds']:.0f} s "
          f"(culprit {meta.get('culprit')})", flush=True)
    return d, meta


# ---------------------------------------------------------------------------------------------
# verdicts


def frexport_verdict(run: dict, meta: dict) -> str:
    if run["timed_out"]:
        return "frexport: not done"
    text = _read(run["stdout_path"])
    try:
        doc = json.loads(text)
        verdict, findings = doc["verdict"], doc["findings"]
    except (ValueError, KeyError, TypeError):
        tail = _read(run["stderr_path"], 600).strip().replace("\n", " | ")
        return f"frexport: failed (rc {run['rc']}, stderr tail: {tail[-400:] or '-'})"
    culprit = meta.get("culprit")
    kinds = ", ".join(f"{f.get('kind')} culprit {f.get('culprit_ranks')}" for f in findings[:3])
    more = f" (+{len(findings) - 3} more)" if len(findings) > 3 else ""
    if culprit is None:
        if not findings:
            judged = "OK, healthy"
        elif verdict == "inconclusive" and not any(f.get("certain", True) for f in findings):
            # suspects only: collectives every member issued and none finished, which one look cannot
            # tell from in flight (a running job dumped mid-collective); not a claim of a fault
            judged = "INCONCLUSIVE on a healthy job (suspects only: one look cannot tell them from in flight)"
        else:
            judged = "FALSE POSITIVE on a healthy job"
        return (f"frexport: verdict {verdict}, {len(findings)} finding(s){': ' + kinds + more if findings else ''}"
                f" -> {judged}")
    named = [i for i, f in enumerate(findings) if culprit in (f.get("culprit_ranks") or [])]
    exact = [i for i in named if list(findings[i].get("culprit_ranks") or []) == [culprit]]
    if exact and exact[0] == 0:
        result = f"names the injected culprit {culprit} in its first finding"
    elif exact:
        result = f"names the injected culprit {culprit} alone in finding #{exact[0] + 1}"
    elif named:
        result = f"lists the culprit {culprit} among others in finding #{named[0] + 1}"
    else:
        result = f"does NOT name the injected culprit {culprit}"
    return f"frexport: verdict {verdict}, {len(findings)} finding(s): {kinds}{more} -> {result}"


_REF_PATTERNS = {
    "not all ranks joining": re.compile(r"^Not all ranks joining collective"),
    "has errors": re.compile(r"^Collective sequence number: \d+ has errors"),
    "no errors found": re.compile(r"^No errors found for this collective entry"),
    "cannot decide": re.compile(r"^We cannot decide what's wrong"),
    "too many mismatches (abort)": re.compile(r"^Too many mismatches"),
    "no coalesced end": re.compile(r"does not have a coalesced end"),
    "empty op list": re.compile(r"has an empty op list"),
}


def reference_verdict(run: dict, meta: dict) -> str:
    if run["timed_out"]:
        return "reference: not done"
    size = os.path.getsize(run["stderr_path"])
    text = _read(run["stderr_path"], 64 * 1024 * 1024)
    lines = text.splitlines()
    counts = {k: sum(1 for ln in lines if p.search(ln)) for k, p in _REF_PATTERNS.items()}
    blamed: set[int] = set()
    for m in re.finditer(r"Culprit rank (\d+)", text):
        blamed.add(int(m.group(1)))
    missing: set[int] = set()
    for m in re.finditer(r"^missing ranks: \{([\d, ]*)\}", text, re.M):
        missing.update(int(x) for x in m.group(1).split(",") if x.strip())
    parts = [f"{v} x {k}" for k, v in counts.items() if v]
    crash = ""
    if "Traceback (most recent call last)" in text:
        last = [ln for ln in lines if ln.strip()][-1]
        crash = f"; CRASHED: {last.strip()[:200]}"
    if not parts and not crash and run["rc"] != 0:
        tail = text.strip().replace("\n", " | ")[-300:]
        return f"reference: failed (rc {run['rc']}, stderr tail: {tail or '-'})"
    culprit = meta.get("culprit")
    if culprit is None:
        clean = not parts and not crash and run["rc"] == 0
        judged = "no finding (OK)" if clean else "reports problems on a healthy job"
    else:
        first = next((ln for ln in lines if ln.startswith(("Not all ranks joining", "Collective sequence number"))), "")
        judged = (f"culprit {culprit} blamed" if culprit in blamed else
                  f"culprit {culprit} among missing ranks" if culprit in missing else
                  f"culprit {culprit} NOT named")
        if first:
            judged += f"; first message: {first.strip()[:90]!r}"
    return (f"reference: rc {run['rc']}, {size / 1e6:.1f} MB of stderr, {', '.join(parts) or 'no messages'}; "
            f"blamed {sorted(blamed)[:8]}{'...' if len(blamed) > 8 else ''}; {judged}{crash}")


# ---------------------------------------------------------------------------------------------


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _ratios(results: dict) -> list[str]:
    """frexport against each floor and the reference against frexport, wall and CPU, from this run."""
    frx = results.get("frexport")
    if not frx or frx["timed_out"] or frx["rc"] not in (0, 1):
        return []
    out = []
    for tool, r in results.items():
        if tool == "frexport" or r["timed_out"] or r["rc"] != 0 and tool != "reference":
            continue
        if tool == "reference":
            out.append(f"ratio reference/frexport: {r['wall_s'] / max(frx['wall_s'], 1e-9):.2f}x wall, "
                       f"{r['cpu_s'] / max(frx['cpu_s'], 1e-9):.2f}x cpu")
        else:
            out.append(f"ratio frexport/{tool}: {frx['wall_s'] / max(r['wall_s'], 1e-9):.2f}x wall, "
                       f"{frx['cpu_s'] / max(r['cpu_s'], 1e-9):.2f}x cpu")
    return out


def _shape_args(args: argparse.Namespace, spec: str, ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The generator's options for one --shapes item: '+'-joined tokens over the command line's."""
    out = argparse.Namespace(**vars(args))
    for token in spec.split("+"):
        if token == "default":
            continue
        elif token == "unshared":
            out.unshared = True
        elif token == "noframes":
            out.no_frames = True
        elif token == "json":
            out.format, out.skip_reference = "json", True
        elif token == "single":
            out.p2p = "single"
        elif re.fullmatch(r"pp\d+", token):
            out.pp = int(token[2:])
        elif re.fullmatch(r"xf\d+", token):
            out.extra_frames = int(token[2:])
        else:
            ap.error(f"unknown shape token {token!r} in --shapes (default, ppN, xfN, unshared, noframes, single, json)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64x2000,1024x2000", help="RANKSxENTRIES, comma separated")
    ap.add_argument("--fault", default="missing_rank",
                    help="fault(s) to inject, comma separated: none, missing_rank, desync, size_mismatch")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, seconds (default 600)")
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python")
                    if (REPO / ".venv" / "bin" / "python").exists() else sys.executable,
                    help="interpreter running the three tools (default: the repo's .venv)")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-frexport", action="store_true")
    ap.add_argument("--skip-unpickle", action="store_true", help="skip the floors (plain pickle/json.loads)")
    ap.add_argument("--frexport-args", default="", help="extra arguments for frexport analyze, e.g. '--workers 2'")
    ap.add_argument("--out", default=str(HERE / "out"), help="dump cache (git-ignored)")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this JSON file")
    g = ap.add_argument_group("dump generation (gen_dumps.py)")
    g.add_argument("--tp", type=int, default=8)
    g.add_argument("--pp", type=int, default=4)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--culprit", type=int, default=None)
    g.add_argument("--p2p", choices=("batched", "single"), default="batched")
    g.add_argument("--record-jitter", type=int, default=12)
    g.add_argument("--workers", type=int, default=None, help="generator processes (default: all cores)")
    g.add_argument("--format", choices=("pickle", "json"), default="pickle",
                   help="json: JSON dumps; the floor is json.loads, the reference is skipped (it reads pickles)")
    g.add_argument("--no-frames", action="store_true")
    g.add_argument("--extra-frames", type=int, default=0)
    g.add_argument("--unshared", action="store_true", help="no memoized strings or frames in the pickles")
    g.add_argument("--shapes", default=None,
                   help="several dump shapes in one run, comma separated; each '+'-joined tokens: default, ppN "
                        "(pipeline depth), xfN (N extra frames per entry), unshared (no memoized strings or "
                        "frames), noframes, single (lone p2p), json. E.g. default,pp1+xf20,unshared+pp8,json")
    args = ap.parse_args(argv)
    if args.format == "json":
        args.skip_reference = True

    faults = [f.strip() for f in args.fault.split(",") if f.strip()]
    for f in faults:
        if f not in gen_dumps.FAULTS:
            ap.error(f"unknown fault {f!r}; choose from {', '.join(gen_dumps.FAULTS)}")
    sizes = []
    for s in args.sizes.split(","):
        try:
            r, e = (int(x) for x in s.lower().strip().split("x"))
        except ValueError:
            ap.error(f"bad size {s!r}: want RANKSxENTRIES, e.g. 1024x2000")
        sizes.append((r, e))
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    print(f"python: {args.python}; {os.cpu_count()} cores; timeout {args.timeout:.0f} s per run; "
          f"load average {_load()}", flush=True)
    shapes = [(spec, _shape_args(args, spec, ap)) for spec in args.shapes.split(",")] if args.shapes else [("", args)]
    rows = []
    for ranks, entries in sizes:
        for fault, (spec, args) in ((f, sh) for sh in shapes for f in faults):
            d, meta = dump_dir(out_root, ranks, entries, fault, args)
            size = f"{ranks}x{entries}" + (f" {spec}" if spec else "")
            runs: dict[str, list[str]] = {}
            if not args.skip_frexport:
                runs["frexport"] = [args.python, "-m", "frexport", "analyze", str(d), "--format", "json",
                                    *args.frexport_args.split()]
            if not args.skip_reference:
                runs["reference"] = [args.python, "-m", "torch.distributed.flight_recorder.fr_trace", str(d),
                                     "--prefix", PREFIX]
            if not args.skip_unpickle:
                floor = "json.loads" if args.format == "json" else "unpickle"
                runs[f"{floor} 1p"] = [args.python, "-c", _LOADS_ONLY, str(d), PREFIX, "1", args.format]
                runs[f"{floor} 2p"] = [args.python, "-c", _LOADS_ONLY, str(d), PREFIX, "2", args.format]
            results = {}
            for tool, cmd in runs.items():
                r = results[tool] = measure(cmd, args.timeout, cwd=str(REPO), env=env)
                err = "" if r["timed_out"] else _read(r["stderr_path"], 64 * 1024 * 1024)
                r["crashed"] = "Traceback (most recent call last)" in err
                r["aborted"] = tool == "reference" and "Too many mismatches for process_group" in err
                state = f"not done after {args.timeout:.0f} s" if r["timed_out"] else f"rc {r['rc']}"
                print(f"{size:>10} {fault:<13} {tool:<14} {r['wall_s']:8.1f} s  {r['cpu_s']:8.1f} s cpu  "
                      f"{r['peak_tree_mb']:8.0f} MB tree  "
                      f"{r['ru_maxrss_mb']:8.0f} MB ru_maxrss  ({state})", flush=True)
            verdicts = []
            if "frexport" in results:
                verdicts.append(frexport_verdict(results["frexport"], meta))
            if "reference" in results:
                verdicts.append(reference_verdict(results["reference"], meta))
            for tool, r in results.items():
                if tool.endswith(" 1p") and r["rc"] == 0:
                    verdicts.append(f"{tool}: " + _read(r["stdout_path"]).strip())
            verdicts.extend(_ratios(results))
            for v in verdicts:
                print(f"{'':>10} {v}", flush=True)
            verdicts.append(f"load average after: {_load()}")
            rows.append({"size": size, "fault": fault, "dir": str(d), "dump_mb": meta["bytes"] / 1e6,
                         "culprit": meta.get("culprit"), "verdicts": verdicts,
                         "results": {t: {k: v for k, v in r.items() if k not in ("tmp",)} for t, r in results.items()}})
            for r in results.values():
                shutil.rmtree(r["tmp"], ignore_errors=True)

    print()
    print(f"{'size':>10} | {'fault':<13} | {'tool':<14} | {'wall s':>8} | {'cpu s':>7} | {'peak RSS MB (tree)':>18} | "
          f"{'ru_maxrss MB':>12} | {'status':<20} | ratio reference/frexport")
    print("-" * 120)
    for row in rows:
        res = row["results"]
        frx = res.get("frexport")
        for tool, r in res.items():
            status = f"not done after {args.timeout:.0f} s" if r["timed_out"] else f"rc {r['rc']}"
            if r.get("crashed"):
                status += ", crashed"
            elif r.get("aborted"):
                status += ", aborted"
            wall = f">{r['wall_s']:.0f}" if r["timed_out"] else f"{r['wall_s']:.1f}"
            ratio = ""
            if tool == "reference" and frx and not frx["timed_out"] and frx["rc"] in (0, 1):
                t = f"{'>' if r['timed_out'] else ''}{r['wall_s'] / max(frx['wall_s'], 1e-9):.1f}x time"
                m = f"{r['peak_tree_mb'] / max(frx['peak_tree_mb'], 1e-9):.1f}x memory"
                unfinished = r.get("crashed") or r.get("aborted") or (r["rc"] != 0 and not r["timed_out"])
                ratio = f"{t}, {m}" + (" (reference did not finish its analysis)" if unfinished else "")
            print(f"{row['size']:>10} | {row['fault']:<13} | {tool:<14} | {wall:>8} | {r['cpu_s']:>7.1f} | "
                  f"{r['peak_tree_mb']:>18.0f} | "
                  f"{r['ru_maxrss_mb']:>12.0f} | {status:<20} | {ratio}")
        for v in row["verdicts"]:
            print(f"{'':>10}   {v}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
