"""The one reader of PyTorch profiler traces (Chrome-trace JSON, maybe gzip'd), as ranks answer them.

A trace is untrusted bytes: its compressed and decompressed sizes are capped (a gzip bomb stops at
MAX_JSON_BYTES), it is decoded as JSON only, and only the host-side complete events ("ph": "X" of
HOST_CATEGORIES) with well-typed fields are kept, at most MAX_EVENTS of them.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib

from frexport.model.profile_trace import HOST_CATEGORIES, HostEvent, ProfileTrace

MAX_GZIP_BYTES = 32 << 20
MAX_JSON_BYTES = 256 << 20
MAX_EVENTS = 2_000_000


class TraceError(ValueError):
    """Not a readable profiler trace: the message says why."""


def read_trace(data: bytes) -> ProfileTrace:
    if data[:2] == b"\x1f\x8b":
        if len(data) > MAX_GZIP_BYTES:
            raise TraceError(f"gzip'd trace over {MAX_GZIP_BYTES} bytes")
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(MAX_JSON_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"not a gzip stream: {exc}") from None
    if len(data) > MAX_JSON_BYTES:
        raise TraceError(f"trace over {MAX_JSON_BYTES} bytes of JSON")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"not JSON: {str(exc)[:200]}") from None
    raw = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(raw, list):
        raise TraceError("no traceEvents list: not a Chrome trace")
    events: list[HostEvent] = []
    dropped = 0
    for e in raw:
        ev = _host_event(e)
        if ev is None:
            continue
        if len(events) >= MAX_EVENTS:
            dropped += 1
            continue
        events.append(ev)
    span = (max(e.ts_us + e.dur_us for e in events) - min(e.ts_us for e in events)) if events else 0.0
    return ProfileTrace(tuple(events), span, dropped)


def _host_event(e: object) -> HostEvent | None:
    if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in HOST_CATEGORIES:
        return None
    name, tid, ts, dur = e.get("name"), e.get("tid"), e.get("ts"), e.get("dur")
    if not isinstance(name, str) or not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
        return None
    if not _number(ts) or not _number(dur) or dur < 0:
        return None
    if isinstance(tid, str) and tid.lstrip("-").isdecimal():
        tid = int(tid)
    if not isinstance(tid, int) or isinstance(tid, bool):
        return None
    return HostEvent(tid, e["cat"], name[:500], float(ts), float(dur))


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e18
