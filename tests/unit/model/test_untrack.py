"""Plain tuples out of the cyclic collector's lists (model/untrack.py): the entries the view holds are
walked by no collection, what could be in a cycle stays tracked, and a cycle is still freed."""

import gc
import json
import pickle
import weakref
from multiprocessing.reduction import ForkingPickler

import pytest

from frexport.decode.normalize import normalize
from frexport.decode.peer_rows import parse_body
from frexport.export.peer_api import PeerApi
from frexport.live.state import LiveState
from frexport.model import untrack
from frexport.model.dump import Entry
from frexport.model.untrack import untrack_plain, untracked_rows, untracked_rows_of_kinds
from tests.support.synth import dump, entry, healthy_job


def _entries():
    assert untrack._rows is not None, "frexport.model._rows is not built (scripts/setup.sh builds it)"
    raw = dump([entry(i, i + 1, sizes=((8, 2), (3,))) for i in range(5)], world=1)
    return normalize(raw, "x", "pickle", rank=0).entries


class _Node:
    pass


def test_entries_and_their_shapes_are_untracked():
    entries = _entries()
    # (fresh shapes, as a body's unpickling makes them: tracked until something untracks them)
    entries = tuple(e._replace(input_sizes=tuple(tuple(s) for s in e.input_sizes)) for e in entries)
    assert all(gc.is_tracked(e) and gc.is_tracked(e.input_sizes) for e in entries)
    untrack_plain(entries)
    assert not any(gc.is_tracked(e) or gc.is_tracked(e.input_sizes) for e in entries)
    assert entries == tuple(_entries())  # (the same values)


def test_what_holds_a_tracked_object_stays_tracked_and_its_cycle_is_freed():
    node = _Node()
    held = _entries()[0]._replace(frames=(node,))
    class Other(tuple):  # a tuple subclass with fields of its own (a __dict__)
        pass
    other = Other((1, 2))
    untrack_plain([held, other, [held]])
    assert gc.is_tracked(held) and gc.is_tracked(other)
    node.entry = held  # a cycle through the entry
    gone = weakref.ref(node)
    del node, held
    gc.collect()
    assert gone() is None


def test_rows_made_from_columns_are_the_entries_zip_makes_untracked_where_plain(monkeypatch):
    entries = _entries()
    columns = list(zip(*entries))
    rows = untracked_rows(Entry, columns)
    assert rows == tuple(entries) and all(type(e) is Entry for e in rows)
    assert not any(gc.is_tracked(e) for e in (rows, *rows))  # the tuple of them too: the view holds it
    node = _Node()  # a row holding what the collector tracks stays tracked, and so does the tuple of rows
    held = untracked_rows(Entry, list(zip(*[entries[0]._replace(frames=(node,)), entries[1]])))
    assert gc.is_tracked(held) and gc.is_tracked(held[0]) and not gc.is_tracked(held[1])
    # columns the C does not take (lists): the same rows the Python way, untracked as well
    listed = untracked_rows(Entry, [list(c) for c in columns])
    assert listed == rows and not any(gc.is_tracked(e) for e in (listed, *listed))
    monkeypatch.setattr(untrack, "_rows", None)  # no C at all: the same rows (the collector walks them)
    assert untracked_rows(Entry, columns) == rows and untracked_rows(Entry, []) == ()


def test_the_ranks_the_decoders_hand_the_view_come_untracked():
    state, now = LiveState(), 10**18
    status = {"0": {"last_enqueued_collective": 4, "last_started_collective": 4, "last_completed_collective": 4}}
    for r, es in healthy_job(world=2, steps=4).items():
        state.ingest(normalize(dump(es, world=2, pg_status=status), f"rank {r}", "pickle", rank=r, dumped_at_ns=now,
                               keep_frames=False), "test", now)
    _now, ranks, _dropped, _suspected = parse_body(json.dumps(json.loads(PeerApi(state, 256).ranks_body({}, runs=True)))
                                                   .encode(), "peer")
    back = pickle.loads(ForkingPickler.dumps(ranks))
    assert back == ranks and [len(r.entries) for r in back] == [4, 4]
    assert not any(gc.is_tracked(e) for r in back for e in (r.entries, *r.entries))
    # the groups' status too: new objects every pass, each walked by the young collection after it
    assert all(r.pg_status for r in back)
    assert not any(gc.is_tracked(s) for r in back for s in (r.pg_status, *r.pg_status))


def test_rows_made_from_kinds_are_their_templates_with_their_numbers_untracked_where_plain(monkeypatch):
    """A peer's rows sent as kinds (decode/peer_rows.py): row i is its kind's template with its own numbers in
    their fields, the same rows with or without the C, untracked where plain; a kind out of range is an error."""
    entries = _entries()
    slots = (Entry._fields.index("record_id"), Entry._fields.index("time_created_ns"))
    templates = (entries[0]._replace(record_id=None, time_created_ns=None), tuple(entries[3]))
    kind_of, numbers = (0, 1, 1, 0), [(10, 11, 12, 13), (100, None, 102, 103)]
    expected = tuple(templates[k]._replace(record_id=r, time_created_ns=t) if k == 0 else
                     Entry(*templates[1])._replace(record_id=r, time_created_ns=t)
                     for k, r, t in zip(kind_of, *numbers))
    rows = untracked_rows_of_kinds(Entry, templates, kind_of, numbers, slots)
    assert rows == expected and {type(e) for e in rows} == {Entry}
    assert not any(gc.is_tracked(e) for e in (rows, *rows))
    assert untracked_rows_of_kinds(Entry, templates, (), [(), ()], slots) == ()
    with pytest.raises(IndexError):  # (the C declines it, the Python way raises)
        untracked_rows_of_kinds(Entry, templates, (0, 2), [(1, 2), (3, 4)], slots)
    monkeypatch.setattr(untrack, "_rows", None)  # no C at all: the same rows
    assert untracked_rows_of_kinds(Entry, templates, kind_of, numbers, slots) == expected
    with pytest.raises(IndexError):
        untracked_rows_of_kinds(Entry, templates, (0, 2), [(1, 2), (3, 4)], slots)
