"""The one rule for how a recorded op ended: pending, completed, retired or timed out.

PyTorch's recorder marks an entry `retired` when its watchdog is done with it. What that means
depends on whether the recorder tracks completion:
- NCCL-like backends record start and completion events; an entry retired without completing
  was abandoned by the watchdog: it timed out.
- gloo (and MPI, UCC, any backend without completion events) leaves every entry 'scheduled' and
  retires finished and failed work alike: retired only says the work is over, not how it went.
Whether a recorder tracks completion is a property of its backend, read from the backend's name or
from any entry of that backend that shows a started/completed state. One rank's dump may hold
several recorders (model/recorders.py: gloo's beside nccl2's), so the evidence is kept per backend.
Metrics, spans and the analysis all ask this module, so an op cannot be "timed out" in one and
"finished" in another.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (requires-python) has no enum.StrEnum: what frexport uses of it
    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

if TYPE_CHECKING:
    from frexport.model.dump import Entry

_Seq = TypeVar("_Seq", list, tuple)

# Entry.state values, as PyTorch derives them at dump time.
SCHEDULED = "scheduled"
STARTED = "started"
COMPLETED = "completed"

# Backends whose recorder marks work started/completed (the profiling-name prefixes of NCCL and its
# vendor variants in PyTorch's analyzer); gloo (2.13) leaves every entry 'scheduled'.
# torch 2.15's nccl2 (and nccl-lazy) are recorded by its FlightRecorderHook, which retires an entry from
# the backend's completion hook: completed, with its duration.
COMPLETION_BACKENDS = frozenset({"nccl", "ncclx", "rccl", "rcclx", "xccl", "hccl", "mccl", "nccl2", "nccl-lazy",
                                 "nccl-legacy"})

# How many entries at each end of a dump are enough to tell whether it tracks completion: a
# backend that does shows it in any stretch, and a bounded sample keeps this O(1) on huge dumps.
SAMPLE = 64


class Outcome(StrEnum):
    """The values are the `outcome` label of frexport's metrics."""

    PENDING = "pending"  # not retired yet: in flight, or not started
    COMPLETED = "completed"  # the backend reported completion
    RETIRED = "retired"  # over, success not reported (gloo and backends that do not track completion)
    TIMED_OUT = "timed_out"  # retired by the watchdog without completing, on a backend that tracks completion

    @property
    def settled(self) -> bool:
        """The recorder will not change this entry again."""
        return self is not Outcome.PENDING

    @property
    def done(self) -> bool:
        """Over, and nobody waits in it any more: a timed-out op is where its ranks are still stuck."""
        return self is Outcome.COMPLETED or self is Outcome.RETIRED


def shows_completion(backend: str, state: str) -> bool:
    """One entry's evidence that its recorder tracks completion."""
    return backend in COMPLETION_BACKENDS or state != SCHEDULED


def edges(entries: _Seq) -> _Seq:
    """The oldest and newest SAMPLE entries: where the evidence for a whole dump is read."""
    return entries if len(entries) <= 2 * SAMPLE else entries[:SAMPLE] + entries[-SAMPLE:]


def tracks_completion(entries: tuple[Entry, ...]) -> frozenset[str]:
    """The backends among these entries (one rank's dump) whose recorder shows that it reports
    completion (with `tracked`, which adds the backends known to by name)."""
    return frozenset(e.backend for e in edges(entries) if shows_completion(e.backend, e.state))


def tracked(backend: str, tracking: frozenset[str]) -> bool:
    """Whether ops of `backend` are tracked to completion, given a dump's `tracks_completion`."""
    return backend in tracking or backend in COMPLETION_BACKENDS


def classify(state: str, retired: bool | None, tracks_completion: bool) -> Outcome:
    """The rule on raw fields (the decode fast path has no Entry objects)."""
    if state == COMPLETED:
        return Outcome.COMPLETED
    if retired:
        return Outcome.TIMED_OUT if tracks_completion else Outcome.RETIRED
    return Outcome.PENDING


def outcome_of(entry: Entry, tracking: frozenset[str]) -> Outcome:
    """`tracking`: the value of `tracks_completion(...)` for the dump the entry came from."""
    return classify(entry.state, entry.retired, tracked(entry.backend, tracking))


def settled(state: str, retired: bool | None) -> bool:
    """Completed or retired: `classify(...).settled`, which does not depend on the backend."""
    return state == COMPLETED or bool(retired)


def first_unsettled(entries: Sequence) -> int | None:
    """Index of the first entry not `settled` (the rule above, inlined: pollers call this on every
    snapshot of thousands of entries), None when all are."""
    for i, e in enumerate(entries):
        if e.state != COMPLETED and not e.retired:
            return i
    return None
