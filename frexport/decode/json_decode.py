"""The JSON decoder: every JSON dump, whole body or new tail, is decoded here, with msgspec.

One parser for the format, used by `analyze` (load.py), the live sidecar (worker_server.py: a whole
body, or only its new tail) and the job view (dump_dir.py and peers.py through read.decode_bytes, the
peers' rank rows through peer_rows.py).
What it decodes goes through the field rules of fields.py only, on one of the two ways every format
shares: the columns (scanned.trace_from_columns, which the compiled pickle scanner feeds too) or the
entries (normalize, fast_trace). Three schemas of the same decoder:

- `loads`: plain data (dicts and lists), for normalize and fast_trace: msgspec's untyped decode,
  about 2x faster than `json.loads` on a dump. What msgspec refuses as not strict JSON is read by
  the standard library as before (`_stdlib`), so that every document keeps its outcome: NaN and
  Infinity (Python's json.dumps writes them), a UTF-8 BOM or UTF-16/32 text, a lone surrogate, a
  number over a float's range; and every refusal keeps its reason (truncated, corrupt, too_deep).
- `trace`: the bulk analyzer's columns, straight from typed structs (`_Entry`: the 2.10 entry with
  the types the common shape has, 64-bit integers bounded by msgspec): its decode about 3x faster
  than `json.loads`, and no dict per entry. The categorical fields of an entry are its kind (their
  bytes, joined and hashed in C; each distinct kind decoded once), the numbers its columns; the field
  rules run once per kind in scanned.py. Anything else (an older layout, one entry of another type,
  frames, a number out of 64 bits, a duration out of bounds) returns None and
  the caller takes `loads` + fast_trace / normalize, which skip and count a bad entry: only ever
  accepts less, and a property test checks both give identical traces.
- `parse_tail`: the live sidecar's new tail. The body is walked once without building its entries
  (each is a `msgspec.Raw`, a span of the body), then only the entries from a given record id on,
  and the small rest of the document, are decoded.
"""

from __future__ import annotations

import codecs
import json
import resource
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, chain, compress, islice
from operator import attrgetter, gt, lt
from typing import Annotated, Any

import msgspec

from frexport.decode.errors import DecodeError
from frexport.decode.fields import INT64_MAX, INT64_MIN, MAX_DURATION_MS, MAX_ENTRIES
from frexport.decode.normalize import ColumnEntries, KindedEntries
from frexport.decode.sandbox import address_space_now
from frexport.decode.scanned import trace_from_columns
from frexport.model.rank_trace import RankTrace

_PLAIN = msgspec.json.Decoder()


# What msgspec may build from one byte of JSON at worst: `[{},{},...]` is a 64-byte dict for 3 bytes.
_GROWTH = 32


def _fits(data: bytes) -> bool:
    """Whether msgspec may decode `data` here. It does not survive an allocation that fails: under a
    sandboxed decoder's RLIMIT_AS it crashed (SIGSEGV) on 13 MB of JSON strings, where the standard
    library raises MemoryError, which the decoder reports as `too_large`. So under a limit a document
    that could outgrow the room left goes to the standard library; without one (the sidecar's own
    process, small bodies) there is nothing to check."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError):
        return True
    if soft == resource.RLIM_INFINITY:
        return True
    return address_space_now() + _GROWTH * len(data) < soft


def loads(data: bytes, source: str) -> Any:
    """The plain data of a JSON document, or a DecodeError that says why not."""
    if not _fits(data):
        return _stdlib(data, source)
    try:
        return _PLAIN.decode(data)
    except RecursionError:  # the standard library's limit too (about 1000 levels)
        raise DecodeError(source, "too_deep", "JSON nests too deeply") from None
    except (msgspec.DecodeError, UnicodeDecodeError):  # (ValidationError included: 1e999, a 5000-digit int)
        pass
    return _stdlib(data, source)  # not strict JSON, or not JSON: the standard library's reading and reasons


def _stdlib(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        stripped = data.rstrip()
        if exc.pos >= len(stripped) - 1 or stripped[-1:] not in (b"}", b"]"):
            raise DecodeError(source, "truncated", f"JSON is truncated ({len(data)} bytes)") from None
        raise DecodeError(source, "corrupt", f"not valid JSON: {exc.msg} at byte {exc.pos}") from None
    except UnicodeDecodeError:
        raise DecodeError(source, "corrupt", "not valid JSON: not UTF-8 text") from None
    except RecursionError:
        raise DecodeError(source, "too_deep", "JSON nests too deeply") from None
    except ValueError as exc:  # e.g. an integer literal over Python's digit limit
        raise DecodeError(source, "corrupt", f"not valid JSON: {exc}") from None


def typed_decodable(data: bytes) -> bool:
    """Whether a typed decode may run on `data`: what it skips is still UTF-8, and it fits in memory."""
    return _utf8(data) and _fits(data)


def _utf8(data: bytes) -> bool:
    """Whether the text is UTF-8 (PyTorch's is ASCII: its JSON escapes the rest). A typed decode skips
    what it does not read without checking its bytes: this checks them (what `loads` refuses), a MiB
    at a time (a dump's text whole would cost up to 4 bytes a byte)."""
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for i in range(0, len(view), 1 << 20):
            decoder.decode(view[i:i + (1 << 20)])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------------
# The bulk analyzer's columns

_I64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]  # fast_trace's bounds: else the general path
_DURATION_MS = Annotated[float, msgspec.Meta(ge=0, lt=MAX_DURATION_MS)]  # fields.duration_ms: else the general path
_NS = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]  # a discovery time: 0 for "not yet", else the general path
_Span = msgspec.Raw


