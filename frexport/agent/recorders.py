"""The Flight Recorders of this process, and how to dump each (runs inside the trainer).

- gloo's, the default one (`_dump_fr_trace`; `kDefaultFRBackend`), on every torch;
- the legacy NCCL backend's own (`_dump_nccl_trace`), on CUDA builds (2.14 and later: also the CPU
  wheels of 2.13 lack it); it is empty for gloo groups, which is why it cannot stand for the rank;
- from torch 2.15, one per backend that does not record itself (nccl2, the default `nccl` there,
  nccl-lazy, mpi, ucc, out-of-tree backends), filled by `FlightRecorderHook` and dumped with
  `_dump_fr_trace(..., backend=<name>)`. An unknown name dumps an empty recorder, so the names are
  taken from the process groups' backends and kept where the recorder holds a group.
"""

from __future__ import annotations

import functools
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

DEFAULT = "gloo"
LEGACY_NCCL = "nccl"  # the name the legacy recorder's ops carry ("nccl:all_reduce")
# Names a `nccl` group's recorder may have where torch resolves it to another implementation.
_NCCL_NAMES = ("nccl2", "nccl-lazy", "nccl-legacy")
_REFRESH_S = 2.0  # recorders are re-listed at most this often (a poll asks once per rank)

Dump = Callable[..., bytes]


class Recorders:
    """Which recorders hold something, re-listed at most every _REFRESH_S."""

    def __init__(self, c10d: Any, dist: Any) -> None:
        self._c10d = c10d
        self._dist = dist
        self._per_backend = _takes_backend(c10d._dump_fr_trace)
        self._lock = threading.Lock()
        self._names: list[str] = [DEFAULT]
        self._listed = 0.0

    def dump(self, name: str) -> Dump | None:
        """The pickle dump of one recorder (includeCollectives, includeStackTraces, onlyActive), or None
        where this torch has no such recorder. No name: the first that holds a group (a client that
        predates recorders, such as a job-level view proxying one pickle per rank)."""
        if not name:
            name = self.names()[0]
        if name == DEFAULT:
            return self._c10d._dump_fr_trace
        if name == LEGACY_NCCL and hasattr(self._c10d, "_dump_nccl_trace"):
            return self._c10d._dump_nccl_trace
        if self._per_backend:
            return functools.partial(self._c10d._dump_fr_trace, backend=name)
        return None

    def names(self) -> list[str]:
        """The recorders that hold a group, the default first; the default alone where none does."""
        with self._lock:
            if time.monotonic() - self._listed < _REFRESH_S:
                return self._names
        found = [n for n in self._candidates() if _holds_groups(self.dump(n))]
        with self._lock:
            self._names, self._listed = found or [DEFAULT], time.monotonic()
            return self._names

    def _candidates(self) -> list[str]:
        names = {DEFAULT}
        if hasattr(self._c10d, "_dump_nccl_trace"):
            names.add(LEGACY_NCCL)
        if self._per_backend:
            for backend in _group_backends(self._dist):
                names.add(backend)
                if backend == "nccl":
                    names.update(_NCCL_NAMES)
        return sorted(names, key=lambda n: (n != DEFAULT, n))


def _takes_backend(fn: Callable) -> bool:
    """Whether this torch's dump takes `backend=` (2.15): its signature is in the docstring."""
    return "backend" in (getattr(fn, "__doc__", None) or "").split(")")[0]


def _group_backends(dist: Any) -> set[str]:
    """The backend names of every process group ("cpu:gloo,cuda:nccl" -> gloo, nccl)."""
    try:
        configs = list(dist.distributed_c10d._world.pg_backend_config.values())
    except Exception:  # noqa: BLE001 - a torch whose internals moved: the default recorder only
        return set()
    out = set()
    for config in configs:
        for part in str(config).split(","):
            name = part.rpartition(":")[2].strip()
            if name and name != "undefined":
                out.add(name)
    return out


def _holds_groups(dump: Dump | None) -> bool:
    """Whether the recorder knows a group: a status-only dump (no entries; well under a millisecond)."""
    if dump is None:
        return False
    try:
        raw = pickle.loads(dump(False, False, False))  # this process's own dump: plain data
    except Exception:  # noqa: BLE001
        return False
    return isinstance(raw, dict) and bool(raw.get("pg_config") or raw.get("pg_status") or raw.get("entries"))
