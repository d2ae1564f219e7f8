"""The one rule for what a recorded op proves: pending, completed, retired, timed out, or only issued.

PyTorch's recorder marks an entry `retired` when it is done with it. What that proves depends on who
recorded the entry, the recorder's kind (`Recorder`):
- GLOO: gloo records itself, without events: every entry stays 'scheduled' and finished and failed work
  are retired alike. Retired says the work is over, not how it went.
- EVENTS: legacy NCCL and its vendor variants record start and completion events: an entry retired
  without completing was abandoned by the watchdog, it timed out.
- HOOK: from torch 2.15 every other backend (nccl2, the default `nccl` there; nccl-lazy, mpi, ucc,
  out-of-tree backends) is recorded by PyTorch's FlightRecorderHook, in one of two forms that the entry
  itself tells apart: where the backend has completion hooks (nccl2, nccl-lazy) the entry is retired
  when the op finishes, as `completed` with the backend's duration, and a hung op stays unretired;
  elsewhere (mpi, ucc, every backend written outside PyTorch) the entry is retired when the op is
  issued, `scheduled`, with no duration: it proves only that the op was issued (ISSUED). There a hang
  shows as a sequence gap (the ranks ahead issued an op the culprit never did), which the analysis
  reads from each rank's newest issued op per group, its frontier (model/rank_trace.py).
The kind comes from the backend's name where PyTorch fixes it (gloo; the self-recording NCCL family),
and for a dump whose ops name no backend ("", older dumps) from its entries: any start or completion
state means events. Every other backend is hooked: torch records no other backend by itself.
Metrics, spans and the analysis all ask this module, so an op cannot be "timed out" in one and
"finished" in another.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from enum import Enum
from importlib import import_module
from itertools import compress, count, islice, repeat
from operator import and_, attrgetter, ne, not_
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
_backend, _state, _retired = attrgetter("backend"), attrgetter("state"), attrgetter("retired")
STARTED = "started"
COMPLETED = "completed"


class Recorder(StrEnum):
    """Who wrote an entry, so what its fields can prove."""

    GLOO = "gloo"  # self-recorded without events: retired = over (done or failed)
    EVENTS = "events"  # self-recorded with events: retired and not completed = timed out
    HOOK = "hook"  # FlightRecorderHook: completed = done, retired and scheduled = issued, unretired = pending


# Backends that record themselves with start and completion events (the profiling-name prefixes of
# legacy NCCL and its vendor variants in PyTorch's analyzer; torch 2.15's `_FR_SELF_RECORDING_BACKENDS`
# adds gloo, which has no events). torch 2.15's hook names an op by its real backend (`nccl2:all_reduce`),
# so `nccl` is the legacy ProcessGroupNCCL's own recorder.
SELF_EVENTS = frozenset({"nccl", "nccl-legacy", "ncclx", "rccl", "rcclx", "xccl", "hccl", "mccl"})
GLOO_BACKEND = "gloo"

# How many entries at each end of a dump are enough to tell whether its unnamed ops carry events: a
# recorder that does shows it in any stretch, and a bounded sample keeps this O(1) on huge dumps.
SAMPLE = 64


class Outcome(StrEnum):
    """The values are the `outcome` label of frexport's metrics."""

    PENDING = "pending"  # not retired yet: in flight, hung, or not started
    COMPLETED = "completed"  # the backend reported completion
    RETIRED = "retired"  # over, success not reported (gloo)
    TIMED_OUT = "timed_out"  # retired by the watchdog without completing (EVENTS)
    ISSUED = "issued"  # a hook retired it when it was issued: whether it finished, nothing says (HOOK)

    @property
    def settled(self) -> bool:
        """The recorder will not change this entry again."""
        return self is not Outcome.PENDING

    @property
    def done(self) -> bool:
        """Proven over, and nobody waits in it any more: a timed-out op is where its ranks are still
        stuck, and an op known only to be issued may be where they wait."""
        return self is Outcome.COMPLETED or self is Outcome.RETIRED


def shows_events(state: str) -> bool:
    """One entry's evidence that its recorder records start or completion events."""
    return state != SCHEDULED


def edges(entries: _Seq) -> _Seq:
    """The oldest and newest SAMPLE entries: where the evidence for a whole dump is read."""
    return entries if len(entries) <= 2 * SAMPLE else entries[:SAMPLE] + entries[-SAMPLE:]