class _Entry(msgspec.Struct, gc=False, kw_only=True):
    """A 2.10 entry in the common shape (what fast_trace._rows accepts); other keys are ignored, as there,
    and so are thread_id and thread_name: no trace reads them, and no value of theirs makes normalize
    skip an entry (a decode that does not build them costs 15 % less). The fields in PyTorch's order
    (nlohmann::json sorts the keys): msgspec matches keys in its fields' order first, 11 % faster.
    The categorical fields that are strings and lists (`_Span`) are kept as the spans of the body they
    take: an entry's kind is their bytes and its small categorical values, and only each distinct kind
    is decoded (`_KIND_TYPES`), not the same group, name and sizes once per entry (35 % less for the
    whole trace; bools and small ints as values, not spans, 5 % less again: nothing to allocate)."""

    collective_seq_id: _I64
    duration_ms: _DURATION_MS | None = None
    frames: Any = None  # the JSON handlers write none: an entry with frames takes the general path
    input_dtypes: _Span
    input_sizes: _Span
    is_p2p: bool
    op_id: _I64
    output_dtypes: _Span
    output_sizes: _Span
    p2p_seq_id: _I64
    pg_id: _I64
    process_group: _Span
    profiling_name: _Span
    record_id: _I64
    retired: bool
    state: _Span
    time_created_ns: _I64
    time_discovered_completed_ns: _NS | None
    time_discovered_started_ns: _NS | None
    timeout_ms: _I64 | None


class _Dump(msgspec.Struct):
    """The top level: the fields normalize reads (UNSET where absent: require_dump_fields needs to know)."""

    entries: list[_Entry] | msgspec.UnsetType = msgspec.UNSET
    version: Any = msgspec.UNSET
    pg_config: Any = msgspec.UNSET
    pg_status: Any = msgspec.UNSET
    nccl_version: Any = msgspec.UNSET
    comm_lib_version: Any = msgspec.UNSET


TOP_KEYS = ("version", "pg_config", "pg_status", "nccl_version", "comm_lib_version")
_DUMP = msgspec.json.Decoder(_Dump)
# an entry's kind, as _scan.scan gives kinds (see scanned.trace_from_columns) less its stack (none):
# its spans and its small values (`_kind_keys`), the spans read once per distinct kind with these types
_KIND_SPANS = attrgetter("process_group", "profiling_name", "state", "input_sizes", "output_sizes", "input_dtypes",
                         "output_dtypes")
_KIND_VALUES = attrgetter("pg_id", "is_p2p", "retired", "timeout_ms")
_KIND_TYPES = msgspec.json.Decoder(tuple[tuple[str, str], str, str, tuple[tuple[int, ...], ...],
                                         tuple[tuple[int, ...], ...], tuple[str, ...], tuple[str, ...]])
_JOIN = b",".join
_NUMBERS = attrgetter("collective_seq_id", "p2p_seq_id", "time_created_ns", "time_discovered_started_ns",
                      "time_discovered_completed_ns", "duration_ms")
_FRAMES = attrgetter("frames")
_NAN = float("nan")
_NONE_IS_NAN = {None: _NAN}


