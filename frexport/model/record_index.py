"""A snapshot's entries found by record id, from one pass over their ids.

The live state looks entries up by record id (a restart shows as a known id with another creation
time; pending ops are recounted by id) and needs the ids in order to skip what it has seen. A dict
of every entry, rebuilt at each read of a 2000-entry buffer, cost more than all the lookups it
served; the ids are in record order in every dump PyTorch writes, so a lookup bisects them instead.
Only a dump out of order (a corrupt one) gets the dict, where the last listing of an id wins.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from frexport.model.dump import Entry
from frexport.model.entry_runs import record_ids


class RecordIndex:
    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries
        self.ids, ascending = record_ids(entries)
        # out of order only: each id's last listing, in the order the ids first appear
        self.by_id = None if ascending else dict(zip(self.ids, entries))

    @property
    def ordered(self) -> bool:
        """The ids ascend, each once (every dump PyTorch writes)."""
        return self.by_id is None

    def get(self, record_id: int) -> Entry | None:
        if self.by_id is not None:
            return self.by_id.get(record_id)
        i = bisect_left(self.ids, record_id)
        return self.entries[i] if i < len(self.ids) and self.ids[i] == record_id else None

    def newest(self) -> int:
        """The highest record id (-1 for none)."""
        if not self.ids:
            return -1
        return self.ids[-1] if self.ordered else max(self.ids)


NO_RECORDS = RecordIndex(())
