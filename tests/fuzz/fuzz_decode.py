"""Coverage-guided fuzzing of frexport's decoders with atheris (libFuzzer).

    python tests/fuzz/fuzz_decode.py -runs=1000000 tests/fuzz/corpus

Every input goes through `decode_bytes` (pickle or JSON, sniffed) and, as a pickle, through
`loads_plain`. Allowed outcomes: a RankDump, or a DecodeError. Anything else — another
exception, code running (a marker file appearing), a hang, unbounded memory — is a crash. The
process runs under an address-space limit, as the sidecar's decode workers do, so a memo bomb
must surface as a DecodeError, not an OOM kill. At exit it prints the input count, the slowest
input and the peak RSS.
"""

import os
import resource
import sys
import time

import atheris

with atheris.instrument_imports():
    from frexport.decode.errors import DecodeError
    from frexport.decode.read import decode_bytes
    from frexport.decode.safe_pickle import loads_plain

MARKER = "/tmp/frexport-fuzz-pwned"
LIMIT = int(os.environ.get("FREXPORT_FUZZ_AS_BYTES", str(1 << 30)))
REPORT_EVERY = int(os.environ.get("FREXPORT_FUZZ_REPORT_EVERY", "50000"))
_stats = {"n": 0, "slowest": 0.0}


def test_one(data: bytes) -> None:
    start = time.perf_counter()
    for fn in (lambda: decode_bytes(data, "fuzz"), lambda: loads_plain(data, "fuzz")):
        try:
            fn()
        except DecodeError:
            pass
    took = time.perf_counter() - start
    _stats["n"] += 1
    if took > _stats["slowest"]:
        _stats["slowest"] = took
    if os.path.exists(MARKER):
        raise RuntimeError("an input ran code: the marker file exists")
    if _stats["n"] % REPORT_EVERY == 0:
        _report()


def _report() -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"fuzz_decode: {_stats['n']} inputs, slowest {_stats['slowest'] * 1000:.1f} ms, "
          f"peak RSS {rss:.0f} MB, no crash so far", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if os.path.exists(MARKER):
        os.unlink(MARKER)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, hard))
    atheris.Setup(sys.argv + ["-rss_limit_mb=0", "-timeout=20"], test_one)
    atheris.Fuzz()