def trace(data: bytes, source: str, rank: int, dumped_at_ns: int | None, size_bytes: int) -> RankTrace | None:
    """The trace of a JSON dump in the common shape, or None: use `loads` and the plain path."""
    if not typed_decodable(data):
        return None
    try:
        dump = _DUMP.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, MemoryError):
        return None  # not the common shape, or not (strict) JSON: the plain path reads or explains it
    entries = dump.entries
    if isinstance(entries, msgspec.UnsetType) or not entries or len(entries) > MAX_ENTRIES \
            or any(map(_FRAMES, entries)):
        return None  # no entries (the plain path is cheap), more than normalize keeps, or frames
    index = FirstSeen()
    which = array("i", map(index.__getitem__, _kind_keys(entries, _KIND_SPANS, _KIND_VALUES)))
    try:
        kinds = [(pg[0], pg[1], pg_id, p2p, name, state, retired, in_s, out_s, in_d, out_d, -1, timeout)
                 for (pg, name, state, in_s, out_s, in_d, out_d), (pg_id, p2p, retired, timeout)
                 in ((_KIND_TYPES.decode(b"[" + spans + b"]"), values) for spans, values in index)]
    except (msgspec.DecodeError, RecursionError):
        return None  # a field of another type: the plain path's field rules say what it is
    seqs, p2p_seqs, created, started, completed, durations = zip(*map(_NUMBERS, entries))
    top = {k: v for k in TOP_KEYS if (v := getattr(dump, k)) is not msgspec.UNSET}
    top["entries"] = []
    return trace_from_columns(top, kinds, which, array("q", seqs), array("q", p2p_seqs), array("q", created),
                              _discovered(started), _discovered(completed), _durations(durations), [], [],
                              source, "json", rank, dumped_at_ns, size_bytes)


def _kind_keys(entries: list, spans: attrgetter, values: attrgetter) -> Iterator[tuple[bytes, tuple]]:
    """Each entry's kind as a key: its spans' bytes joined by commas (a JSON array's body, decoded once
    per distinct kind) and its small values. C-level passes: `FirstSeen` makes a call per new kind only."""
    return zip(map(_JOIN, map(spans, entries)), map(values, entries))


class FirstSeen(dict):
    """Each key's index in the order of first appearance: a new key gets the next one."""

    def __missing__(self, key: tuple) -> int:
        i = self[key] = len(self)
        return i


def _discovered(values: tuple) -> array:
    """fields.discovered_ns as the columns hold it (0 for unknown): PyTorch's JSON writes 0 for "not yet"
    (the decoder refused what is negative or over 64 bits)."""
    try:
        return array("q", values)
    except TypeError:  # a None, as a pickle has it
        return array("q", [0 if v is None else v for v in values])


def _durations(values: tuple) -> array:
    """fields.duration_ms as the columns hold it (NaN for none; the decoder refused what is out of bounds)."""
    if values.count(None) == len(values):  # not timed (the usual case: no timing without CUDA events)
        return array("d", [_NAN]) * len(values)
    return array("d", map(_NONE_IS_NAN.get, values, values))


# ---------------------------------------------------------------------------------------------------------
# The live sidecar's tail

