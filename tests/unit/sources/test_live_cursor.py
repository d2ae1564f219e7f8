"""The live cursor started past the carried entries is the cursor of a pass over every entry.

A rank's recorder as a ring buffer: ops are issued, finish out of order (some never), the buffer wraps,
and the sidecar reads it the way its live poll does: the entries from the cursor on come as new
objects, the older ones of the last snapshot are carried, the buffer's bound cuts the front. Now and
then a snapshot is read whole instead (nothing carried), or arrives out of record order. At every step
`Cursors.of` must equal `cursor` over the whole snapshot.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from operator import attrgetter

from hypothesis import given
from hypothesis import strategies as st

from frexport.model.dump import Entry
from frexport.sources.live_cursor import Cursors, cursor

_record_id = attrgetter("record_id")
KEY = (0, "nccl")


def _entry(rid: int, state: str, retired: bool) -> Entry:
    return Entry(rid, 0, "0", "default_pg", rid, 0, None, False, "nccl:all_reduce", "nccl", "all_reduce", None,
                 None, ((4,),), ((4,),), ("Float",), ("Float",), state, retired, 10**12 + rid, None, None, None,
                 60000, None, None, (), None)


@given(st.integers(0, 2**32), st.integers(3, 40), st.integers(1, 30))
def test_the_cursor_from_past_the_carried_entries_is_the_whole_pass(seed, size, steps):
    rng = random.Random(seed)
    buffer: list[list] = []  # [record id, state, retired]: the recorder's own ring
    rid = 0
    cursors, last = Cursors(), ()
    for _ in range(steps):
        for _ in range(rng.randrange(0, size)):
            buffer.append([rid, "scheduled", False])
            rid += 1
        del buffer[:-size]
        for e in buffer:  # most ops finish; completion or retirement, in any order
            if e[1] != "completed" and rng.random() < 0.7:
                e[1], e[2] = rng.choice([("completed", True), ("completed", False), ("started", True)])
        now = tuple(_entry(*e) for e in buffer)
        if not last or not now or rng.random() < 0.15:
            entries = now  # read whole: nothing carried
            if rng.random() < 0.3:
                entries = tuple(rng.sample(entries, len(entries)))  # a body out of record order
        else:
            resume, ordered = cursors.of(KEY, last)
            assert (resume, ordered) == cursor(last)
            since = last[resume].record_id
            if not ordered or now[0].record_id > since:
                entries = now  # the ring moved past the cursor: read whole
            else:
                first = now[0].record_id
                carry = last[bisect_left(last, first, key=_record_id):resume]
                sent = [e for e in now if e.record_id >= since]
                entries = (carry + tuple(sent))[-size:]
                if entries and rng.random() < 0.2:  # the decode rewrote an entry (normalize completes
                    j = rng.randrange(len(entries))    # coalesced groups): not the carried object any more
                    entries = entries[:j] + (entries[j]._replace(state="scheduled", retired=False),) + entries[j + 1:]
                cursors.carried(KEY, entries, carry)
        assert cursors.of(KEY, entries) == cursor(entries)
        last = entries


def test_a_note_applies_only_to_the_entries_it_was_taken_of():
    cursors = Cursors()
    done = tuple(_entry(r, "completed", True) for r in range(4))
    entries = done + (_entry(4, "scheduled", False),)
    cursors.carried(KEY, entries, done)
    assert cursors.of(KEY, entries) == (4, True)
    # the same record ids, other objects: now unsettled where the note said settled
    other = tuple(_entry(r, "scheduled", False) for r in range(5))
    assert cursors.of(KEY, other) == (0, True)
    assert cursors.of(KEY, entries) == (4, True)  # (the note was dropped with its snapshot; a whole pass)
