"""The bulk analyzer's fastest path: a pickle's bytes straight to its RankTrace, through the compiled scanner.

`frexport analyze` needs a few integers per entry, its sizes and dtypes, and one call site; unpickling
builds every frame dict, every size list and every field of every entry first. The optional C extension
`_scan` (see _scan.c and docs/performance.md) walks the opcode stream once and hands back the dump's
top level as plain data and its entries as columns: the distinct categorical parts ("kinds": group, op
name, state, sizes, dtypes, stack), and per entry a kind index and its numbers. This module turns those
into the trace fast_trace builds, with the same field rules (fields.py) and the same last steps
(normalize for the top level, rank_trace.recorder_times; rank_trace.add_columns, which equals
add_rows, or add_rows itself), so the rules are applied once per kind instead of once per entry.

It only ever accepts less: the scanner returns None for anything outside the common 2.10 shape or
outside its opcode allow-list (every opcode safe_pickle refuses is outside it), and so does this
module where a field rule refuses a kind; the caller then takes the pure path (safe_pickle +
fast_trace), which decodes, refuses or explains exactly as before. Without the extension (no
compiler at install time, or one built from other field rules than fields.py) `available()` is False,
`status()` says why (`frexport --version`, and a warning when analyze, serve or jobview starts), and only the
speed changes. A property test checks that both paths build identical traces.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from importlib import import_module
from itertools import compress
from typing import Any

from frexport.decode import fields
from frexport.decode.fields import (
    BadEntry,
    Caches,
    coalesced_pairs,
    dtypes,
    is_coalesced_marker,
    recorder_backend,
    sizes,
)
from frexport.decode.normalize import normalize, require_dump_fields
from frexport.model.call_site import Frame, is_library_frame
from frexport.model.dump import group_name
from frexport.model.outcome import SAMPLE, settled, shows_events
from frexport.model.rank_trace import RankTrace, add_columns, add_rows, recorder_times
from frexport.model.signature import OpSignature


def expected_fields() -> dict:
    """What the extension must have been compiled with (its `FIELDS`, from _scan_fields.h): fields.py's."""
    return {"MAX_ENTRIES": fields.MAX_ENTRIES, "MAX_FRAMES": fields.MAX_FRAMES,
            "MAX_SIZE_ELEMENTS": fields.MAX_SIZE_ELEMENTS, "MAX_DTYPES": fields.MAX_DTYPES,
            "MAX_DTYPE_LEN": fields.MAX_DTYPE_LEN, "MAX_DURATION_MS": fields.MAX_DURATION_MS,
            "FIELD_NAMES": (*fields.V210_KEYS, *fields.OPTIONAL_KEYS), "N_REQUIRED": len(fields.V210_KEYS),
            "FRAME_KEYS": fields.FRAME_KEYS, "ENTRIES_KEY": fields.ENTRIES_KEY}


def _load() -> tuple[Callable[[bytes], tuple | None] | None, str]:
    """(the compiled scan, "") or (None, why it is not used)."""
    try:
        ext = import_module("frexport.decode._scan")
    except ImportError as exc:  # installed without a compiler: the pure path does everything
        return None, f"not built ({exc}; no C compiler at install time?)"
    if getattr(ext, "FIELDS", None) != expected_fields():
        return None, "built from other field rules than frexport/decode/fields.py (rebuild it)"
    return ext.scan, ""


_scan, _why_not = _load()
# its builder of Entry objects from those columns (decode/pickle_tail.py), where the scanner is in use
_entries: Callable[..., tuple[list, int]] | None = import_module("frexport.decode._scan").entries_of if _scan else None
# The scanner keeps its work buffers in C statics and holds the GIL throughout, but an object it makes
# can start a collection whose finalizer lets another thread in: the live sidecar's poll threads
# scan at once (decode/pickle_tail.py), so one scan at a time.
_one_scan = threading.Lock()


def available() -> bool:
    return _scan is not None


def status() -> str:
    """One line for `frexport --version` and the logs: "yes", or "no - <why>"."""
    return "yes" if _scan is not None else f"no - {_why_not or 'turned off'}"


