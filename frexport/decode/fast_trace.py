"""The bulk analyzer's fast path: a raw dump straight to its RankTrace, without Entry objects.

`frexport analyze` on thousands of ranks spends most of its time turning millions of raw entries
into Entry objects that it then reduces to a few integer columns. For dumps in the common shape
(a dict with every 2.10 entry field of the expected types) this builds the same RankTrace in one
pass, with the field rules of fields.py that normalize uses too (profiling names, process groups,
shapes, frames, times, coalesced groups): there is still one parser. Anything unusual (older
layouts, a malformed entry, odd types) returns None and the caller takes the normal path; a
property test checks that both paths give identical traces.
"""

from __future__ import annotations

from frexport.decode.fields import (
    INT64_MAX,
    INT64_MIN,
    MAX_DURATION_MS,
    MAX_ENTRIES,
    MAX_FRAMES,
    BadEntry,
    Caches,
    coalesced_completions,
    discovered_ns,
    duration_ms,
    get_v210,
    is_coalesced_marker,
    recorder_backend,
    tensors,
    user_frame,
)
from frexport.decode.normalize import normalize, require_dump_fields
from frexport.model.outcome import edges, settled, shows_events
from frexport.model.rank_trace import ROW_CREATED, ROW_PARSED, ROW_STATE, RankTrace, add_rows, recorder_times
from frexport.model.signature import OpSignature


class _Unusual(Exception):
    pass


def trace_from_raw(raw: object, source: str, fmt: str, rank: int, dumped_at_ns: int | None,
                   size_bytes: int) -> RankTrace | None:
    if not isinstance(raw, dict):
        return None
    require_dump_fields(raw, source)  # before the "entries" default below makes anything look like one
    entries_raw = raw.get("entries")
    if entries_raw is None:
        entries_raw = []
    if type(entries_raw) is not list or len(entries_raw) > MAX_ENTRIES:
        return None
    try:
        rows, markers = _rows(entries_raw)
    except (_Unusual, BadEntry, KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
        return None
    timeouts = [e.get("timeout_ms") for e in edges(entries_raw)]
    return trace_from_rows(raw, rows, markers, source, fmt, rank, dumped_at_ns, size_bytes, timeouts)


def trace_from_rows(raw: dict, rows: list, markers: bool, source: str, fmt: str, rank: int,
                    dumped_at_ns: int | None, size_bytes: int, timeouts: list) -> RankTrace:
    """The trace of a dump whose top level is `raw` (its entries are not read) and whose entries gave
    `rows` (and `markers`: whether any op closes a coalesced group; `timeouts`: the raw timeout_ms of
    the entries outcome.edges samples)."""
    if markers:  # before judging completion tracking, as normalize completes them before build_rank_trace
        _complete_coalesced(rows)
    sample = edges(rows)
    head = normalize({**raw, "entries": []}, source, fmt, rank=rank, dumped_at_ns=dumped_at_ns,
                     size_bytes=size_bytes, recorder=recorder_backend(r[ROW_PARSED][0] for r in sample))
    events = frozenset(r[ROW_PARSED][0] for r in sample if shows_events(r[ROW_STATE]))  # outcome.event_backends
    created = [r[ROW_CREATED] for r in sample if r[ROW_CREATED]]
    trace = RankTrace(
        rank=rank, source=source, format=fmt, version_text=head.version_text, notes=head.notes,
        dumped_at_ns=dumped_at_ns, n_entries=len(rows), pg_config=head.pg_config, pg_status=head.pg_status,
        first_created_ns=min(created, default=None), last_created_ns=max(created, default=None))
    add_rows(trace, rows, events)
    # rows are one per entry, in entry order: the sample's rows and raw entries line up
    recorder_times(trace, [r[0] for r in sample], [r[ROW_CREATED] or 0 for r in sample], [r[-2] or 0 for r in sample],
                   [r[-1] or 0 for r in sample], timeouts[:len(sample)])
    return trace


_LO, _HI = INT64_MIN, INT64_MAX

# Rows as rank_trace.add_rows takes them.
def _rows(entries_raw: list) -> tuple[list, bool]:
    c = Caches()
    rows: list[tuple] = []
    append = rows.append
    get = get_v210
    names = c.names
    pgs = c.groups
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
        if not (_LO <= seq <= _HI and _LO <= created <= _HI and _LO <= record_id <= _HI and _LO <= p2p_seq <= _HI
                and _LO <= pg_id <= _HI and _LO <= op_id <= _HI and (timeout is None or _LO <= timeout <= _HI)):
            raise _Unusual  # out of 64 bits: the general path's field rules make it absent
        # the caches' lookups inlined: the rule runs on a miss only
        parsed = names.get(pname) or c.profiling_name(pname)
        pg = (pgs.get((pg_raw, parsed[0])) if type(pg_raw) is tuple or type(pg_raw) is str else None) \
            or c.group(pg_raw, parsed[0])
        duration = e.get("duration_ms")
        if duration is not None and (type(duration) is not float or not 0 <= duration < MAX_DURATION_MS):
            duration = duration_ms(duration)
        frames_raw = e.get("frames")
        site = None
        if frames_raw:
            if type(frames_raw) is not list and type(frames_raw) is not tuple:
                raise _Unusual
            if len(frames_raw) > MAX_FRAMES:
                frames_raw = frames_raw[:MAX_FRAMES]
            first = frames_cache.get(id(frames_raw[0]))
            site = first[0] if first is not None and not first[1] else user_frame(frames_raw, c)
        sizes_dtypes = tensors((pname, pg), in_sizes, out_sizes, in_dtypes, out_dtypes, c)
        key = (parsed[1], id(sizes_dtypes[0]), id(sizes_dtypes[1]), id(sizes_dtypes[2]), id(sizes_dtypes[3]))
        sig = one_sig.get(key)
        if sig is None:
            sig = one_sig[key] = (OpSignature(parsed[1], *sizes_dtypes),)
        append((pg[0], pg[1], pg_id, is_p2p, seq, p2p_seq, parsed, created, duration, sig, site, state,
                retired, discovered_ns(started), discovered_ns(completed)))
    markers = any(is_coalesced_marker(op) for _, op, _, _ in names.values())
    return rows, markers


def _row_op(r: tuple) -> str:
    return r[ROW_PARSED][1]


def _row_coalesced_key(r: tuple) -> tuple:
    return r[0], r[3], r[5] if r[3] else r[4]


def _row_settled(r: tuple) -> bool:
    return settled(r[ROW_STATE], r[ROW_STATE + 1])


def _complete_coalesced(rows: list) -> None:
    """normalize.complete_coalesced, on rows: state, retired, started, completed are the last four."""
    for i, j in list(coalesced_completions(rows, _row_op, _row_coalesced_key, _row_settled)):
        rows[i] = rows[i][:ROW_STATE] + rows[j][ROW_STATE:]
