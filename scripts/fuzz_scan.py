"""Fuzz the compiled scanner (frexport/decode/_scan.c) in an AddressSanitizer build.

    .venv/bin/python scripts/fuzz_scan.py --inputs 1000000 [--procs 2] [--seed 0]

Builds the extension with -fsanitize=address,undefined into a scratch directory, then runs chunks of
generated and mutated inputs in child processes under LD_PRELOAD=libasan.so (PYTHONMALLOC=malloc, so
Python's own allocator does not hide overflows from the sanitizer).

Inputs: real-shaped dumps in every protocol 2-5 and in both string layouts
(memoized, unshared), then byte flips, insertions, deletions, truncations, spliced chunks, opcodes and
length fields set to extremes. Each input is scanned; one in --check-every is also decoded by the pure
path (safe_pickle + fast_trace) and the traces compared: the scanner must answer None or the same
trace, and never accept what safe_pickle refuses.

A chunk is reproducible from its seed; a chunk whose process dies (a sanitizer report) is run again
writing each input to --crash-dir first, so the input that killed it is kept. Exit status 1 on any
crash or mismatch. Needs gcc and libasan (Debian: build-essential).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MISMATCH = 3  # a child's exit status when the scanner and the pure path disagreed (sanitizers exit 86)
OPCODES = b"(.N\x88\x89JKM\x8aG\x8cX\x8d]})t\x85\x86\x87aesuhjqr\x94\x95cR\x93b\x81\x92\x90\x8f\x91LIFSTUBCV\x80\x8bg"


def build(out_dir: Path) -> Path:
    """The extension with AddressSanitizer and UBSan, -O1 -g: reports name the line."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    so = out_dir / f"_scan{suffix}"
    cmd = ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=undefined", "-shared", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter",
           f"-I{sysconfig.get_paths()['include']}", str(ROOT / "frexport/decode/_scan.c"), "-o", str(so)]
    subprocess.run(cmd, check=True)
    return so


def _seeds() -> list[bytes]:
    """Valid dumps of the common shape and its variants, small enough to mutate quickly."""
    from tests.support.synth import dump, entry, frame

    out = []
    rng = random.Random(0)
    for n in (0, 1, 3, 8):
        entries = []
        for i in range(n):
            e = entry(i, i + 1, state=rng.choice(["completed", "started", "scheduled"]),
                      op=rng.choice(["all_reduce", "send 0->1", "recv 1<-0", "coalesced", "allreduce_coalesced"]),
                      is_p2p=rng.random() < 0.3, sizes=((rng.randint(0, 9), 4),), duration_ms=rng.choice([None, 1.5]))
            if rng.random() < 0.3:
                e["frames"] = [frame(f"f{k}", f"/torch/x{k}.py", k) for k in range(3)] + e["frames"]
            entries.append(e)
        raw = dump(entries, world=2, groups={"5": ("pp", [0, 1])})
        for proto in (2, 3, 4, 5):
            out.append(pickle.dumps(raw, protocol=proto))
        # unshared: equal strings as fresh objects, so the pickle repeats them instead of BINGET
        fresh = pickle.loads(pickle.dumps(raw))
        for e in fresh["entries"]:
            e["frames"] = [{k: (v + ".")[:-1] if isinstance(v, str) else v for k, v in f.items()} for f in e["frames"]]
        out.append(pickle.dumps(fresh, protocol=2))
    return out


def mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        if not b:
            b = bytearray(rng.choice(seeds))
        r = rng.random()
        i = rng.randrange(len(b))
        if r < 0.3:
            b[i] = rng.randrange(256)
        elif r < 0.45:
            b[i] = rng.choice(OPCODES)
        elif r < 0.55:
            b[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\x00\x00\x00\x00",
                                     b"\x01\x00\x00\x00", b"\x08", b"\xff"])
        elif r < 0.65:
            del b[i:i + rng.randint(1, 16)]
        elif r < 0.75:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif r < 0.82:
            del b[i:]
        elif r < 0.92:  # splice a chunk of another seed (or of itself) in
            other = rng.choice(seeds)
            j = rng.randrange(len(other))
            b[i:i] = other[j:j + rng.randint(1, 64)]
        else:  # duplicate a chunk: repeated containers, memo writes, marks
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 32)]
    return bytes(b)


def _load(so: str):
    spec = importlib.util.spec_from_file_location("_scan", so)
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    return ext


def _keep_mismatch(crash_dir: str | None, seed: int, i: int, data: bytes, what: str) -> None:
    if crash_dir:
        Path(crash_dir, f"mismatch_{seed}_{i}").write_bytes(data)
    print(f"MISMATCH seed {seed} input {i}: {what}", flush=True)


def _sanitizer() -> str:
    return "loaded" if "asan" in os.environ.get("LD_PRELOAD", "") else "MISSING"


JSON_PIECES = [b'"pg_id":', b'"pg_id": ', b'"timeout_ms":', b'"timeout_ms": ', b"}, {", b"},{", b"}]", b"[{",
               b": ", b":", b":-", b": 0", b":1e5", b":1.5", b":-0", b":" + b"9" * 30, b":1e999", b":1.", b":01",
               b"\x00", b"\"", b"\\", b"\\u0001", b" "]