def pure_path_warning() -> str | None:
    """The line analyze, serve and jobview log when they start without the compiled scanner; None with it."""
    if _scan is not None:
        return None
    return (f"the compiled pickle scanner is not in use: {_why_not or 'turned off'}. Pickle dumps are decoded on "
            "the pure-Python path (the same results, about 2.5x the CPU); install a manylinux wheel of frexport, "
            "or build it with a C compiler and Python's headers (`frexport --version` says which is in use)")


def entries(template_of: Callable[[int, int], Any], which: array, nums: array, durations: array, start: int,
            stop: int, slots: tuple[int, ...]) -> tuple[list, int]:
    """Entries [start, stop) of `columns` as Entry objects, each its kind's template (`template_of(kind,
    thread)`, None: refused) with its own numbers at `slots` (_scan.c `entries_of` says which); and how
    many were refused. Only where `available()`."""
    assert _entries is not None, "the compiled scanner is not in use"
    return _entries(template_of, which, nums, durations, start, stop, slots)


class _Unusual(Exception):
    pass


N_INTS = 8  # numbers per entry from the scanner (_scan.c's N_INTS): seq, p2p seq, created, started,
# completed, record_id, op_id, thread (an index into its threads)


def columns(data: bytes) -> tuple[dict, list, array, array, array, list, list, list] | None:
    """A pickle dump read by the compiled scanner: (top level with "entries": [], kinds, the entries'
    kind indices array("i"), their N_INTS numbers each array("q"), durations array("d"), stacks,
    frames, threads); None without the extension or where the dump is not the common shape. The one
    entry point to the scanner: analyze's traces (trace_from_pickle) and the sidecar's dumps
    (scanned_dump.dump_from_pickle, through read.decode_bytes) both read pickles through it."""
    if _scan is None:
        return None
    with _one_scan:
        cols = _scan(data)
    if cols is None:
        return None
    top, kinds, kind_of, ints, durations, stacks, frames, threads = cols
    which = array("i")
    which.frombytes(kind_of)
    nums = array("q")
    nums.frombytes(ints)
    dur = array("d")
    dur.frombytes(durations)
    return top, kinds, which, nums, dur, stacks, frames, threads


def trace_from_pickle(data: bytes, source: str, rank: int, dumped_at_ns: int | None,
                      size_bytes: int) -> RankTrace | None:
    """The trace of a pickle dump, or None: not the common shape (or no extension), use the pure path."""
    cols = columns(data)
    if cols is None:
        return None
    top, kinds, which, nums, dur, stacks, frames, _threads = cols
    seqs, p2p_seqs, created, started, completed = (nums[k::N_INTS] for k in range(5))
    return trace_from_columns(top, kinds, which, seqs, p2p_seqs, created, started, completed, dur, stacks, frames,
                              source, "pickle", rank, dumped_at_ns, size_bytes)