class _Spans(msgspec.Struct):
    """The top level with each entry (and each other field) as the span of the body it takes."""

    entries: list[msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET
    version: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    pg_config: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    pg_status: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    nccl_version: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    comm_lib_version: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    frexport_first_record: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # agent.live.FIRST_RECORD_KEY


class _RecordId(msgspec.Struct):
    record_id: Any = None


class _LiveEntry(_Entry, kw_only=True):
    """A tail entry as the live JSON handlers write it: `_Entry` with thread_id and thread_name, every
    key of fields.V210_KEYS required (else the plain path). Its numbers are those an Entry holds per
    entry (normalize.KindedEntries.NUMBERS: pg_id among them, where analyze's columns keep it in the
    kind); the rest, the thread's fields included, is its kind."""

    thread_id: _Span
    thread_name: _Span


_SPANS = msgspec.json.Decoder(_Spans)
_RECORD_ID = msgspec.json.Decoder(_RecordId)
_LIVE_ENTRIES = msgspec.json.Decoder(list[_LiveEntry])
_LIVE_KIND_SPANS = attrgetter("process_group", "profiling_name", "state", "input_sizes", "output_sizes",
                              "input_dtypes", "output_dtypes", "thread_id", "thread_name")
_LIVE_KIND_VALUES = attrgetter("is_p2p", "retired", "timeout_ms")
_LIVE_NUMBERS = attrgetter(*KindedEntries.NUMBERS)
_RECORD_AT, _CREATED_AT = KindedEntries.NUMBERS.index("record_id"), KindedEntries.NUMBERS.index("time_created_ns")
_META_KEYS = (*TOP_KEYS, "frexport_first_record")
# A span per entry costs ~60 bytes: more objects than a recorder's buffer holds is not a buffer to
# walk in-process (a body of `{},` repeated); the caller decodes it whole (in its sandbox when large).
MAX_TAIL_OBJECTS = 200_000


@dataclass
class Tail:
    meta: dict  # the document's fields normalize reads (and the agent's first record), without "entries"
    first_record: int | None  # record id of the oldest entry still in the buffer
    # the entries from `since` on, in order (at least the one at `since`): by kind where each is in the
    # common shape, else as plain data (normalize reads either)
    entries: KindedEntries | ColumnEntries | list[dict]
    first_created: Any  # time_created_ns of the first (the one at `since`), as written


def parse_tail(body: bytes, since: int, max_bytes: int | None = None) -> Tail | None:
    """The entries from the one with record id `since` on, and the rest of the document; None where
    that cannot be told safely (the entry is gone, the entries are not in record order, not strict
    JSON, not a dump's layout) and the caller decodes the whole body. `max_bytes`: the most bytes this
    may decode (the entries from `since` on and the other fields); None also when it would need more."""
    if body.count(b"{") > MAX_TAIL_OBJECTS or not typed_decodable(body):
        return None
    try:
        spans = _SPANS.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None  # the whole parse says what is wrong (read.py: too_deep, truncated, ...)
    raws = spans.entries
    if isinstance(raws, msgspec.UnsetType) or not raws:
        return None
    try:
        first = _record_id(raws[0])
        at = _find(raws, since, first)
        if at is None:
            return None  # it left the buffer, or the rank restarted: decode it all
        meta_raw = {k: v for k in _META_KEYS if (v := getattr(spans, k)) is not msgspec.UNSET}
        if max_bytes is not None and sum(map(len, raws[at:])) + sum(map(len, meta_raw.values())) > max_bytes:
            return None
        text = b"[" + b",".join(raws[at:]) + b"]"
        meta = {k: _PLAIN.decode(v) for k, v in meta_raw.items()}
        kinded = _by_kind(text, raws[at:])
        if kinded is not None:
            rids = [n[_RECORD_AT] for n in kinded.numbers]
            if not all(map(lt, rids, islice(rids, 1, None))):
                return None  # not in record order: the buffer was being rewritten; decode it all
            return Tail(meta, first, kinded, kinded.numbers[0][_CREATED_AT])
        rows = _PLAIN.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    last = None
    for row in rows:
        rid = row.get("record_id") if type(row) is dict else None
        if type(rid) is not int or (last is not None and rid <= last):
            return None  # not in record order: the buffer was being rewritten; decode it all
        last = rid
    return Tail(meta, first, rows, rows[0].get("time_created_ns"))


def _by_kind(text: bytes, raws: list[msgspec.Raw]) -> KindedEntries | None:
    """The entries of `text` (the JSON list of `raws`) by kind, or None where one is not in the
    common shape (or has frames): the plain path reads them. A kind is its spans' bytes, joined."""
    try:
        typed = _LIVE_ENTRIES.decode(text)
    except msgspec.ValidationError:
        return None
    if not typed or any(map(_FRAMES, typed)):
        return None
    index = FirstSeen()
    kind_of = list(map(index.__getitem__, _kind_keys(typed, _LIVE_KIND_SPANS, _LIVE_KIND_VALUES)))
    # each kind's first entry: where the kind is above every one before it
    firsts = compress(range(len(kind_of)), map(gt, kind_of, chain((-1,), accumulate(kind_of, max))))
    return KindedEntries([_PLAIN.decode(raws[i]) for i in firsts], kind_of, list(map(_LIVE_NUMBERS, typed)))


def _record_id(raw: msgspec.Raw) -> int | None:
    rid = _RECORD_ID.decode(raw).record_id
    return rid if type(rid) is int else None


def _find(raws: list[msgspec.Raw], since: int, first: int | None) -> int | None:
    """The index of the entry with record id `since`: a ring buffer's ids are consecutive, so where
    the first's says, else by bisection (in record order, as parse_tail then checks)."""
    if first is not None and 0 <= since - first < len(raws) and _record_id(raws[since - first]) == since:
        return since - first
    lo, hi = 0, len(raws)
    while lo < hi:
        mid = (lo + hi) // 2
        rid = _record_id(raws[mid])
        if rid is None:
            return None
        if rid < since:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(raws) and _record_id(raws[lo]) == since else None
