"""Coverage-guided fuzzing of the sidecar's live paths with atheris (issue 18):

    python tests/fuzz/fuzz_live.py tail     -runs=100000 [CORPUS]   # decode/json_decode.py
    python tests/fuzz/fuzz_live.py http     -runs=20000             # sources/http_client.py vs a fuzzing peer
    python tests/fuzz/fuzz_live.py metrics  -runs=20000             # rendering of fuzzed snapshots

- tail: `parse_tail(body, since)` returns a Tail or None, never raises;
- http: a unix-socket peer answers each request with the input's bytes (then closes, or holds the
  connection open): `request` returns a Response or raises PeerError, within its deadline;
- metrics: a snapshot built from the input (lone surrogates, huge and empty names, values outside
  64 bits, many ops) is ingested into a LiveState and the whole registry is rendered: no exception,
  client_python's parser reads it back, no series twice. Every `FREXPORT_FUZZ_KEEP`th exposition is
  written under `FREXPORT_FUZZ_OUT` for promtool (tests/e2e/test_fuzz.py checks them all).

At exit each prints its input count and slowest input, as fuzz_decode.py does.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time

import atheris

with atheris.instrument_imports():
    from frexport.decode.json_decode import parse_tail
    from frexport.sources.http_client import PeerError, Target, request

REPORT_EVERY = int(os.environ.get("FREXPORT_FUZZ_REPORT_EVERY", "10000"))
KEEP_EVERY = int(os.environ.get("FREXPORT_FUZZ_KEEP", "500"))
OUT = os.environ.get("FREXPORT_FUZZ_OUT")
_stats = {"n": 0, "slowest": 0.0}


def _count(start: float, name: str) -> None:
    took = time.perf_counter() - start
    _stats["n"] += 1
    _stats["slowest"] = max(_stats["slowest"], took)
    if _stats["n"] % REPORT_EVERY == 0:
        print(f"fuzz_live {name}: {_stats['n']} inputs, slowest {_stats['slowest'] * 1000:.1f} ms, no crash so far",
              file=sys.stderr, flush=True)


# --- the JSON tail parser -------------------------------------------------------------------------

def one_tail(data: bytes) -> None:
    start = time.perf_counter()
    fdp = atheris.FuzzedDataProvider(data)
    since = fdp.ConsumeIntInRange(0, 1 << 20)
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    tail = parse_tail(body, since)
    assert tail is None or (isinstance(tail.meta, dict) and tail.entries and tail.entries[0]["record_id"] == since)
    _count(start, "tail")


# --- the HTTP client against a fuzzing peer ---------------------------------------------------------

class _Peer:
    """Answers the next request with `answer` and closes, or keeps the socket open (`hold`)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="frx-fuzz-")
        self.path = os.path.join(self.dir, "rank-0.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.answer, self.hold = b"", False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            try:
                conn.recv(65536)
                conn.sendall(self.answer)
                if self.hold:
                    time.sleep(0.15)  # past the client's deadline below
            except OSError:
                pass
            finally:
                conn.close()


_PEER: _Peer | None = None


def one_http(data: bytes) -> None:
    global _PEER
    if _PEER is None:
        _PEER = _Peer()
    fdp = atheris.FuzzedDataProvider(data)
    _PEER.hold = fdp.ConsumeIntInRange(0, 7) == 0  # rarely: each one costs the whole deadline
    max_body = fdp.ConsumeIntInRange(0, 1 << 16)
    # a valid start most of the time, so the fuzzer spends its inputs on headers, chunks and bodies
    head = fdp.PickValueInList([b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
                                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n",
                                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n"])
    _PEER.answer = head + fdp.ConsumeBytes(fdp.remaining_bytes())
    start = time.perf_counter()
    try:
        resp = request(Target(unix_path=_PEER.path), "POST", "/handler/fr_trace_json", timeout=0.1,
                       max_body=max_body)
        assert isinstance(resp.status, int) and len(resp.body) <= max_body
    except PeerError:
        pass
    assert time.perf_counter() - start < 1.0, "past the exchange's deadline"
    _count(start, "http")


# --- metrics of fuzzed snapshots --------------------------------------------------------------------

def _text(fdp, most: int) -> str:
    """Any text: lone surrogates included (JSON can carry them), now and then very long."""
    if fdp.ConsumeIntInRange(0, 15) == 0:
        return fdp.ConsumeUnicode(4) * fdp.ConsumeIntInRange(0, 5000)
    return fdp.ConsumeUnicode(most)


def _number(fdp) -> int | float | None:
    kind = fdp.ConsumeIntInRange(0, 5)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeInt(64)  # any size: outside 64 bits too
    if kind == 2:
        return fdp.ConsumeFloat()  # inf, nan, huge
    return fdp.ConsumeIntInRange(0, 1 << 40)


_STATE_PARTS = None


def one_metrics(data: bytes) -> None:
    global _STATE_PARTS
    if _STATE_PARTS is None:
        _STATE_PARTS = _metrics_parts()
    normalize, RankDump, LiveState, HealthRegistry, registry_of, generate_latest, parse, DecodeError = _STATE_PARTS
    start = time.perf_counter()
    fdp = atheris.FuzzedDataProvider(data)
    state, health = LiveState(max_label_sets=50), HealthRegistry()
    for rank in range(fdp.ConsumeIntInRange(1, 3)):
        entries = []
        for i in range(fdp.ConsumeIntInRange(0, 30)):
            op = _text(fdp, 12)
            entries.append({
                "record_id": i if fdp.ConsumeIntInRange(0, 7) else _number(fdp), "pg_id": 0,
                "process_group": [_text(fdp, 6), _text(fdp, 10)], "collective_seq_id": _number(fdp),
                "p2p_seq_id": 0, "op_id": i, "profiling_name": f"nccl:{op}", "time_created_ns": _number(fdp),
                "state": fdp.PickValueInList(["scheduled", "started", "completed", _text(fdp, 5)]),
                "retired": fdp.ConsumeBool(), "timeout_ms": _number(fdp), "duration_ms": _number(fdp),
                "time_discovered_started_ns": _number(fdp), "time_discovered_completed_ns": _number(fdp),
                "input_sizes": [], "output_sizes": [], "input_dtypes": [], "output_dtypes": [], "frames": [],
                "is_p2p": False})
        raw = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries}
        try:
            dump = normalize(raw, "fuzz", "json", rank=rank, dumped_at_ns=1, keep_frames=False)
        except DecodeError:
            continue
        state.ingest(dump, _text(fdp, 8), fdp.ConsumeIntInRange(0, 1 << 62))
        health.record(_text(fdp, 20), fdp.ConsumeBool(), fdp.ConsumeFloat(), fdp.ConsumeIntInRange(0, 1 << 62),
                      reason=None if fdp.ConsumeBool() else _text(fdp, 6))
    state.expire(fdp.ConsumeIntInRange(0, 1 << 62), 600 * 10**9)
    body = generate_latest(registry_of(state, health))
    series = [(s.name, tuple(sorted(s.labels.items()))) for f in parse(body.decode("utf-8")) for s in f.samples]
    assert len(series) == len(set(series)), "a series twice"
    assert len(body) < 8 << 20, len(body)
    if OUT and _stats["n"] % KEEP_EVERY == 0:
        with open(os.path.join(OUT, f"exposition-{_stats['n']}.txt"), "wb") as f:
            f.write(body)
    _count(start, "metrics")


def _metrics_parts():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from frexport.config import Analysis
    from frexport.decode.errors import DecodeError
    from frexport.decode.normalize import normalize
    from frexport.export.prometheus import sidecar_registry
    from frexport.live.diagnosis import LiveAnalysis
    from frexport.live.state import LiveState
    from frexport.model.dump import RankDump
    from frexport.sources.health import HealthRegistry

    def registry_of(state, health):
        return sidecar_registry(state, health, LiveAnalysis(Analysis()), process=False)

    return (normalize, RankDump, LiveState, HealthRegistry, registry_of, generate_latest,
            text_string_to_metric_families, DecodeError)


TARGETS = {"tail": one_tail, "http": one_http, "metrics": one_metrics}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(TARGETS)}}} [libFuzzer options] [CORPUS]")
    target = TARGETS[sys.argv.pop(1)]
    if target is one_metrics:  # instrument what renders, too (imported lazily above)
        with atheris.instrument_imports():
            _STATE_PARTS = _metrics_parts()
    atheris.Setup(sys.argv + ["-rss_limit_mb=0", "-timeout=20"], target)
    atheris.Fuzz()
