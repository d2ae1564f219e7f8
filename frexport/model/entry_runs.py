"""A snapshot's entries in runs of one kind, their record ids, their newest time: one pass each, in C
where it is built.

A busy rank's live read brings about a thousand entries, nearly all of a few kinds in long runs (one
all_reduce after another). The live state's ingest counts, settles and refreshes what it holds per
kind, and the step time gives ids to ops, per run: a few steps a read instead of a tuple made and
hashed per entry. The live source's passes over a whole 2000-entry buffer at every read (the cursor's
ids, the groups' names, the newest time) are one C loop each. `_runs.c` does them (optional: without
a compiler, the same here in Python; tests/unit/model/test_entry_runs.py compares both ways).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from importlib import import_module
from itertools import groupby, islice
from operator import itemgetter, lt
from types import ModuleType
from typing import Any

from frexport.model.dump import Entry

_compiled: ModuleType | None
try:
    _compiled = import_module("frexport.model._runs")
except ImportError:  # installed without a compiler: the passes in Python
    _compiled = None
_RECORD_AT = Entry._fields.index("record_id")


def fields_at(*names: str) -> tuple[int, ...]:
    """The positions of Entry fields, for `runs`."""
    return tuple(map(Entry._fields.index, names))


def runs(entries: Sequence[Entry], positions: tuple[int, ...]) -> list[tuple[Any, int]]:
    """Consecutive entries equal in the fields at `positions`, as (those fields, how many) in order:
    a tuple of the fields, or the field itself for one position."""
    if _compiled is not None:
        out = _compiled.runs(entries, positions)
        if out is not NotImplemented:
            return out
    key = itemgetter(*positions)
    return [(k, sum(1 for _ in g)) for k, g in groupby(entries, key)]


def distinct(entries: Sequence[Entry], positions: tuple[int, ...]) -> set:
    """The keys `runs` would give, as a set."""
    if _compiled is not None:
        out = _compiled.distinct(entries, positions)
        if out is not NotImplemented:
            return out
    return set(map(itemgetter(*positions), entries))


def newest(entries: Sequence[Entry], positions: tuple[int, ...]) -> int:
    """The greatest value of the fields at `positions` (ints or None) over the entries, 0 at least."""
    if _compiled is not None:
        out = _compiled.newest(entries, positions)
        if out is not NotImplemented:
            return out
    values: list[int] = [e[p] for e in entries for p in positions if e[p] is not None]  # type: ignore[misc]
    return max([0, *values])


def any_set(entries: Sequence[Entry], positions: tuple[int, ...]) -> bool:
    """Whether some entry holds anything but None at one of `positions` (a busy gloo rank's thousand
    entries carry no timing at all: in C that is told in a few µs, not in tens)."""
    if _compiled is not None:
        out = _compiled.any_set(entries, positions)
        if out is not NotImplemented:
            return out
    return any(e[p] is not None for e in entries for p in positions)


def ascends(ids: Sequence[int]) -> bool:
    """Whether each id is greater than the one before (an array('q'), as the scanner's columns give them,
    is checked in C)."""
    if _compiled is not None and isinstance(ids, array):
        out = _compiled.ascends(ids)
        if out is not NotImplemented:
            return out
    return all(map(lt, ids, islice(ids, 1, None)))


def record_ids(entries: Sequence[Entry]) -> tuple[Sequence[int], bool]:
    """The entries' record ids, and whether they ascend (each once): every dump PyTorch writes."""
    if _compiled is not None:
        out = _compiled.record_ids(entries, _RECORD_AT)
        if out is not NotImplemented:
            return out
    ids = [e.record_id for e in entries]
    return ids, all(map(int.__lt__, ids, ids[1:]))
