"""Plain tuples taken out of the cyclic garbage collector's lists.

The job-level view holds every rank's window: ~4 million `Entry` tuples at 16384 ranks, and ~330,000
new ones a pass. CPython untracks an exact tuple of atomic values at its first collection, but never a
NamedTuple, so each collection walked every field of every entry (28 each, most of them cold in the
cache): the young collection after each steady pass, and the full one the loop runs about every four
minutes at that size (live/gc_pacing.py). A tuple whose items the collector does not track can be in
no cycle but through its own class, and an untracked object only makes the collector more cautious, so
the entries that come into the view are untracked as they arrive, by model/_rows.c where it is built
(without it the collector walks them as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from itertools import repeat
from operator import itemgetter
from types import ModuleType
from typing import TypeVar

T = TypeVar("T", bound=tuple)


def untrack_plain(objects: Sequence) -> None:
    """Each of `objects` that is a tuple (or a NamedTuple) of values the collector does not track, nested
    tuples included, out of its lists; anything else as it was."""
    if _rows is not None:
        _rows.untrack(objects if isinstance(objects, (tuple, list)) else list(objects))


def untracked_rows(row_type: type[T], columns: list[tuple]) -> tuple[T, ...]:
    """The rows of `columns` (one tuple per field of `row_type`, a NamedTuple) as a tuple of `row_type` tuples,
    out of the collector's lists as untrack_plain((rows,)) would take them: in one step in model/_rows.c,
    where zip made a tuple per row and the class a copy of it (a decoder's columns, every rank of a job view
    each pass)."""
    if _rows is not None:
        out = _rows.entries(row_type, columns, len(row_type._fields))  # type: ignore[attr-defined]
        if out is not NotImplemented:
            return out
    rows = tuple(map(tuple.__new__, repeat(row_type), zip(*columns)))
    untrack_plain((rows,))
    return rows


def untracked_rows_of_kinds(row_type: type[T], templates: tuple[tuple, ...], kind_of: tuple[int, ...],
                            numbers: list[tuple], slots: tuple[int, ...]) -> tuple[T, ...]:
    """Row i as `templates[kind_of[i]]` with item i of `numbers[j]` at field `slots[j]`, untracked as
    untracked_rows takes them: a peer's rows sent as kinds (decode/peer_rows.py), built in one step in
    model/_rows.c (a kind index out of range raises IndexError)."""
    fields = len(row_type._fields)  # type: ignore[attr-defined]
    if _rows is not None:
        out = _rows.entries_from(row_type, templates, kind_of, numbers, slots, fields)
        if out is not NotImplemented:
            return out
    kinds = [templates[k] for k in kind_of]
    columns = [tuple(map(itemgetter(f), kinds)) for f in range(fields)]
    for at, column in zip(slots, numbers):
        columns[at] = column
    return untracked_rows(row_type, columns)


def _load() -> ModuleType | None:
    try:
        return import_module("frexport.model._rows")
    except ImportError:  # installed without a compiler: the collector walks them
        return None


_rows = _load()
