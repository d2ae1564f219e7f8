"""A rank is every Flight Recorder its process holds, read as one dump.

Up to torch 2.13 a process had one recorder (gloo's, or the legacy NCCL one on CUDA builds). The
CUDA wheels of 2.14 have both, and from 2.15 every backend that does not record itself (nccl2, the
default `nccl` there; nccl-lazy, mpi, ucc, out-of-tree backends) gets a recorder of its own, filled
by PyTorch's `FlightRecorderHook`. Each is read on its own (its own cursor, its own buffer) and the
rank's dump is their union:
- each recorder numbers its records from 0, so a recorder's record ids are moved into a range of
  their own (`record_offset`): ids stay unique within the rank and only grow within a recorder, which
  is what the live state's "new, changed, restarted" rules need; gloo's (the default) keep theirs;
- groups are already apart: decode files a group's ops under `group_name(pg, backend)`.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import replace

from frexport.model.dump import (
    DEFAULT_RECORDER,
    Entry,
    ProcessGroupConfig,
    ProcessGroupStatus,
    RankDump,
    split_group_name,
)
from frexport.model.entry_runs import fields_at, runs
from frexport.model.rank_trace import RankTrace

# A recorder's records are numbered from 0 by one counter per process: 2**40 of them would take a
# million collectives a second for 12 days. Ranges are picked by a hash of the recorder's name, so
# they do not depend on which recorders exist yet (one created later must not move the others).
RECORD_ID_SPAN = 1 << 40
_RANGES = 1023


def record_offset(recorder: str) -> int:
    """Where this recorder's record ids start in its rank's merged dump."""
    if recorder == DEFAULT_RECORDER:
        return 0
    return ((zlib.crc32(recorder.encode()) % _RANGES) + 1) * RECORD_ID_SPAN


def recorder_record_id(record_id: int) -> int:
    """The id the recorder itself gave a record (spans and reports show this one)."""
    return record_id % RECORD_ID_SPAN


class Shifter:
    """Moves one recorder's entries into its record-id range, reusing what it moved last time: a
    poller's decode reuses the Entry objects of entries that did not change, and so does this."""

    __slots__ = ("offset", "_done")

    def __init__(self, recorder: str) -> None:
        self.offset = record_offset(recorder)
        self._done: dict[int, tuple[Entry, Entry]] = {}  # record id -> (entry as decoded, moved)

    def __call__(self, entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        if not self.offset:
            return entries
        done, out, offset = self._done, [], self.offset
        now: dict[int, tuple[Entry, Entry]] = {}
        for e in entries:
            hit = done.get(e.record_id)
            moved = hit[1] if hit is not None and hit[0] is e else e._replace(record_id=e.record_id + offset)
            now[e.record_id] = (e, moved)
            out.append(moved)
        self._done = now
        return tuple(out)


def merge_recorders(dumps: dict[str, RankDump], shifters: dict[str, Shifter] | None = None) -> RankDump:
    """One rank's dump from its recorders' dumps (recorder name -> dump), the default one first.
    `shifters` (recorder -> Shifter) keeps moved entries between calls for the same rank."""
    shifters = {} if shifters is None else shifters
    order = sorted(dumps, key=lambda name: (name != DEFAULT_RECORDER, record_offset(name), name))
    first = dumps[order[0]]
    if len(order) == 1 and not record_offset(order[0]):
        return replace(first, recorders=tuple(order))
    entries: list[Entry] = []
    pg_config: list[ProcessGroupConfig] = []
    pg_status: list[ProcessGroupStatus] = []
    notes: list[str] = []
    for name in order:
        d = dumps[name]
        shift = shifters.get(name)
        if shift is None:
            shift = shifters[name] = Shifter(name)
        entries.extend(shift(d.entries))
        pg_config.extend(d.pg_config)
        pg_status.extend(d.pg_status)
        notes.extend(f"{name} recorder: {n}" for n in d.notes)
    for gone in [n for n in shifters if n not in dumps]:
        del shifters[gone]
    return replace(
        first, entries=tuple(entries), pg_config=tuple(pg_config), pg_status=tuple(pg_status), notes=tuple(notes),
        size_bytes=sum(d.size_bytes for d in dumps.values()),
        dumped_at_ns=max((d.dumped_at_ns for d in dumps.values() if d.dumped_at_ns), default=first.dumped_at_ns),
        declared_world_size=next((d.declared_world_size for d in dumps.values() if d.declared_world_size), None),
        recorders=tuple(order))


_ID_NAME = fields_at("pg_id", "pg_name")


def pg_names(dump: RankDump) -> dict[int, str]:
    """A recorder's pg_id -> the name its group's ops are filed under, from its entries (pg_status is
    keyed by the process-local pg_id). (C-level passes: the sidecar asks at every entries read, over
    the whole buffer; the last entry of a pg_id names it, as a loop would: by runs of one group.)"""
    return dict(key for key, _n in runs(dump.entries, _ID_NAME))


def group_statuses(statuses: dict[str, tuple[ProcessGroupStatus, ...]],
                   names: dict[str, dict[int, str]]) -> dict[str, ProcessGroupStatus]:
    """Each recorder's pg_status rows by the name its group's ops are filed under (`names`: per
    recorder, `pg_names` of its last entries); a row whose group has no op in the buffer is left out
    (nothing to file it under)."""
    out: dict[str, ProcessGroupStatus] = {}
    for recorder, rows in statuses.items():
        known = names.get(recorder)
        if not known or not rows:
            continue
        for row in rows:
            name = known.get(row.pg_id)
            if name is not None:
                out[name] = row
    return out


def trace_recorders(trace: RankTrace) -> frozenset[str]:
    """The recorders a trace's groups were read from (their filed names say: `group_name`)."""
    return frozenset(split_group_name(name)[1] or DEFAULT_RECORDER for name in trace.groups)


def other_recorder(a: RankTrace, b: RankTrace) -> bool:
    """`b` is another recorder of the same process as `a`: the same rank, no group in common, times that
    overlap (a rank read from torch's dump file of its nccl2 recorder and from its gloo dump)."""
    if a.rank != b.rank or not a.groups or not b.groups or a.groups.keys() & b.groups.keys():
        return False
    if trace_recorders(a) & trace_recorders(b):
        return False
    first = [t.first_created_ns for t in (a, b) if t.first_created_ns]
    last = [x for t in (a, b) if (x := t.last_event_ns or t.last_created_ns)]
    return len(first) < 2 or len(last) < 2 or max(first) <= min(last)


def merge_traces(a: RankTrace, b: RankTrace) -> RankTrace:
    """One rank's trace from two of its recorders' traces (post-mortem: each recorder is its own file),
    as `merge_recorders` does for dumps: their groups side by side, each with its own rule."""
    sig_off, site_off = len(a.signatures), len(a.call_sites)
    groups = dict(a.groups)
    for name, g in b.groups.items():
        groups[name] = replace(
            g, sig=array("i", [i + sig_off for i in g.sig]),
            site=array("i", [s + site_off if s >= 0 else s for s in g.site]),
            p2p=[op._replace(sig=op.sig + sig_off, site=op.site + site_off if op.site >= 0 else op.site)
                 for op in g.p2p])
    firsts = [t.first_created_ns for t in (a, b) if t.first_created_ns is not None]
    lasts = [t.last_created_ns for t in (a, b) if t.last_created_ns is not None]
    events = [t.last_event_ns for t in (a, b) if t.last_event_ns]
    dumped = [t.dumped_at_ns for t in (a, b) if t.dumped_at_ns]
    return replace(
        a, source=f"{a.source} + {b.source}", notes=a.notes + b.notes, n_entries=a.n_entries + b.n_entries,
        pg_config=tuple(a.pg_config) + tuple(b.pg_config), pg_status=tuple(a.pg_status) + tuple(b.pg_status),
        first_created_ns=min(firsts, default=None), last_created_ns=max(lasts, default=None),
        signatures=a.signatures + b.signatures, call_sites=a.call_sites + b.call_sites, groups=groups,
        last_event_ns=max(events, default=None), timeouts_ms={**a.timeouts_ms, **b.timeouts_ms},
        dumped_at_ns=max(dumped, default=None), dumped_at_is_clock=a.dumped_at_is_clock and b.dumped_at_is_clock,
        signature_ids=None)
