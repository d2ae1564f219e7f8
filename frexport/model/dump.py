"""The normalized Flight Recorder model shared by every part of frexport.

Whatever the source (pickle file, JSON file, worker-server body) and whatever
the format version, a dump becomes one `RankDump` holding `Entry` records.
Everything is immutable. Entries are NamedTuples because a dump can hold
thousands of them and NamedTuple construction is several times cheaper than
a frozen dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from frexport.model.call_site import Frame
from frexport.model.outcome import COMPLETED, SCHEDULED, STARTED, settled

__all__ = ["COMPLETED", "DEFAULT_RECORDER", "P2P_OPS", "SCHEDULED", "STARTED", "Entry", "Frame", "InputError",
           "ProcessGroupConfig", "ProcessGroupStatus", "RankDump", "group_name", "split_group_name"]

P2P_OPS = frozenset({"send", "recv"})

# The recorder every torch has (`kDefaultFRBackend`): gloo's, the one `fr_trace_json` and 2.13's
# `_dump_fr_trace` read. Its groups keep their plain names; "" is a dump whose names carry no backend.
DEFAULT_RECORDER = "gloo"


def group_name(pg_name: str, backend: str) -> str:
    """The name a process group's ops are filed under: `<backend>:<pg_name>` unless the backend is
    gloo's (or unknown). One group of a `cpu:gloo,cuda:nccl` job is two sequences of ops, one per
    backend, each numbered from 1 in a recorder of its own (the legacy NCCL one, or, from torch 2.15,
    a hooked backend's such as nccl2's): read as one group they would look desynced."""
    if backend == DEFAULT_RECORDER or not backend or pg_name.startswith(f"{backend}:"):
        return pg_name  # (the last: a merged dump frexport wrote back in PyTorch's format, read again)
    return f"{backend}:{pg_name}"


def split_group_name(name: str) -> tuple[str, str]:
    """(process group name, backend) of a `group_name` ("" for gloo's and unknown backends)."""
    backend, sep, pg = name.partition(":")
    return (pg, backend) if sep else (name, "")


class ProcessGroupConfig(NamedTuple):
    """One pg_config record. `ranks` is None when the dump does not say (gloo writes "[]")."""

    name: str
    desc: str
    ranks: tuple[int, ...] | None


class ProcessGroupStatus(NamedTuple):
    """One pg_status record, keyed in the dump by the *local* pg_id (not the PG name)."""

    pg_id: int
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


class Entry(NamedTuple):
    record_id: int
    pg_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int | None
    is_p2p: bool
    profiling_name: str
    backend: str  # "nccl", "gloo", ... ("" when the name has no prefix)
    op: str  # "all_reduce", "send", "coalesced", ...
    p2p_src: int | None  # group-local peers of a send/recv, from "send 1->2" / "recv 3<-0"
    p2p_dst: int | None
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str
    retired: bool | None  # None: the dump predates the field
    time_created_ns: int
    time_started_ns: int | None  # None: unknown (PyTorch writes None in pickles, 0 in JSON)
    time_completed_ns: int | None
    duration_ms: float | None
    timeout_ms: int | None
    thread_id: str | None
    thread_name: str | None
    frames: tuple[Frame, ...]  # innermost first; () in JSON dumps, which never carry stacks
    call_site: Frame | None  # innermost frame outside torch itself: where the user's code issued the op

    @property
    def seq_id(self) -> int:
        """The per-group sequence number that identifies this op across ranks."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    @property
    def finished(self) -> bool:
        """Completed or retired: the recorder will not change this entry again (see model/outcome.py
        for how it ended)."""
        return settled(self.state, self.retired)


@dataclass(frozen=True)
class InputError:
    """A file that could not be read, and why: reported, and evidence of a rank's missing dump."""

    file: str
    error: str
    rank: int | None = None  # the rank its name carries: an unreadable file is that rank's missing dump


@dataclass(frozen=True, slots=True)
class RankDump:
    """One rank's Flight Recorder snapshot."""

    rank: int | None
    source: str  # file path or URL it came from
    format: str  # "pickle" | "json"
    version: tuple[int, int] | None  # None: unversioned (pre-2.2 list form) or unparseable
    version_text: str | None
    comm_lib_version: str | None
    pg_config: tuple[ProcessGroupConfig, ...]
    pg_status: tuple[ProcessGroupStatus, ...]
    entries: tuple[Entry, ...]
    notes: tuple[str, ...] = ()
    dumped_at_ns: int | None = None  # when the snapshot was taken, if known (file mtime, poll time)
    size_bytes: int = 0
    declared_world_size: int | None = None  # from beside the dump: frexport.agent's rank-<N>.json
    # False where dumped_at_ns is a time nobody saw the dump taken at and cannot be its dump time: a file
    # that was in a watched directory before the sidecar started, dated past its wait's timeout (a copy)
    dumped_at_is_clock: bool = True
    recorders: tuple[str, ...] = ()  # the recorders it was read from, where known (model/recorders.py)
    read_via: str = ""  # live: "frexport.agent" (its handlers) or "pytorch" (PyTorch's own handlers)
    read_mode: str = ""  # live: "status_first" (sources/entry_schedule.py) or "whole_dump"
    # torch 2.15's c10d health check where the rank answered one: the backends that aborted (a watchdog
    # timeout, an async error; sticky for the process); None: not asked or not there
    unhealthy_backends: tuple[str, ...] | None = None

    def newest_event_ns(self) -> int:
        """The newest time the rank's recorder wrote (an entry created, its start or completion
        discovered); 0 for none: the rank was alive, and this dump not yet taken, at least until then.
        (One C pass where it is built: the sidecar asks at every entries read, over the whole buffer.)"""
        from frexport.model.entry_runs import newest  # (it reads Entry's fields: imported once this is)
        return newest(self.entries, _TIMES)

    @property
    def world_size(self) -> int | None:
        """Ranks of the default process group when pg_config lists them (gloo's does not), else
        what the agent declared."""
        for pg in self.pg_config:
            if pg.ranks and (pg.desc == "default_pg" or pg.name == "0"):
                return len(pg.ranks)
        return self.declared_world_size


_TIMES = tuple(map(Entry._fields.index, ("time_created_ns", "time_started_ns", "time_completed_ns")))