def trace_from_columns(top: dict, kinds: list, which: array, seqs: array, p2p_seqs: array, created: array,
                       started: array, completed: array, dur: array, stacks: list, frames: list, source: str,
                       fmt: str, rank: int, dumped_at_ns: int | None, size_bytes: int) -> RankTrace | None:
    """The trace of a dump given as columns (what `_scan.scan` returns, unpacked: `which` array("i"),
    the numbers array("q") with 0 for an unknown start or completion, durations array("d") with NaN
    for none), or None where a field rule refuses a kind. The JSON decoder's typed columns
    (json_decode.trace) feed it too."""
    require_dump_fields(top, source)  # as trace_from_raw: the same keys, so the same verdict
    try:
        info, markers = _kinds(kinds, stacks, frames)
    except (_Unusual, BadEntry):
        return None
    if markers:  # before judging completion tracking, as fast_trace does
        _complete_coalesced(info, which, seqs, p2p_seqs, started, completed)
    n = len(which)
    sample = list(range(n)) if n <= 2 * SAMPLE else [*range(SAMPLE), *range(n - SAMPLE, n)]  # outcome.edges
    events = frozenset(info[which[i]][4][0] for i in sample if shows_events(info[which[i]][7]))
    first_last = [created[i] for i in sample if created[i]]
    edge_times = ([info[which[i]][0] for i in sample], [created[i] or 0 for i in sample],
                  [started[i] or 0 for i in sample], [completed[i] or 0 for i in sample],
                  [info[which[i]][9] for i in sample])
    head = normalize({**top, "entries": []}, source, fmt, rank=rank, dumped_at_ns=dumped_at_ns,
                     size_bytes=size_bytes, recorder=recorder_backend(info[which[i]][4][0] for i in sample))
    trace = RankTrace(
        rank=rank, source=source, format=fmt, version_text=head.version_text, notes=head.notes,
        dumped_at_ns=dumped_at_ns, n_entries=n, pg_config=head.pg_config, pg_status=head.pg_status,
        first_created_ns=min(first_last, default=None), last_created_ns=max(first_last, default=None))
    if not add_columns(trace, info, which, seqs, p2p_seqs, created, started, dur, events):
        # ops of a coalesced collective: the row by row pass, on fast_trace's rows
        rows = [(k[0], k[1], k[2], k[3], seq, p2p, k[4], c, None if d != d else d, k[5], k[6], k[7], k[8],
                 st or None, co or None)
                for k, seq, p2p, c, st, co, d in
                zip(map(info.__getitem__, which), seqs, p2p_seqs, created, started, completed, dur)]
        add_rows(trace, rows, events)
    recorder_times(trace, *edge_times)
    return trace


def _kinds(kinds: list, stacks: list, frames: list) -> tuple[list, bool]:
    """Per kind: (pg_name, pg_desc, pg_id, is_p2p, parsed profiling name, signature 1-tuple, call site,
    state, retired, timeout_ms), by the field rules; and whether any op closes a coalesced group."""
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
    for pg_name, pg_desc, pg_id, is_p2p, pname, state, retired, in_s, out_s, in_d, out_d, stack, timeout in kinds:
        parsed = c.profiling_name(pname)
        tensors = (sizes(in_s, c), sizes(out_s, c), dtypes(in_d, c), dtypes(out_d, c))
        key = (parsed[1], *tensors)
        sig = one_sig.get(key)
        if sig is None:
            sig = one_sig[key] = (OpSignature(parsed[1], *tensors),)
        site = None
        if stack >= 0:
            site = sites.get(stack, _Unusual)
            if site is _Unusual:
                site = sites[stack] = site_of(stack)
        info.append((group_name(pg_name, parsed[0]), pg_desc, pg_id, is_p2p, parsed, sig, site, state, retired,
                     timeout))
    markers = any(is_coalesced_marker(op) for _, op, _, _ in c.names.values())
    return info, markers


def _complete_coalesced(info: list, which: array, seqs: array, p2p_seqs: array, started: array,
                        completed: array) -> None:
    """fast_trace._complete_coalesced on columns: an op inside a coalesced group takes the state,
    retired and times of its group's closing entry. State and retired are its kind's, so it moves to
    a kind that is its own with the closing entry's state and retired (added at the end of `info`)."""
    marker = [is_coalesced_marker(k[4][1]) for k in info]
    done = [settled(k[7], k[8]) for k in info]
    takes_part = [m or not d for m, d in zip(marker, done)]
    items = list(compress(range(len(which)), map(takes_part.__getitem__, which)))  # settled ops neither close nor wait
    kinds = list(map(which.__getitem__, items))
    p2p = [k[3] for k in info]
    keys = list(zip(map([k[0] for k in info].__getitem__, kinds), map(p2p.__getitem__, kinds),
                    [p2p_seqs[i] if p2p[k] else seqs[i] for i, k in zip(items, kinds)]))
    pairs = coalesced_pairs(list(map(marker.__getitem__, kinds)), keys, list(map(done.__getitem__, kinds)))
    moved: dict[tuple[int, int], int] = {}
    for a, b in pairs:
        i, j = items[a], items[b]
        pair = (which[i], which[j])
        kind = moved.get(pair)
        if kind is None:
            info.append(info[pair[0]][:7] + info[pair[1]][7:9] + info[pair[0]][9:])  # its own timeout
            kind = moved[pair] = len(info) - 1
        which[i] = kind
        started[i], completed[i] = started[j], completed[j]
