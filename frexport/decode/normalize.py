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

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any

from frexport.decode.errors import DecodeError
from frexport.decode.fields import (
    EMPTY,
    INT64_MAX,
    INT64_MIN,
    KNOWN_VERSION,
    MAX_ENTRIES,
    BadEntry,
    Caches,
    coalesced_completions,
    discovered_ns,
    duration_ms,
    frames,
    get_v210,
    int_field,
    is_coalesced_marker,
    opt_int,
    parse_ranks,
    parse_version,
    recorder_backend,
    tensors,
)
from frexport.model.dump import (
    P2P_OPS,
    Entry,
    ProcessGroupConfig,
    ProcessGroupStatus,
    RankDump,
    group_name,
)
from frexport.model.entry_runs import distinct, fields_at
from frexport.model.outcome import edges
from frexport.model.world import MAX_WORLD

_LO, _HI = INT64_MIN, INT64_MAX
_KNOWN_TOP_KEYS = frozenset({"version", "entries", "pg_config", "pg_status", "nccl_version", "comm_lib_version"})


def require_dump_fields(top: dict, source: str) -> None:
    """A document without a field of any Flight Recorder version is not a dump (not an empty rank)."""
    if not _KNOWN_TOP_KEYS.intersection(k for k in top if isinstance(k, str)):
        raise DecodeError(source, "not_a_dump", "not a Flight Recorder dump (none of the fields of any version: "
                          "version, entries, pg_config, pg_status)")


@dataclass(frozen=True)
class KindedEntries:
    """Entries decoded by kind (json_decode.parse_tail, the live sidecar's new tail): the plain data of
    each kind's first entry (`firsts`), and per entry its kind and its numbers as a typed decode gave
    them (`NUMBERS`, 64-bit integers, a duration in bounds). A kind is everything of an entry but those
    numbers, so the field rules run once per kind (`_kinded`) and give what they give entry by entry."""

    firsts: list[dict]
    kind_of: list[int]
    numbers: list[tuple]

    NUMBERS = ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
               "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms")

    def __len__(self) -> int:
        return len(self.kind_of)

    def __getitem__(self, cut: slice) -> KindedEntries:
        return KindedEntries(self.firsts, self.kind_of[cut], self.numbers[cut])


class ColumnEntries(ABC):
    """Entries as columns that can build their Entry objects without a Python step per entry (the
    compiled scanner's, decode/pickle_tail.py): `build` takes the template of each kind (an Entry the
    field rules made from the kind's plain first entry, or None where they refuse it) and gives every
    entry, with `kinded` the same entries as KindedEntries (where the last snapshot's are reused)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __getitem__(self, cut: slice) -> ColumnEntries: ...

    @abstractmethod
    def kinded(self) -> KindedEntries: ...

    @abstractmethod
    def build(self, template: Callable[[dict], Entry | None]) -> tuple[list[Entry], int]: ...


def normalize(raw: Any, source: str, fmt: str, rank: int | None = None, dumped_at_ns: int | None = None,
              size_bytes: int = 0, keep_frames: bool = True, previous: dict[int, Entry] | None = None,
              carry: tuple[Entry, ...] = (), max_entries: int = MAX_ENTRIES, recorder: str | None = None) -> RankDump:
    """`recorder`: the backend whose recorder wrote it, where the caller knows: names its groups when
    no op does (a recorder whose groups have not recorded yet).

    `keep_frames=False` keeps only each entry's call site: the bulk analyzer does not need whole stacks.

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
        require_dump_fields(top, source)
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
    if not isinstance(entries_raw, (list, tuple, KindedEntries, ColumnEntries)):
        raise DecodeError(source, "not_a_dump", f"'entries' is a {type(entries_raw).__name__}, not a list")
    if len(entries_raw) > max_entries:
        notes.append(f"{len(entries_raw)} entries: kept the newest {max_entries}")
        entries_raw = entries_raw[-max_entries:]

    entries, skipped = _entries(entries_raw, keep_frames, previous)
    if carry:
        entries = (carry + entries)[-max_entries:]
        if any(map(is_coalesced_marker, distinct(entries[len(carry):], _OP_AT))):  # (by runs, in C)
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
        pg_config=_pg_config(top.get("pg_config"),
                             recorder_backend(e.backend for e in edges(entries)) or recorder or "", notes),
        pg_status=_pg_status(top.get("pg_status")),
        entries=entries,
        notes=tuple(notes),
        dumped_at_ns=dumped_at_ns,
        size_bytes=size_bytes,
    )


