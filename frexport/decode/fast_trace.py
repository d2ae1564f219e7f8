"""The bulk analyzer's fast path: a raw dump straight to its RankTrace, without Entry objects.

`frexport analyze` on thousands of ranks spends most of its time turning millions of raw entries
into Entry objects that it then reduces to a few integer columns. For dumps in the common shape
(a dict with every 2.10 entry field of the expected types) this builds the same RankTrace in one
pass, using normalize's own field rules (profiling names, process groups, shapes, frames, coalesced
groups) — there is still one parser. Anything unusual (older layouts, a malformed entry, odd
types) returns None and the caller takes the normal path; a property test checks that both paths
give identical traces.
"""

from __future__ import annotations

from frexport.decode.normalize import (
    MAX_ENTRIES,
    MAX_FRAMES,
    _BadEntry,
    _Caches,
    _call_site,
    _get_v210,
    _process_group,
    _tensors,
    is_coalesced_marker,
    normalize,
    parse_profiling_name,
)
from frexport.model.rank_trace import _COMPLETION_BACKENDS, RankTrace, add_rows
from frexport.model.signature import OpSignature


class _Unusual(Exception):
    pass


def trace_from_raw(raw: object, source: str, fmt: str, rank: int, dumped_at_ns: int | None,
                   size_bytes: int) -> RankTrace | None:
    if not isinstance(raw, dict):
        return None
    entries_raw = raw.get("entries")
    if entries_raw is None:
        entries_raw = []
    if type(entries_raw) is not list or len(entries_raw) > MAX_ENTRIES:
        return None
    try:
        rows, markers = _rows(entries_raw)
    except (_Unusual, _BadEntry, KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
        return None
    head = normalize({**raw, "entries": []}, source, fmt, rank=rank, dumped_at_ns=dumped_at_ns,
                     size_bytes=size_bytes)
    sample = rows[:64] + rows[-64:]
    tracks = bool({r[6][0] for r in sample} & _COMPLETION_BACKENDS) or any(r[12] != "scheduled" for r in sample)
    created = [r[8] for r in sample if r[8]]
    trace = RankTrace(
        rank=rank, source=source, format=fmt, version_text=head.version_text, notes=head.notes,
        dumped_at_ns=dumped_at_ns, n_entries=len(rows), has_frames=any(r[11] is not None for r in sample),
        tracks_completion=tracks, pg_config=head.pg_config, pg_status=head.pg_status,
        first_created_ns=min(created, default=None), last_created_ns=max(created, default=None))
    if markers:
        _complete_coalesced(rows)
    add_rows(trace, rows, tracks)
    return trace


# Rows as rank_trace.add_rows takes them.
def _rows(entries_raw: list) -> tuple[list, bool]:
    c = _Caches()
    rows = []
    append = rows.append
    markers = False
    get = _get_v210
    names = c.names
    pgs = c.pg
    frames_cache = c.frame
    one_sig: dict[tuple, tuple] = {}
    for e in entries_raw:
        if type(e) is not dict:
            raise _Unusual
        (record_id, pg_id, pg_raw, seq, p2p_seq, op_id, pname, created, state, is_p2p, in_sizes, out_sizes,
         in_dtypes, out_dtypes, retired, timeout, started, completed, thread_id, thread_name) = get(e)
        if not (type(record_id) is type(pg_id) is type(seq) is type(p2p_seq) is type(op_id) is type(created) is int):
            raise _Unusual
        if type(pname) is not str or type(state) is not str or type(is_p2p) is not bool:
            raise _Unusual
        if type(retired) is not bool or type(thread_name) is not str or type(thread_id) is not str:
            raise _Unusual
        if timeout is not None and type(timeout) is not int:
            raise _Unusual
        parsed = names.get(pname)
        if parsed is None:
            if len(pname) > 4096:
                raise _Unusual
            parsed = names[pname] = parse_profiling_name(pname)
            markers = markers or is_coalesced_marker(parsed[1])
        op = parsed[1]
        pg = pgs.get(pg_raw) if type(pg_raw) is tuple or type(pg_raw) is str else None
        if pg is None:
            pg = _process_group(pg_raw)
            if type(pg_raw) is tuple or type(pg_raw) is str:
                pgs[pg_raw] = pg
        duration = e.get("duration_ms")
        if duration is not None and type(duration) is not float:
            duration = float(duration) if type(duration) is int else None
        if duration is not None and not (duration >= 0):
            duration = None
        frames_raw = e.get("frames")
        site = None
        if frames_raw:
            if type(frames_raw) is not list and type(frames_raw) is not tuple:
                raise _Unusual
            if len(frames_raw) > MAX_FRAMES:
                frames_raw = frames_raw[:MAX_FRAMES]
            first = frames_cache.get(id(frames_raw[0]))
            site = first[0] if first is not None and not first[1] else _call_site(frames_raw, c)
        tensors = _tensors((pname, pg), in_sizes, out_sizes, in_dtypes, out_dtypes, c)
        key = (op, id(tensors[0]), id(tensors[1]), id(tensors[2]), id(tensors[3]))
        sig = one_sig.get(key)
        if sig is None:
            sig = one_sig[key] = (OpSignature(op, *tensors),)
        append((pg[0], pg[1], pg_id, is_p2p, seq, p2p_seq, parsed, None, created, duration, sig, site, state,
                retired, started if type(started) is int and started > 0 else None,
                completed if type(completed) is int and completed > 0 else None))
    return rows, markers


def _complete_coalesced(rows: list) -> None:
    """normalize.complete_coalesced, on rows."""
    closing: dict[tuple, tuple] = {}
    for i in range(len(rows) - 1, -1, -1):
        r = rows[i]
        key = (r[0], r[3], r[5] if r[3] else r[4])
        if is_coalesced_marker(r[6][1]):
            closing[key] = r
        elif not (r[12] == "completed" or r[13]):
            end = closing.get(key)
            if end is not None and (end[12] == "completed" or end[13]):
                rows[i] = r[:12] + (end[12], end[13], end[14], end[15])
