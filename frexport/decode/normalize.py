"""Turn a raw decoded dump (plain dicts and lists) into the typed model.

One function handles every format: the unversioned list of entries, versions
2.2 to 2.10 and newer minors, pickle or JSON. The variants differ in small
ways (tuple vs list, None vs 0, int vs str) that are absorbed here so nothing
downstream has to care. A malformed entry is skipped and counted; only a
document that is not a Flight Recorder dump at all is an error.

This is the hot path of `frexport analyze` (millions of entries), hence the
caches and the inlined type checks.
"""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter
from typing import Any

from frexport.decode.errors import DecodeError
from frexport.model.dump import (
    P2P_OPS,
    Entry,
    Frame,
    ProcessGroupConfig,
    ProcessGroupStatus,
    RankDump,
)

# The newest dump format this code knows field by field.
KNOWN_VERSION = (2, 10)

# Bounds that keep a hostile but small file from costing unbounded work:
# shared (memoized) sub-lists in a pickle can make a few bytes stand for a large structure.
MAX_ENTRIES = 1_000_000
MAX_FRAMES = 512
MAX_SIZE_ELEMENTS = 65_536  # dims summed over all tensors of one entry
MAX_DTYPES = 65_536

_KNOWN_TOP_KEYS = frozenset({"version", "entries", "pg_config", "pg_status", "nccl_version", "comm_lib_version"})


class _BadEntry(Exception):
    pass


