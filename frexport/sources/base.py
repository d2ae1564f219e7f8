"""What every source is: something that, asked now, returns the rank snapshots it has newly taken.

Sources only produce. They never see the sidecar's live state; the sidecar loop ingests what they
return. Each source keeps what it needs to do its own job (a worker-server source remembers the last
snapshot of each rank to decode only the new tail of the next one) and reports its own health.
A new kind of source (peer sidecars, an object store) implements this protocol and is one more
entry in the sidecar's list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from frexport.model.dump import ProcessGroupStatus, RankDump


@dataclass(frozen=True)
class Snapshot:
    dump: RankDump  # always with a rank
    source: str  # the source's health/metrics name, e.g. "socket:rank-3", "dumps:/shared/fr/dumps"
    taken_ns: int  # wall clock when it was read
    timeout_dump: bool = False  # a dump PyTorch wrote on a timeout or exception (not a periodic snapshot)
    # each group's pg_status when taken, by the name its ops are filed under (model.recorders.group_statuses)
    groups: Mapping[str, ProcessGroupStatus] | None = None
    # only the status was read (status first): `dump` is the rank's last one, its entries not read again
    status_only: bool = False


class Source(Protocol):
    @property
    def name(self) -> str: ...

    def start(self) -> None:
        """Begin watching (threads, observers). Called once before the first collect()."""

    def collect(self) -> list[Snapshot]:
        """Whatever is due now: new snapshots, in no particular order. Never raises for bad input."""

    def stop(self) -> None:
        """Release threads, sockets and watches."""