def event_backends(entries: tuple[Entry, ...]) -> frozenset[str]:
    """The backends among these entries (one rank's dump) whose sampled entries show events: what
    `recorder_of` needs to know of a dump whose ops name no backend."""
    sample = edges(entries)  # (shows_events, in C: this runs on every rank's every snapshot)
    return frozenset(compress(map(_backend, sample), map(SCHEDULED.__ne__, map(_state, sample))))


def recorder_of(backend: str, events: frozenset[str]) -> Recorder:
    """The kind of recorder that wrote `backend`'s ops, given the dump's `event_backends`."""
    if backend == GLOO_BACKEND:
        return Recorder.GLOO
    if backend in SELF_EVENTS:
        return Recorder.EVENTS
    if not backend:
        return Recorder.EVENTS if backend in events else Recorder.GLOO
    return Recorder.HOOK


def classify(state: str, retired: bool | None, recorder: Recorder) -> Outcome:
    """The rule on raw fields (the decode fast path has no Entry objects)."""
    if state == COMPLETED:
        return Outcome.COMPLETED
    if retired:
        if recorder is Recorder.GLOO:
            return Outcome.RETIRED
        return Outcome.TIMED_OUT if recorder is Recorder.EVENTS else Outcome.ISSUED
    return Outcome.PENDING


def outcome_of(entry: Entry, events: frozenset[str]) -> Outcome:
    """`events`: the value of `event_backends(...)` for the dump the entry came from."""
    return classify(entry.state, entry.retired, recorder_of(entry.backend, events))


def waited_in(entries: Sequence[Entry]) -> list[Entry]:
    """The entries of one rank's dump it may still wait in, in their order: those not settled, those that
    timed out, and of each group whose newest op is known only to be issued, that op (its frontier)."""
    events = event_backends(tuple(entries))
    keep: set[int] = set()  # positions
    newest: dict[str, tuple[int, int, Outcome]] = {}  # group -> (seq, position, outcome) of its newest op
    for i, e in enumerate(entries):
        outcome = outcome_of(e, events)
        if outcome is Outcome.PENDING or outcome is Outcome.TIMED_OUT:
            keep.add(i)
        last = newest.get(e.pg_name)
        if not e.is_p2p and (last is None or e.collective_seq_id >= last[0]):
            newest[e.pg_name] = (e.collective_seq_id, i, outcome)
    keep.update(i for _, i, outcome in newest.values() if outcome is Outcome.ISSUED)
    return [entries[i] for i in sorted(keep)]


def settled(state: str, retired: bool | None) -> bool:
    """Completed or retired: `classify(...).settled`, which does not depend on the recorder."""
    return state == COMPLETED or bool(retired)


def first_unsettled(entries: Sequence, start: int = 0, stop: int | None = None) -> int | None:
    """Index (in `entries`) of the first entry of entries[start:stop] not `settled`, None when all are.
    Pollers, the peers endpoint and the view call this on every snapshot of up to thousands of entries:
    model/_rows.c reads the two fields of each in one loop where it is built (the C-level passes below
    took ~0.1 µs an entry, most of a pod's answer to the view), else these passes."""
    stop = len(entries) if stop is None else min(stop, len(entries))
    compiled = _compiled_first()
    if compiled is not None:
        at = compiled(entries, start, stop, _STATE_AT, _RETIRED_AT, COMPLETED)
        if at is not NotImplemented:
            return at
    states, retired = map(_state, islice(entries, start, stop)), map(_retired, islice(entries, start, stop))
    unsettled = map(and_, map(ne, states, repeat(COMPLETED)), map(not_, retired))
    return next(compress(count(start), unsettled), None)


def _compiled_first() -> Callable | None:
    """model/_rows.c's first_unsettled, None without it; the Entry fields it reads are known once model/dump
    is loaded (it imports this module), so it is looked up at the first call."""
    global _compiled_first_fn, _STATE_AT, _RETIRED_AT
    if _compiled_first_fn is False:
        from frexport.model.dump import Entry
        _STATE_AT, _RETIRED_AT = Entry._fields.index("state"), Entry._fields.index("retired")
        try:
            _compiled_first_fn = import_module("frexport.model._rows").first_unsettled
        except ImportError:  # installed without a compiler: the passes in Python
            _compiled_first_fn = None
    return _compiled_first_fn  # type: ignore[return-value]


_compiled_first_fn: Callable | None | bool = False  # (False: not looked up yet)
_STATE_AT = _RETIRED_AT = -1