def parse_version(text: Any) -> tuple[int, int] | None:
    """'2.10' -> (2, 10). Compared as integers: '2.10' is newer than '2.9'."""
    if not isinstance(text, str):
        return None
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(p.isdecimal() and len(p) <= 6 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def normalize(raw: Any, source: str, fmt: str, rank: int | None = None, dumped_at_ns: int | None = None,
              size_bytes: int = 0, keep_frames: bool = True, previous: dict[int, Entry] | None = None,
              carry: tuple[Entry, ...] = (), max_entries: int = MAX_ENTRIES) -> RankDump:
    """`keep_frames=False` keeps only each entry's call site: the bulk analyzer does not need whole stacks.

    `previous` (record_id -> Entry of the last snapshot of the same rank) lets a poller skip entries that
    were already finished then: they cannot change, so the old Entry is reused. `carry` are entries
    of the previous snapshot that precede `raw`'s entries (a poll that parsed only the new tail).
    """
    notes: list[str] = []
    if isinstance(raw, list):  # the first recorder (2023) dumped a bare list of entries
        top: dict[str, Any] = {"entries": raw}
        notes.append("unversioned dump (pre-2.2 list form)")
    elif isinstance(raw, dict):
        top = raw
        if not _KNOWN_TOP_KEYS.intersection(k for k in top if isinstance(k, str)):
            raise DecodeError(source, "not_a_dump", "not a Flight Recorder dump (no version, entries or pg_config)")
    else:
        raise DecodeError(source, "not_a_dump", f"not a Flight Recorder dump (top level is {type(raw).__name__})")

    version_text = top.get("version")
    version = parse_version(version_text)
    if "version" in top:
        if version is None:
            notes.append(f"unparseable version {version_text!r}: reading known fields")
            version_text = str(version_text)[:40] if version_text is not None else None
        elif version > KNOWN_VERSION:
            notes.append(f"format version {version_text} is newer than "
                         f"{KNOWN_VERSION[0]}.{KNOWN_VERSION[1]}: reading known fields")
    else:
        version_text = None

    comm = top.get("comm_lib_version", top.get("nccl_version"))
    comm_lib_version = comm if isinstance(comm, str) else None

    entries_raw = top.get("entries", [])
    if entries_raw is None:
        entries_raw = []
    if not isinstance(entries_raw, (list, tuple)):
        raise DecodeError(source, "not_a_dump", f"'entries' is a {type(entries_raw).__name__}, not a list")
    if len(entries_raw) > max_entries:
        notes.append(f"{len(entries_raw)} entries: kept the newest {max_entries}")
        entries_raw = entries_raw[-max_entries:]

    entries, skipped = _entries(entries_raw, keep_frames, previous)
    if carry:
        entries = (carry + entries)[-max_entries:]
        if any(is_coalesced_marker(e.op) for e in entries[len(carry):]):
            entries = tuple(complete_coalesced(entries))
    if skipped:
        notes.append(f"{skipped} malformed entries skipped")

    return RankDump(
        rank=rank,
        source=source,
        format=fmt,
        version=version,
        version_text=version_text if isinstance(version_text, str) else None,
        comm_lib_version=comm_lib_version,
        pg_config=_pg_config(top.get("pg_config"), notes),
        pg_status=_pg_status(top.get("pg_status"), notes),
        entries=entries,
        notes=tuple(notes),
        dumped_at_ns=dumped_at_ns,
        size_bytes=size_bytes,
    )


def parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config 'ranks' is a string "[0, 1, 2]" (older dumps: a list). "[]" means unknown."""
    if isinstance(value, str):
        return _parse_ranks_text(value)
    if isinstance(value, (list, tuple)):
        if not value or not all(type(r) is int for r in value):
            return None
        ranks = tuple(value)
        return ranks if all(r >= 0 for r in ranks) else None
    return None


@lru_cache(maxsize=1024)  # every rank's dump repeats the same groups; a 4096-rank list costs ~1 ms to parse
def _parse_ranks_text(value: str) -> tuple[int, ...] | None:
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip()
    if not body:
        return None
    try:
        ranks = tuple(map(int, body.split(",")))
    except ValueError:
        return None
    return ranks if all(r >= 0 for r in ranks) else None


def _pg_config(raw: Any, notes: list[str]) -> tuple[ProcessGroupConfig, ...]:
    if not isinstance(raw, dict):
        return ()
    out = []
    for key, val in list(raw.items())[:100_000]:
        if isinstance(val, dict):
            name = val.get("name", key)
            desc = val.get("desc", "")
            ranks = parse_ranks(val.get("ranks"))
        elif isinstance(val, (list, tuple, str)):  # older layout: name -> ranks
            name, desc, ranks = key, "", parse_ranks(val)
        else:
            continue
        if not isinstance(name, str) or not isinstance(desc, str):
            continue
        if name == "" and desc == "" and ranks is None:
            continue  # gloo's placeholder {"": {"name": "", "desc": "", "ranks": "[]"}}
        out.append(ProcessGroupConfig(name, desc, ranks))
    return tuple(out)


def _opt_int(v: Any) -> int | None:
    if type(v) is int:
        return v
    if isinstance(v, str) and len(v) <= 32:  # the bound keeps int() linear and within its digit limit
        try:
            return int(v)
        except ValueError:  # '--1', '¹', 'x': a hostile or corrupt value is simply absent
            return None
    return None


def _pg_status(raw: Any, notes: list[str]) -> tuple[ProcessGroupStatus, ...]:
    if not isinstance(raw, dict):
        return ()
    out = []
    for key, val in list(raw.items())[:100_000]:
        pg_id = _opt_int(key)
        if pg_id is None or not isinstance(val, dict):
            continue
        out.append(
            ProcessGroupStatus(
                pg_id,
                _opt_int(val.get("last_enqueued_collective")),
                _opt_int(val.get("last_started_collective")),
                _opt_int(val.get("last_completed_collective")),
            )
        )
    return tuple(sorted(out))


def parse_profiling_name(name: str) -> tuple[str, str, int | None, int | None]:
    """'nccl:send 1->2' -> ('nccl', 'send', 1, 2); 'gloo:all_reduce' -> ('gloo', 'all_reduce', None, None)."""
    backend, sep, rest = name.partition(":")
    if not sep:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    src = dst = None
    meta = meta.strip()
    try:
        if op == "send" and "->" in meta:
            s, d = meta.split("->", 1)
            src, dst = int(s), int(d)
        elif op == "recv" and "<-" in meta:
            d, s = meta.split("<-", 1)
            src, dst = int(s), int(d)
    except ValueError:
        src = dst = None
    return backend, op, src, dst


class _Caches:
    """Per-dump interning: real dumps repeat the same names, sizes and (memoized) frames."""

    __slots__ = ("names", "sizes", "dtypes", "frame", "stack", "pg", "tensors")

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str, int | None, int | None]] = {}
        self.sizes: dict[tuple, tuple] = {}
        self.dtypes: dict[tuple, tuple] = {}
        # id(raw frame dict) -> (Frame, is a torch frame); the raw dump stays alive meanwhile
        self.frame: dict[int, tuple[Frame, bool]] = {}
        self.stack: dict[tuple[int, ...], tuple[tuple[Frame, ...], Frame | None]] = {}
        self.pg: dict[Any, tuple[str, str]] = {}
        # (op name, group) -> (raw sizes and dtypes of its last entry, their converted tuples)
        self.tensors: dict[tuple, tuple[tuple, tuple]] = {}

    def frame_of(self, raw: Any) -> tuple[Frame, bool]:
        hit = self.frame.get(id(raw))
        if hit is None:
            if type(raw) is not dict:
                raise _BadEntry("frames")
            name, filename, line = raw.get("name", ""), raw.get("filename", ""), raw.get("line", 0)
            if type(name) is not str or type(filename) is not str or type(line) is not int:
                raise _BadEntry("frames")
            fr = Frame(name, filename, line)
            hit = self.frame[id(raw)] = (fr, is_library_frame(fr))
        return hit


def _entries(raw_entries: list | tuple, keep_frames: bool,
             previous: dict[int, Entry] | None = None) -> tuple[tuple[Entry, ...], int]:
    caches = _Caches()
    out: list[Entry] = []
    append = out.append
    skipped = 0
    for index, raw in enumerate(raw_entries):
        if type(raw) is not dict:
            skipped += 1
            continue
        if previous:
            rid = raw.get("record_id")
            old = previous.get(rid) if type(rid) is int else None
            if old is not None and old.finished and old.time_created_ns == raw.get("time_created_ns"):
                append(old)
                continue
        try:
            append(_entry(raw, index, caches, keep_frames))
        except (_BadEntry, TypeError, ValueError, AttributeError, OverflowError, KeyError, IndexError):
            skipped += 1
    # Entries reused from `previous` were not parsed here, so their names are not in the cache.
    if any(is_coalesced_marker(op) for _, op, _, _ in caches.names.values()) or (
            previous and any(is_coalesced_marker(e.op) for e in out)):
        out = complete_coalesced(out)
    return tuple(out), skipped


def is_coalesced_marker(op: str) -> bool:
    """The entry that closes a coalesced group: `coalesced` (p2p batches) or `<OP>_coalesced`."""
    return op == "coalesced" or op.endswith("_coalesced")


def complete_coalesced(entries: list[Entry] | tuple[Entry, ...]) -> list[Entry]:
    """Ops inside a coalesced group (batch_isend_irecv, *_coalesced) are recorded without their own
    completion events: NCCL leaves them 'scheduled' and never retires them; only the group's closing
    entry completes. Each op takes the completion of the closing entry that follows it in its
    group (same process group, same p2p_seq_id for p2p, collective_seq_id otherwise)."""
    out = list(entries)
    closing: dict[tuple, Entry] = {}
    for i in range(len(out) - 1, -1, -1):
        e = out[i]
        key = (e.pg_name, e.is_p2p, e.p2p_seq_id if e.is_p2p else e.collective_seq_id)
        if is_coalesced_marker(e.op):
            closing[key] = e
        elif not e.finished:
            end = closing.get(key)
            if end is not None and end.finished:
                out[i] = e._replace(state=end.state, retired=end.retired, time_started_ns=end.time_started_ns,
                                    time_completed_ns=end.time_completed_ns)
    return out


def _int_field(e: dict, key: str, default: int | None) -> int | None:
    v = e.get(key)
    if type(v) is int:
        return v
    if v is None:
        return default
    if type(v) is str:
        parsed = _opt_int(v)
        return default if parsed is None else parsed
    raise _BadEntry(key)


# The keys every 2.10 dump writes (pickle and JSON); one C-level call fetches them all.
_V210_KEYS = (
    "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
    "time_created_ns", "state", "is_p2p", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
    "retired", "timeout_ms", "time_discovered_started_ns", "time_discovered_completed_ns", "thread_id",
    "thread_name",
)
_get_v210 = itemgetter(*_V210_KEYS)


def _entry(e: dict, index: int, c: _Caches, keep_frames: bool) -> Entry:
    get = e.get
    try:
        (record_id, pg_id, pg_raw, seq, p2p_seq, op_id, pname, created, state, is_p2p, in_sizes, out_sizes,
         in_dtypes, out_dtypes, retired, timeout, started, completed, thread_id, thread_name) = _get_v210(e)
        if not (type(record_id) is type(pg_id) is type(seq) is type(p2p_seq) is type(op_id) is type(created) is int):
            raise KeyError
    except KeyError:  # older or odd dump: field by field, tolerant
        record_id = _int_field(e, "record_id", index)
        pg_id = _int_field(e, "pg_id", -1)
        pg_raw = get("process_group")
        seq = _int_field(e, "collective_seq_id", None)
        if seq is None:  # the first recorder called it seq_id
            seq = _int_field(e, "seq_id", -1)
        p2p_seq = _int_field(e, "p2p_seq_id", 0)
        op_id = _int_field(e, "op_id", None)
        pname = get("profiling_name")
        created = _int_field(e, "time_created_ns", 0)
        state, is_p2p, retired, timeout = get("state"), get("is_p2p"), get("retired"), get("timeout_ms")
        in_sizes, out_sizes, in_dtypes, out_dtypes = (
            get("input_sizes"), get("output_sizes"), get("input_dtypes"), get("output_dtypes"))
        started, completed = get("time_discovered_started_ns"), get("time_discovered_completed_ns")
        thread_id, thread_name = get("thread_id"), get("thread_name")

    if type(pname) is not str:
        raise _BadEntry("profiling_name")
    parsed = c.names.get(pname)
    if parsed is None:
        if len(pname) > 4096:
            raise _BadEntry("profiling_name")
        parsed = c.names[pname] = parse_profiling_name(pname)
    backend, op, p2p_src, p2p_dst = parsed

    pg = c.pg.get(pg_raw) if type(pg_raw) is tuple or type(pg_raw) is str else None
    if pg is None:
        pg = _process_group(pg_raw)
        if type(pg_raw) is tuple or type(pg_raw) is str:
            c.pg[pg_raw] = pg

    if type(is_p2p) is not bool:
        is_p2p = op in P2P_OPS
    if type(started) is not int or started <= 0:
        started = None
    if type(completed) is not int or completed <= 0:
        completed = None
    duration = get("duration_ms")
    if duration is not None and type(duration) is not float:
        duration = float(duration) if type(duration) is int else None
    if duration is not None and not (duration >= 0):  # also drops NaN
        duration = None
    if type(timeout) is not int:
        timeout = _opt_int(timeout)
    if type(state) is not str:
        state = "scheduled" if state is None else str(state)[:40]
    if type(retired) is not bool:
        retired = None
    if thread_id is not None and type(thread_id) is not str:
        thread_id = str(thread_id) if type(thread_id) is int else None
    if type(thread_name) is not str:
        thread_name = None

    frames_raw = get("frames")
    if frames_raw:
        frames, call_site = _frames(frames_raw, c, keep_frames)
    else:
        frames, call_site = _EMPTY, None

    return _new_tuple(Entry, (  # tuple.__new__ skips NamedTuple's argument parsing: 2.5x cheaper
        record_id, pg_id, pg[0], pg[1], seq, p2p_seq, op_id, is_p2p, pname, backend, op, p2p_src, p2p_dst,
        *_tensors((pname, pg), in_sizes, out_sizes, in_dtypes, out_dtypes, c),
        state, retired, created, started, completed, duration, timeout, thread_id, thread_name, frames, call_site,
    ))


def _process_group(raw: Any) -> tuple[str, str]:
    if type(raw) in (tuple, list) and len(raw) >= 1:
        name = raw[0]
        desc = raw[1] if len(raw) > 1 else ""
        if type(name) is str and type(desc) is str:
            return name, desc
        raise _BadEntry("process_group")
    if type(raw) is str:
        return raw, ""
    if raw is None:
        return "", ""
    raise _BadEntry("process_group")


_EMPTY: tuple = ()
_new_tuple = tuple.__new__


def _tensors(key: tuple, in_sizes: Any, out_sizes: Any, in_dtypes: Any, out_dtypes: Any, c: _Caches) -> tuple:
    """Sizes and dtypes of an entry. Entries of one op mostly repeat the previous one's shapes:
    comparing the raw lists with == (in C) is far cheaper than converting them again."""
    last = c.tensors.get(key)
    if last is not None:
        raw = last[0]
        if raw[0] == in_sizes and raw[1] == out_sizes and raw[2] == in_dtypes and raw[3] == out_dtypes:
            return last[1]
    out = (_sizes(in_sizes, c), _sizes(out_sizes, c), _dtypes(in_dtypes, c), _dtypes(out_dtypes, c))
    c.tensors[key] = ((in_sizes, out_sizes, in_dtypes, out_dtypes), out)
    return out


def _sizes(raw: Any, c: _Caches) -> tuple[tuple[int, ...], ...]:
    if type(raw) is list and len(raw) == 1:  # fast path: one tensor, the common case
        inner = raw[0]
        if type(inner) is list and len(inner) <= 16:
            hit = c.sizes.get((tuple(inner),))
            if hit is not None:
                return hit
    if not raw:
        if raw is None or type(raw) in (list, tuple):
            return _EMPTY
        raise _BadEntry("sizes")
    if type(raw) is not list and type(raw) is not tuple:
        raise _BadEntry("sizes")
    # A shape must be a sequence itself: tuple() would also turn a set, a str or bytes into "dims".
    if any(type(shape) is not list and type(shape) is not tuple for shape in raw):
        raise _BadEntry("sizes")
    if len(raw) > MAX_SIZE_ELEMENTS or sum(map(len, raw)) > MAX_SIZE_ELEMENTS:
        raise _BadEntry("sizes")
    key = tuple(map(tuple, raw))
    hit = c.sizes.get(key)
    if hit is None:
        for shape in key:
            for d in shape:
                if type(d) is not int or d < 0:
                    raise _BadEntry("sizes")
        hit = c.sizes[key] = key
    return hit


def _dtypes(raw: Any, c: _Caches) -> tuple[str, ...]:
    if type(raw) is list and len(raw) == 1:  # fast path: one tensor, keyed by the name itself
        hit = c.dtypes.get(raw[0])
        if hit is not None:
            return hit
    if not raw:
        if raw is None or type(raw) in (list, tuple):
            return _EMPTY
        raise _BadEntry("dtypes")
    if type(raw) is not list and type(raw) is not tuple or len(raw) > MAX_DTYPES:
        raise _BadEntry("dtypes")
    key = tuple(raw)
    hit = c.dtypes.get(key)
    if hit is None:
        if not all(type(d) is str and len(d) < 64 for d in key):
            raise _BadEntry("dtypes")
        hit = c.dtypes[key] = key
        if len(key) == 1:
            c.dtypes[key[0]] = key
    return hit


def is_library_frame(frame: Frame) -> bool:
    """Frames of torch itself (and C++ frames): the user's call site is the first frame that is not one."""
    f = frame.filename
    return not f.endswith(".py") or "/torch/" in f or "\\torch\\" in f


def _frames(raw: Any, c: _Caches, keep: bool) -> tuple[tuple[Frame, ...], Frame | None]:
    if type(raw) is not list and type(raw) is not tuple:
        raise _BadEntry("frames")
    if len(raw) > MAX_FRAMES:
        raw = raw[:MAX_FRAMES]
    if not keep:
        return _EMPTY, _call_site(raw, c)
    key = tuple(map(id, raw))
    hit = c.stack.get(key)
    if hit is None:
        frames = tuple(c.frame_of(f)[0] for f in raw)
        hit = c.stack[key] = (frames, _call_site(raw, c))
    return hit


def _call_site(raw: list | tuple, c: _Caches) -> Frame | None:
    cache = c.frame
    first = None
    for f in raw:
        hit = cache.get(id(f)) or c.frame_of(f)
        if not hit[1]:
            return hit[0]
        if first is None:
            first = hit[0]
    return first
