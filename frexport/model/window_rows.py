"""A followed window's rows moved in place: the steps of model/trace_window.py (and the peers' merge of each
rank's window, sources/peers.py) that a 16384-rank job view runs for every rank each pass.

Each is one call of model/_rows.c where it is built, with the Python it replaces beside it (an install
without a compiler runs that; tests/unit/model/test_trace_window.py holds the two to the same results):
in C they read the entries' fields and the columns in place, where the Python steps read each entry
through an attribute getter, cold in a big view's cache, and made a dict entry per row.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from importlib import import_module
from operator import attrgetter, itemgetter
from types import ModuleType

from frexport.model.dump import Entry
from frexport.model.rank_trace import COLUMN, ISSUED_BYTE, P2P, SKIPPED, GroupTrace, P2POp, leading_same, settle_issued

_record_id = attrgetter("record_id")
_RECORD_ID_AT, _DESC_AT, _PG_ID_AT = (Entry._fields.index(f) for f in ("record_id", "pg_desc", "pg_id"))


def window_cut(new: Sequence[Entry], old: Sequence[Entry]) -> tuple[int, int] | None:
    """Where a followed window's `new` entries (not empty) meet its `old` ones, both in record order: (k,
    same), k how many of old left at the front (those before new[0]'s record id), same how many of new
    are old's kept objects (leading_same); None where new's record ids from the last kept one on do not
    rise strictly. In one loop of model/_rows.c where it is built (the cut's ids, read through attribute
    getters, cold in a big view's cache, were a tenth of following a trace)."""
    if _rows is not None:
        out = _rows.window_cut(new, old, _RECORD_ID_AT)
        if out is not NotImplemented:
            return out
    k = bisect_left(old, new[0].record_id, key=_record_id)
    same = leading_same(new, old, k)
    rids = list(map(_record_id, new[max(same - 1, 0):]))
    return (k, same) if all(map(int.__lt__, rids, rids[1:])) else None


def merged_window(held: tuple[Entry, ...], sent: tuple[Entry, ...]) -> tuple[tuple[Entry, ...], int]:
    """A rank's held window (record order) with the entries its peer sent from the cursor on (not empty): the
    held ones before the first sent id, then the held ones from it on updated by the sent ones, in record
    order (one sent again equal to itself stays the held object); and that first (lowest) sent id. In one
    C loop where it is built for the usual case (sources/peers.py asks it of every rank each pass)."""
    if _rows is not None:
        out = _rows.merged_window(held, sent, _RECORD_ID_AT)
        if out is not NotImplemented:
            return out
    lo = min(map(_record_id, sent))
    p = bisect_left(held, lo, key=_record_id)
    return held[:p] + _updated(held[p:], sent), lo


def _updated(held: tuple[Entry, ...], sent: tuple[Entry, ...]) -> tuple[Entry, ...]:
    if not held:
        rids = list(map(_record_id, sent))
        if all(map(int.__lt__, rids, rids[1:])):
            return sent
    by_record = {e.record_id: e for e in held}
    for e in sent:  # one sent again as it was (a rank's hung op, from its cursor) stays the held object
        if by_record.get(e.record_id) != e:
            by_record[e.record_id] = e
    return tuple(sorted(by_record.values(), key=_record_id))


def drop_rows(names: list[str], kinds: bytearray, lo: int, hi: int, front: bool, groups: dict[str, GroupTrace],
              heads: dict[str, array], p2p: dict[str, list[P2POp]]) -> set[str]:
    """Rows lo..hi-1 of a followed trace, by their marks (`names`, `kinds`), out of its columns: the first
    ones of each group (`front`) or the last; each group's columns and `heads` lose its COLUMN rows, `p2p`
    its P2P rows. Returns the groups that lost p2p ops. (In model/_rows.c where it is built.)"""
    if _rows is not None:
        return _rows.drop_rows(names, kinds, lo, hi, front, groups, heads, p2p)
    columns: dict[str, int] = {}
    ops: dict[str, int] = {}
    if lo < hi:
        for name, kind in zip(names[lo:hi], kinds[lo:hi]):
            if kind == COLUMN:
                columns[name] = columns.get(name, 0) + 1
            elif kind == P2P:
                ops[name] = ops.get(name, 0) + 1
    for name, n in columns.items():
        g = groups[name]
        for col in (g.seq, g.sig, g.flags, g.created_ns, g.duration_us, g.site, heads[name]):
            del col[slice(0, n) if front else slice(len(col) - n, None)]
    for name, n in ops.items():
        del p2p[name][slice(0, n) if front else slice(len(p2p[name]) - n, None)]
    return set(ops)


def settle_groups(groups: dict[str, GroupTrace], names: list[str], kinds: bytearray, entries: list[Entry],
                  before: dict[str, int]) -> dict[str, GroupTrace] | None:
    """A followed trace's groups as a rebuild has them, given its window's `entries` and their rows' marks
    (`names`, `kinds`): those with a row, in the order of their first rows, each described by that row's
    entry, with their ops known only issued settled (settle_issued); None where a group's seqs from its
    count `before` the new rows on do not rise. In one call of model/_rows.c where it is built."""
    if _rows is not None:
        out = _rows.settle_groups(groups, names, kinds, entries, before, _DESC_AT, _PG_ID_AT, ISSUED_BYTE,
                                  GroupTrace)
        if out is not NotImplemented:
            return out
    first: dict[str, int] = {}
    for name in groups:  # (few groups: each found by a C-level scan of the names)
        try:
            i = names.index(name)
            while kinds[i] == SKIPPED:  # (a p2p end marker opens no group)
                i = names.index(name, i + 1)
        except ValueError:
            continue
        first[name] = i
    settled: dict[str, GroupTrace] = {}
    for name, i in sorted(first.items(), key=itemgetter(1)):
        g = settled[name] = groups[name]
        g.pg_desc, g.pg_id = entries[i].pg_desc, entries[i].pg_id
        n = max(1, before.get(name, 0))
        if len(g.seq) > n and not all(map(int.__lt__, g.seq[n - 1:], g.seq[n:])):
            return None
    for g in settled.values():
        settle_issued(g)
    return settled


def _load_rows() -> ModuleType | None:
    try:  # (set up by model/rank_trace, imported above)
        return import_module("frexport.model._rows")
    except ImportError:  # installed without a compiler: the Python above
        return None


_rows = _load_rows()