JSON_BYTES = b'{}[]",:\\ 0123456789.eE-+tfn\x00\x01a\xff'


def _dumps(data: bytes, keep_frames: bool) -> tuple[object, object]:
    """(scanned_dump's dump or its DecodeError's reason or None, normalize's of the pure path or its reason)."""
    from frexport.decode.errors import DecodeError
    from frexport.decode.normalize import normalize
    from frexport.decode.safe_pickle import loads_plain
    from frexport.decode.scanned_dump import dump_from_pickle

    try:
        fast: object = dump_from_pickle(data, "x", 0, 1, keep_frames=keep_frames)
    except DecodeError as exc:
        fast = exc.reason
    if fast is None:
        return None, None
    try:
        pure: object = normalize(loads_plain(data, "x"), "x", "pickle", rank=0, dumped_at_ns=1, size_bytes=len(data),
                                 keep_frames=keep_frames)
    except DecodeError as exc:
        pure = exc.reason
    return fast, pure


def run_chunk(so: str, seed: int, count: int, check_every: int, crash_dir: str | None) -> int:
    """In the sanitized child: scan `count` inputs of this seed; returns the number of mismatches."""
    ext = _load(so)
    from frexport.decode import scanned
    from frexport.decode.errors import DecodeError
    from frexport.decode.fast_trace import trace_from_raw
    from frexport.decode.safe_pickle import loads_plain

    scanned._scan = ext.scan
    seeds = _seeds()
    rng = random.Random(seed)
    bad = answered = 0
    for i in range(count):
        data = mutate(rng, rng.choice(seeds), seeds) if rng.random() < 0.97 else rng.choice(seeds)
        if crash_dir:
            Path(crash_dir, "last_input").write_bytes(data)
        if i % check_every:
            answered += ext.scan(data) is not None
            continue
        try:
            fast = scanned.trace_from_pickle(data, "x", 0, 1, 1)
        except DecodeError as exc:
            fast = exc.reason
        if fast is None:
            continue
        try:
            pure = trace_from_raw(loads_plain(data, "x"), "x", "pickle", 0, 1, 1)
        except DecodeError as exc:
            pure = exc.reason
        if fast != pure:
            bad += 1
            _keep_mismatch(crash_dir, seed, i, data, f"scanner {fast!r:.200} pure {pure!r:.200}")
        fast_dump, pure_dump = _dumps(data, keep_frames=i % 2 == 0)  # the sidecar's RankDump path too
        if fast_dump is not None and fast_dump != pure_dump:
            bad += 1
            _keep_mismatch(crash_dir, seed, i, data, f"dump: scanner {fast_dump!r:.200} pure {pure_dump!r:.200}")
    print(f"chunk {seed}: {answered} of {count - count // check_every} inputs scanned to columns "
          f"(the rest: None), sanitizer runtime {_sanitizer()}", flush=True)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=50_000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-every", type=int, default=20, help="compare with the pure path every Nth input")
    ap.add_argument("--crash-dir", default=str(ROOT / "build" / "fuzz_scan"))
    ap.add_argument("--child", nargs=4, metavar=("SO", "SEED", "COUNT", "CRASH_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        so, seed, count, crash_dir = args.child
        return MISMATCH if run_chunk(so, int(seed), int(count), args.check_every, crash_dir or None) else 0

    os.makedirs(args.crash_dir, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fuzz_scan_"))
    so = build(scratch)
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    ubsan = subprocess.run(["gcc", "-print-file-name=libubsan.so"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=f"{asan} {ubsan}", PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:exitcode=86",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86", PYTHONPATH=str(ROOT))
    chunks = [(args.seed * 1_000_003 + k, min(args.chunk, args.inputs - k * args.chunk))
              for k in range((args.inputs + args.chunk - 1) // args.chunk)]
    t0, cpu0 = time.monotonic(), os.times()
    done = crashes = mismatches = 0
    running: list[tuple[subprocess.Popen, int, int]] = []

    def start(seed: int, count: int, crash_dir: str = "") -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--check-every", str(args.check_every),
                                 "--child", str(so), str(seed), str(count), crash_dir],
                                env=env)

    while chunks or running:
        while chunks and len(running) < args.procs:
            seed, count = chunks.pop(0)
            running.append((start(seed, count), seed, count))
        proc, seed, count = running.pop(0)
        rc = proc.wait()
        done += count
        if rc == MISMATCH:
            mismatches += 1
        elif rc != 0:  # a sanitizer report or a signal: run it again keeping each input
            crashes += 1
            keep = os.path.join(args.crash_dir, f"chunk_{seed}")
            os.makedirs(keep, exist_ok=True)
            start(seed, count, keep).wait()
            print(f"CRASH in chunk seed {seed} (rc {rc}): its last input is {keep}/last_input", flush=True)
        print(f"{done} inputs, {time.monotonic() - t0:.0f} s, crashes {crashes}, chunks with mismatches {mismatches}",
              flush=True)
    cpu = os.times()
    print(f"done: {done} inputs in {time.monotonic() - t0:.0f} s wall, "
          f"{cpu.children_user + cpu.children_system - cpu0.children_user - cpu0.children_system:.0f} s CPU "
          f"(sanitized children); crashes {crashes}; chunks with mismatches {mismatches}")
    return 1 if crashes or mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