def _pg_config(raw: Any, backend: str, notes: list[str]) -> tuple[ProcessGroupConfig, ...]:
    """The groups' configs, named as the recorder's ops file them (`model.dump.group_name`)."""
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
        if ranks is None and _lists_members(val.get("ranks") if isinstance(val, dict) else val):
            notes.append(f"process group {name[:64]!r}: member list unreadable or naming a rank no job has "
                         f"(>= {MAX_WORLD}, or negative): ignored")
        # (an unnamed one that lists ranks holds those of the last group the process created: ranks of
        # the job, not any group's membership; analysis/membership.py reads it so)
        out.append(ProcessGroupConfig(group_name(name, backend) if name else name, desc, ranks))
    return tuple(out)


def _lists_members(v: Any) -> bool:
    """Whether a raw member list is more than gloo's empty "[]"."""
    return bool(v.strip().strip("[]").strip()) if isinstance(v, str) else bool(v)


def _pg_status(raw: Any) -> tuple[ProcessGroupStatus, ...]:
    if not isinstance(raw, dict):
        return ()
    out = []
    for key, val in list(raw.items())[:100_000]:
        pg_id = opt_int(key)
        if pg_id is None or not isinstance(val, dict):
            continue
        out.append(
            ProcessGroupStatus(
                pg_id,
                opt_int(val.get("last_enqueued_collective")),
                opt_int(val.get("last_started_collective")),
                opt_int(val.get("last_completed_collective")),
            )
        )
    return tuple(sorted(out))


def _entries(raw_entries: list | tuple | KindedEntries | ColumnEntries, keep_frames: bool,
             previous: dict[int, Entry] | None = None) -> tuple[tuple[Entry, ...], int]:
    caches = Caches()
    if isinstance(raw_entries, ColumnEntries) and not previous:
        out, skipped = raw_entries.build(partial(_template, caches=caches, keep_frames=keep_frames))
    elif isinstance(raw_entries, (KindedEntries, ColumnEntries)):
        kinded = raw_entries.kinded() if isinstance(raw_entries, ColumnEntries) else raw_entries
        out, skipped = _kinded(kinded, keep_frames, caches, previous)
    else:
        out, skipped = _each(raw_entries, keep_frames, caches, previous)
    # Entries reused from `previous` were not parsed here, so their names are not in the cache.
    if any(is_coalesced_marker(op) for _, op, _, _ in caches.names.values()) or (
            previous and any(is_coalesced_marker(e.op) for e in out)):
        out = complete_coalesced(out)
    return tuple(out), skipped


def _each(raw_entries: list | tuple, keep_frames: bool, caches: Caches,
          previous: dict[int, Entry] | None) -> tuple[list[Entry], int]:
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
        except _REFUSED:
            skipped += 1
    return out, skipped


_REFUSED = (BadEntry, TypeError, ValueError, AttributeError, OverflowError, KeyError, IndexError)


def _kinded(kinded: KindedEntries, keep_frames: bool, caches: Caches,
            previous: dict[int, Entry] | None) -> tuple[list[Entry], int]:
    """`_each` on entries given by kind: each kind's first entry through `_entry`, every entry of the
    kind that Entry with its own numbers, read by the same rules. What refuses an entry is its kind
    (its numbers are well-typed 64-bit integers): every entry of a refused kind is skipped."""
    # each kind's Entry fields cut once (group; op to sizes; timeout to the end), not once per entry
    built: list[tuple[tuple, tuple, tuple] | None] = []
    for raw in kinded.firsts:
        e: tuple | None = _template(raw, caches, keep_frames)  # (as a plain tuple: sliced by position)
        built.append(None if e is None else (e[_GROUP], e[_OP], e[_REST]))
    out: list[Entry] = []
    append = out.append
    skipped = 0
    for kind, (record_id, pg_id, seq, p2p_seq, op_id, created, started, completed, duration) in zip(
            kinded.kind_of, kinded.numbers):
        if previous:  # as `_each`: a finished entry seen before is reused, before any rule
            old = previous.get(record_id)
            if old is not None and old.finished and old.time_created_ns == created:
                append(old)
                continue
        parts = built[kind]
        if parts is None:
            skipped += 1
            continue
        group, op, rest = parts
        # the field rules, with their usual values (None: not yet, not timed) answered without a call
        append(_new_tuple(Entry, (record_id, pg_id, *group, seq, p2p_seq, op_id, *op, created,
                                  None if started is None else discovered_ns(started),
                                  None if completed is None else discovered_ns(completed),
                                  None if duration is None else duration_ms(duration), *rest)))
    return out, skipped


