"""Drive a source the way the sidecar loop does, in-process."""

from __future__ import annotations

from frexport.live.state import EntryEvent, LiveState
from frexport.sources.base import Source


def pump(source: Source, state: LiveState, events: list[EntryEvent] | None = None) -> int:
    """Collect the source's new snapshots into the state; returns how many it produced."""
    snapshots = source.collect()
    for snap in snapshots:
        new = state.ingest(snap.dump, snap.source, snap.taken_ns)
        if events is not None:
            events.extend(new)
        if snap.timeout_dump:
            state.count_timeout_dump(snap.dump.rank)
    return len(snapshots)
