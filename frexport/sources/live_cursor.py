"""Where a rank's next live answer starts: its first entry that may still change.

The sidecar asks a rank's agent only for the entries from that cursor on, and keeps the older ones
of its last snapshot (they were settled: completed or retired, so they cannot change). Finding the
cursor is a pass over the snapshot; on a busy rank's 2000-entry buffer, read every second or two,
passing over the entries carried from the snapshot before again was most of it: they were settled
and in record order when they were carried, and are the same objects now. `Cursors` remembers, per
(rank, recorder), how many entries of its last snapshot lead that way, and the next pass starts
after them. A snapshot built any other way (read whole, reordered) has no such note and is passed
over whole.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence
from itertools import compress, count
from operator import attrgetter, is_not

from frexport.model.dump import Entry
from frexport.model.entry_runs import record_ids
from frexport.model.outcome import first_unsettled

_record_id = attrgetter("record_id")


def cursor(entries: Sequence[Entry], settled: int = 0) -> tuple[int, bool]:
    """(index of the entry to read from, whether record ids ascend): the first entry not settled,
    else the newest, which anchors the next answer to this snapshot. `settled`: how many entries
    lead that are known settled and in record order (only what follows them is read)."""
    _rids, ordered = record_ids(entries[max(settled - 1, 0):])  # record order, ids unique: the usual case
    at = first_unsettled(entries, settled)
    return (at if at is not None else len(entries) - 1), ordered


class Cursors:
    """Per key (a rank's recorder), how many entries of its last snapshot lead settled and in record
    order; held with that snapshot's entries, so a note never applies to other entries."""

    def __init__(self) -> None:
        self._carried: dict[Hashable, tuple[Sequence[Entry], int]] = {}

    def of(self, key: Hashable, entries: Sequence[Entry]) -> tuple[int, bool]:
        """`cursor(entries)`, from past the entries carried into them where noted."""
        note = self._carried.get(key)
        if note is not None and note[0] is not entries:  # of a snapshot gone since: its entries not held on
            self._carried.pop(key, None)  # (pop: the listing may forget the rank meanwhile, on its thread)
            note = None
        return cursor(entries, note[1] if note is not None else 0)

    def carried(self, key: Hashable, entries: Sequence[Entry], carry: Sequence[Entry]) -> None:
        """`entries` (a new snapshot) were built with `carry` first (settled entries of the last one, in
        record order), less any the buffer's bound cut from their front: note how many lead as the
        carried objects themselves."""
        if not entries or not carry:
            self._carried.pop(key, None)
            return
        off = bisect_left(carry, entries[0].record_id, key=_record_id)
        lead = next(compress(count(), map(is_not, entries, carry[off:])), min(len(entries), len(carry) - off))
        self._carried[key] = (entries, lead)

    def forget(self, key: Hashable) -> None:
        self._carried.pop(key, None)
