"""Drive a source the way the sidecar loop does, in-process."""

from __future__ import annotations

from frexport.live.sidecar import take_in
from frexport.live.state import EntryEvent, LiveState
from frexport.sources.base import Source


def pump(source: Source, state: LiveState, events: list[EntryEvent] | None = None) -> int:
    """Collect the source's new snapshots into the state; returns how many carried entries (a status
    read alone is taken in, not counted)."""
    snapshots = source.collect()
    new = take_in(state, snapshots)
    if events is not None:
        events.extend(new)
    return sum(not s.status_only for s in snapshots)
