"""The bulk analyzer's fastest path: a pickle's bytes straight to its RankTrace, through the compiled scanner.

`frexport analyze` needs a few integers per entry, its sizes and dtypes, and one call site; unpickling
builds every frame dict, every size list and every field of every entry first. The optional C extension
`_scan` (see _scan.c and docs/performance.md) walks the opcode stream once and hands back the dump's
top level as plain data and its entries as columns: the distinct categorical parts ("kinds": group, op
name, state, sizes, dtypes, stack), and per entry a kind index and its numbers. This module turns those
into the rows fast_trace builds, with the same field rules (fields.py) and the same last step
(fast_trace.trace_from_rows), so the rules are applied once per kind instead of once per entry.

It only ever accepts less: the scanner returns None for anything outside the common 2.10 shape or
outside its opcode allow-list (every opcode safe_pickle refuses is outside it), and so does this
module where a field rule refuses a kind; the caller then takes the pure path (safe_pickle +
fast_trace), which decodes, refuses or explains exactly as before. Without the extension (no
compiler at install time) `available()` is False and nothing changes. A property test checks that
both paths build identical traces.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from frexport.decode.fast_trace import trace_from_rows
from frexport.decode.fields import BadEntry, Caches, dtypes, is_coalesced_marker, sizes
from frexport.decode.normalize import require_dump_fields
from frexport.model.call_site import Frame, is_library_frame
from frexport.model.rank_trace import RankTrace
from frexport.model.signature import OpSignature

try:
    from frexport.decode._scan import scan as _compiled_scan
except ImportError:  # installed without a compiler: the pure path does everything
    _compiled_scan = None

_scan: Callable[[bytes], tuple | None] | None = _compiled_scan


def available() -> bool:
    return _scan is not None


class _Unusual(Exception):
    pass


def trace_from_pickle(data: bytes, source: str, rank: int, dumped_at_ns: int | None,
                      size_bytes: int) -> RankTrace | None:
    """The trace of a pickle dump, or None: not the common shape (or no extension), use the pure path."""
    if _scan is None:
        return None
    cols = _scan(data)
    if cols is None:
        return None
    head, kinds, kind_of, ints, durations, stacks, frames = cols
    require_dump_fields(head, source)  # as trace_from_raw: the same keys, so the same verdict
    try:
        rows, markers = _rows(kinds, kind_of, ints, durations, stacks, frames)
    except (_Unusual, BadEntry):
        return None
    return trace_from_rows(head, rows, markers, source, "pickle", rank, dumped_at_ns, size_bytes)


def _rows(kinds: list, kind_of: bytes, ints: bytes, durations: bytes, stacks: list, frames: list) -> tuple[list, bool]:
    c = Caches()
    frame_info: dict[int, tuple[Frame, bool]] = {}
    sites: dict[int, Frame | None] = {}

    def site_of(stack: int) -> Frame | None:  # fields.user_frame over frame indices
        first = None
        for i in stacks[stack]:
            hit = frame_info.get(i)
            if hit is None:
                raw = frames[i]
                if raw is None:  # not a well-formed frame dict: fields.Caches.frame_of refuses it
                    raise _Unusual
                fr = Frame(*raw)
                hit = frame_info[i] = (fr, is_library_frame(fr))
            if not hit[1]:
                return hit[0]
            if first is None:
                first = hit[0]
        return first

    info = []
    one_sig: dict[tuple, tuple] = {}
    for pg_name, pg_desc, pg_id, is_p2p, pname, state, retired, in_s, out_s, in_d, out_d, stack in kinds:
        parsed = c.profiling_name(pname)
        tensors = (sizes(in_s, c), sizes(out_s, c), dtypes(in_d, c), dtypes(out_d, c))
        key = (parsed[1], *tensors)
        sig = one_sig.get(key)
        if sig is None:
            sig = one_sig[key] = (OpSignature(parsed[1], *tensors),)
        site = None
        if stack >= 0:
            site = sites[stack] if stack in sites else sites.setdefault(stack, site_of(stack))
        info.append((pg_name, pg_desc, pg_id, is_p2p, parsed, sig, site, state, retired))
    nums = array("q")
    nums.frombytes(ints)
    dur = array("d")
    dur.frombytes(durations)
    which = array("i")
    which.frombytes(kind_of)
    # one row per entry, in fast_trace's layout; 0 is "not yet" for the discovered times, NaN no duration
    rows = [(k[0], k[1], k[2], k[3], seq, p2p, k[4], created, None if d != d else d, k[5], k[6], k[7], k[8],
             started or None, completed or None)
            for k, seq, p2p, created, started, completed, d in
            zip(map(info.__getitem__, which), nums[0::5], nums[1::5], nums[2::5], nums[3::5], nums[4::5], dur)]
    markers = any(is_coalesced_marker(op) for _, op, _, _ in c.names.values())
    return rows, markers
