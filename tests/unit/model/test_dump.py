"""RankDump's own answers."""

from dataclasses import replace

from frexport.decode.normalize import normalize
from tests.support.synth import T0, dump, entry


def _dump(entries):
    return normalize(dump(entries, world=2), "x", "pickle", rank=0, dumped_at_ns=None, size_bytes=0)


def test_the_newest_event_is_the_latest_creation_start_or_completion_of_any_entry():
    d = _dump([entry(0, 1), entry(1, 2, state="started"), entry(2, 3, state="scheduled")])
    # an older entry's completion found after the newest one's creation is the newest event
    late = d.entries[0]._replace(time_completed_ns=T0 + 10**12)
    assert replace(d, entries=(late, *d.entries[1:])).newest_event_ns() == T0 + 10**12
    # unknown times (None in pickles, 0 in JSON) are no events; creation alone counts then
    bare = [e._replace(time_started_ns=None, time_completed_ns=0) for e in d.entries]
    assert replace(d, entries=tuple(bare)).newest_event_ns() == max(e.time_created_ns for e in d.entries)
    assert replace(d, entries=()).newest_event_ns() == 0
