"""Status first: when a rank's entries are worth fetching (issue: live cost).

The stall signal needs only each group's last enqueued, started and completed sequence numbers
(`pg_status`), which a status-only dump returns in well under a millisecond; serializing the whole
ring buffer costs the trainer tens of milliseconds. So every rank's status is read often, and its
entries are fetched only when they can say something new:
- never while its status is the one seen at its last fetch: nothing was recorded since (the last
  entries are re-stamped with the status's time instead, so waits keep being measured);
- when its status moved, at most every `entries_interval` (spans and durations keep their
  recorder times: they arrive late, never lost);
- at once when a stall is suspected anywhere: a rank with work pending whose status did not move
  between two reads; the analysis then needs every rank's newest entries to name the culprit;
- before the ring buffer can wrap: once half a buffer's worth of ops were enqueued since the last
  fetch (a wrap that happens anyway is counted by the state as dropped entries);
- when the rank's process is exiting (frexport.agent says so in its status and waits for this last
  read): its last entries would otherwise never be read.
The read just before a fetch that is certain is not made (`ahead`: a moved rank due by
`entries_interval`, or clearly past the wrap line at its rate): the entries bring their own status.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# One recorder's status: (pg_id, last enqueued, last started, last completed) per group, sorted.
Status = tuple[tuple[int, int | None, int | None, int | None], ...]


WRAP_AHEAD = 1.25  # how far past the wrap rule's line a rank's rate must put it to be fetched unread


class Action(enum.Enum):
    FETCH = "fetch"  # ask for the entries
    RESTAMP = "restamp"  # nothing was recorded since the last fetch: its entries, seen now
    WAIT = "wait"  # moved, not due yet: the last snapshot stands


@dataclass
class _Rank:
    fetched: dict[str, Status] | None = None  # the statuses its last entries came with
    fetched_at: float = 0.0
    last: dict[str, Status] | None = None  # the statuses read last time
    read_at: float = 0.0  # when `last` was read
    still_since: float = 0.0  # since when `last` has not moved
    exiting: bool = False  # its process is exiting: one last read


@dataclass
class EntrySchedule:
    entries_interval: float
    on_fetch: Callable[[str], None] | None = None  # told why, at each fetch (the source's self-metrics)
    buffer_entries: dict[int, int] = field(default_factory=dict)  # rank -> its ring buffer's size
    _ranks: dict[int, _Rank] = field(default_factory=dict)
    # why entries were fetched: first, due, suspected, wrap, exiting
    fetches: Counter[str] = field(default_factory=Counter)

    def observe(self, rank: int, statuses: dict[str, Status], now: float, exiting: bool = False) -> None:
        r = self._ranks.setdefault(rank, _Rank())
        r.exiting, r.read_at = exiting, now
        if statuses != r.last:
            r.last, r.still_since = statuses, now

    def suspected(self, now: float, settle: float) -> bool:
        """Whether some rank has work pending (enqueued past completed) that has not moved for `settle`."""
        return any(r.last is not None and now - r.still_since >= settle and _pending(r.last)
                   for r in self._ranks.values())

    def decide(self, rank: int, now: float, suspected: bool) -> Action:
        r = self._ranks.get(rank)
        if r is None or r.last is None or r.fetched is None or r.exiting:
            return self.fetch("exiting" if r is not None and r.exiting else "first")
        if r.last == r.fetched:
            return Action.RESTAMP
        if now - r.fetched_at >= self.entries_interval:
            return self.fetch("due")
        if suspected:
            return self.fetch("suspected")
        if _enqueued_since(r.fetched, r.last) >= self._half_buffer(rank):
            return self.fetch("wrap")
        return Action.WAIT

    def ahead(self, rank: int, now: float) -> str | None:
        """Why the rank's entries are due now whatever its next status says (that read can be
        skipped: the entries bring their own status), or None. It moved at its last read since its last
        fetch, and a status never returns to an older one: so it is due once `entries_interval` has
        passed, or (the wrap rule) once the rate it enqueued at since the fetch is clearly past half a
        buffer: by WRAP_AHEAD, so that a rank near the line is read and decided as before (fetched when
        its read or its rate said so, it was fetched a turn sooner: more of the trainer's dumps)."""
        r = self._ranks.get(rank)
        if r is None or r.last is None or r.fetched is None or r.exiting or r.last == r.fetched \
                or r.read_at <= r.fetched_at:
            return None
        if now - r.fetched_at >= self.entries_interval:
            return "due"
        rate = _enqueued_since(r.fetched, r.last) / (r.read_at - r.fetched_at)
        return "wrap" if rate * (now - r.fetched_at) >= self._half_buffer(rank) * WRAP_AHEAD else None

    def _half_buffer(self, rank: int) -> int:
        """The wrap rule's line: half the rank's ring buffer (PyTorch's default 2000 until its status says)."""
        return self.buffer_entries.get(rank, 2000) // 2

    def fetch(self, why: str) -> Action:
        """A fetch, counted by why (`decide`'s, or one decided without a status read: `ahead`)."""
        self.fetches[why] += 1
        if self.on_fetch is not None:
            self.on_fetch(why)
        return Action.FETCH

    def statuses(self, rank: int) -> dict[str, Status]:
        """The statuses read last for a rank, by recorder (none before its first read)."""
        r = self._ranks.get(rank)
        return dict(r.last) if r is not None and r.last is not None else {}

    def fetched(self, rank: int, now: float, statuses: dict[str, Status]) -> None:
        """Entries were fetched, with these statuses (the dumps' own: read at once with the entries).
        They are also the last status seen (the next read compares with them): a fetch made without
        a read (`ahead`) tells whether the rank moved as a read would have."""
        r = self._ranks.setdefault(rank, _Rank())
        r.fetched, r.fetched_at, r.read_at = statuses, now, now
        if statuses != r.last:
            r.last, r.still_since = statuses, now

    def forget(self, ranks: set[int]) -> None:
        for rank in [k for k in self._ranks if k not in ranks]:
            del self._ranks[rank]
            self.buffer_entries.pop(rank, None)


def status_rows(rows: Iterable[tuple[int, int | None, int | None, int | None]]) -> Status:
    """A recorder's pg_status rows in the one order statuses are compared in."""
    plain = [(pg, enq, started, done) for pg, enq, started, done in rows]  # a NamedTuple row as a tuple
    return tuple(sorted(plain, key=lambda row: (row[0], str(row[1:]))))


def _pending(statuses: dict[str, Status]) -> bool:
    return any(enq is not None and enq > (done if done is not None else -1)
               for status in statuses.values() for _pg, enq, _started, done in status)


def _enqueued_since(before: dict[str, Status], now: dict[str, Status]) -> int:
    """Ops enqueued between two statuses, over every group of every recorder (a group that is new
    counts from 0)."""
    total = 0
    for recorder, status in now.items():
        old = {pg: enq for pg, enq, _s, _c in before.get(recorder, ())}
        for pg, enq, _s, _c in status:
            total += max(0, (enq or 0) - (old.get(pg) or 0))
    return total
