"""How long a wait lasted, and against which clock (docs/diagnosis.md, "Clocks").

Three clocks can time a wait, each a lower bound on it:
- the recorder's own times (RECORDER): a rank recorded an event (an entry created, its start or
  completion discovered) after the wait began while the op was still unfinished, or absent where a
  member had to issue it: the wait lasted at least until then. It needs no trust in any file.
- the watchdog's timeout (TIMEOUT): an entry retired without completing on a backend that tracks
  completion is one the watchdog gave up on, which it does timeout_ms after the op was enqueued.
- the dump time (DUMP_TIME): when the rank was seen waiting, only where that is a clock (a live
  poll, a bundle the sidecar wrote; `Options.clock`) and not older than the rank's own newest
  recorded event. A post-mortem's file times are never one: `cp`, `git clone` and `touch` set them.
The longest of these is reported, so a dump time is used only where it agrees with the recorder
(it is the later observation of the same wait); a dump time shorter than the recorder's bound
contradicts it and is never shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from frexport.model.rank_trace import RankTrace

RECORDER = "recorder"
TIMEOUT = "timeout"
DUMP_TIME = "dump_time"


ISSUE = "issue"  # the wait began when the waiting rank issued the op
ALL_IN = "all_in"  # when its last member issued it: the time a collective every member joined is stuck in


class Waited(NamedTuple):
    ns: int
    clock: str  # RECORDER, TIMEOUT or DUMP_TIME
    rank: int  # whose event, timeout or dump time it was measured to
    since: str = ISSUE

    def text(self) -> str:
        start = "its last member's issue" if self.since == ALL_IN else "issue"
        if self.clock == RECORDER:
            after = f"from {start} " if self.since == ALL_IN else ""
            return f"at least {duration(self.ns)} ({after}until rank {self.rank}'s last recorded event)"
        if self.clock == TIMEOUT:
            return f"at least {duration(self.ns)} (rank {self.rank}'s watchdog timeout, timeout_ms, expired)"
        return f"{duration(self.ns)} (from {start} to rank {self.rank}'s dump time)"

    def to_json(self) -> dict:
        return {"seconds": round(self.ns / 1e9, 6), "clock": self.clock, "rank": self.rank,
                "since": self.since, "at_least": self.clock != DUMP_TIME, "text": self.text()}


def duration(ns: int) -> str:
    """Seconds with one decimal; below a tenth of a second in milliseconds, so that a wait of a few
    microseconds does not read as a wait of none."""
    if ns >= 100_000_000:
        return f"{ns / 1e9:.1f} s"
    if ns >= 100_000:
        return f"{ns / 1e6:.1f} ms"
    return "< 0.1 ms"


def recorder_bound(traces: dict[int, RankTrace], ranks: Iterable[int], since_ns: int) -> Waited | None:
    """The latest event any of `ranks` recorded after `since_ns`. Only ranks whose records show the
    wait still on belong here (the waiting rank, members still in the op, members whose dumps lack
    it): another rank's later event says nothing, its dump may have been taken after the wait ended."""
    return bound_since(latest_event(traces, ranks), since_ns)


Latest = tuple[int, int]  # (last_event_ns, rank): the newest event among some ranks


def latest_event(traces: dict[int, RankTrace], ranks: Iterable[int], also: Latest | None = None) -> Latest | None:
    """The newest event among `ranks` (and `also`, one found before); on a tie the lowest rank. The
    members of a collective are looked at once for all its waiters (4096 of them in a job's view)."""
    best = also
    for r in sorted(set(ranks)):
        t = traces.get(r)
        last = t.last_event_ns if t is not None else None
        if last and (best is None or last > best[0] or (last == best[0] and r < best[1])):
            best = (last, r)
    return best


def bound_since(latest: Latest | None, since_ns: int) -> Waited | None:
    """The recorder's bound of a wait that began at `since_ns`, from the newest event of its ranks."""
    if latest is None or not since_ns or latest[0] <= since_ns:
        return None
    return Waited(latest[0] - since_ns, RECORDER, latest[1])


def timeout_bound(trace: RankTrace, group_name: str, rank: int) -> Waited | None:
    ms = trace.timeouts_ms.get(group_name)
    return Waited(ms * 1_000_000, TIMEOUT, rank) if ms and ms > 0 else None


def dump_bound(trace: RankTrace, since_ns: int, rank: int, clock: bool) -> Waited | None:
    if not (clock and trace.dumped_at_is_clock and trace.dump_time_trusted) or not since_ns \
            or not trace.dumped_at_ns or trace.dumped_at_ns <= since_ns:
        return None
    return Waited(trace.dumped_at_ns - since_ns, DUMP_TIME, rank)


def longest(*bounds: Waited | None) -> Waited | None:
    """The longest bound; on a tie the first given (recorder, then timeout, then dump time)."""
    best = None
    for b in bounds:
        if b is not None and (best is None or b.ns > best.ns):
            best = b
    return best