def _template(raw: dict, caches: Caches, keep_frames: bool) -> Entry | None:
    """A kind's plain first entry through the field rules (None: refused), for its numbers to be
    replaced by each entry's own."""
    try:
        return _entry(raw, 0, caches, keep_frames)
    except _REFUSED:
        return None


# The fields of an Entry its kind gives (the others are its numbers), as `_kinded` builds it
_GROUP = slice(Entry._fields.index("pg_name"), Entry._fields.index("collective_seq_id"))
_OP = slice(Entry._fields.index("is_p2p"), Entry._fields.index("time_created_ns"))
_REST = slice(Entry._fields.index("timeout_ms"), None)


def complete_coalesced(entries: list[Entry] | tuple[Entry, ...]) -> list[Entry]:
    """Each op inside a coalesced group takes the completion of the entry that closes the group
    (fields.coalesced_completions says which)."""
    out = list(entries)
    for i, j in list(coalesced_completions(out, _op, _coalesced_key, _settled)):
        end = out[j]
        out[i] = out[i]._replace(state=end.state, retired=end.retired, time_started_ns=end.time_started_ns,
                                 time_completed_ns=end.time_completed_ns)
    return out


_op = attrgetter("op")
_OP_AT = fields_at("op")


def _coalesced_key(e: Entry) -> tuple:
    return e.pg_name, e.is_p2p, e.p2p_seq_id if e.is_p2p else e.collective_seq_id


def _settled(e: Entry) -> bool:
    return e.finished


def _entry(e: dict, index: int, c: Caches, keep_frames: bool) -> Entry:
    get = e.get
    try:
        (record_id, pg_id, pg_raw, seq, p2p_seq, op_id, pname, created, state, is_p2p, in_sizes, out_sizes,
         in_dtypes, out_dtypes, retired, timeout, started, completed, thread_id, thread_name) = get_v210(e)
        if not (type(record_id) is type(pg_id) is type(seq) is type(p2p_seq) is type(op_id) is type(created) is int):
            raise KeyError
        if not (_LO <= seq <= _HI and _LO <= created <= _HI and _LO <= record_id <= _HI and _LO <= p2p_seq <= _HI
                and _LO <= pg_id <= _HI and _LO <= op_id <= _HI):
            raise KeyError  # out of 64 bits: field by field, where the rules make it absent (a 400-digit
            # sequence number overflowed the trace's int64 columns and made the whole rank unreadable)
    except KeyError:  # older or odd dump: field by field, tolerant
        record_id = int_field(e, "record_id", index)
        pg_id = int_field(e, "pg_id", -1)
        pg_raw = get("process_group")
        seq = int_field(e, "collective_seq_id", None)
        if seq is None:  # the first recorder called it seq_id
            seq = int_field(e, "seq_id", -1)
        p2p_seq = int_field(e, "p2p_seq_id", 0)
        op_id = int_field(e, "op_id", None)
        pname = get("profiling_name")
        created = int_field(e, "time_created_ns", 0)
        state, is_p2p, retired, timeout = get("state"), get("is_p2p"), get("retired"), get("timeout_ms")
        in_sizes, out_sizes, in_dtypes, out_dtypes = (
            get("input_sizes"), get("output_sizes"), get("input_dtypes"), get("output_dtypes"))
        started, completed = get("time_discovered_started_ns"), get("time_discovered_completed_ns")
        thread_id, thread_name = get("thread_id"), get("thread_name")

    backend, op, p2p_src, p2p_dst = c.profiling_name(pname)
    pg = c.group(pg_raw, backend)

    if type(is_p2p) is not bool:
        is_p2p = op in P2P_OPS
    started, completed = discovered_ns(started), discovered_ns(completed)
    duration = duration_ms(get("duration_ms"))
    timeout = opt_int(timeout)  # an int too: -10**400 broke the live stall threshold derived from it
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
        stack, call_site = frames(frames_raw, c, keep_frames)
    else:
        stack, call_site = EMPTY, None

    return _new_tuple(Entry, (  # tuple.__new__ skips NamedTuple's argument parsing: 2.5x cheaper
        record_id, pg_id, pg[0], pg[1], seq, p2p_seq, op_id, is_p2p, pname, backend, op, p2p_src, p2p_dst,
        *tensors((pname, pg), in_sizes, out_sizes, in_dtypes, out_dtypes, c),
        state, retired, created, started, completed, duration, timeout, thread_id, thread_name, stack, call_site,
    ))


_new_tuple = tuple.__new__


