"""Status first (sources/entry_schedule.py): when a rank's entries are fetched."""

from frexport.sources.entry_schedule import Action, EntrySchedule


def _st(enq: int, done: int) -> dict:
    return {"gloo": ((0, enq, -1, done),)}


def _fetched(s: EntrySchedule, rank: int, status: dict, now: float) -> None:
    s.observe(rank, status, now)
    assert s.decide(rank, now, False) is Action.FETCH or s.decide(rank, now, True) is Action.FETCH
    s.fetched(rank, now, status)


def test_a_rank_is_fetched_first_then_only_when_it_moved_and_is_due():
    s = EntrySchedule(entries_interval=10)
    s.observe(0, _st(5, 5), 0.0)
    assert s.decide(0, 0.0, False) is Action.FETCH  # nothing yet
    s.fetched(0, 0.0, _st(5, 5))
    s.observe(0, _st(5, 5), 1.0)
    assert s.decide(0, 1.0, False) is Action.RESTAMP  # nothing recorded since: its entries, seen now
    s.observe(0, _st(9, 9), 2.0)
    assert s.decide(0, 2.0, False) is Action.WAIT  # moved, not due
    assert s.decide(0, 10.0, False) is Action.FETCH  # due


def test_a_suspected_stall_fetches_at_once():
    s = EntrySchedule(entries_interval=10)
    _fetched(s, 0, _st(3, 3), 0.0)
    _fetched(s, 2, _st(3, 3), 0.0)
    s.observe(0, _st(4, 3), 1.0)  # rank 0 entered op 4 and waits in it
    s.observe(2, _st(3, 3), 1.0)  # rank 2 never issues it
    assert not s.suspected(1.0, settle=0.9)  # it just moved
    s.observe(0, _st(4, 3), 2.0)
    assert s.suspected(2.0, settle=0.9)  # pending, still for a status interval
    assert s.decide(0, 2.0, True) is Action.FETCH and s.decide(2, 2.0, True) is Action.RESTAMP


def test_an_idle_rank_is_never_suspected():
    s = EntrySchedule(entries_interval=10)
    _fetched(s, 0, _st(7, 7), 0.0)
    s.observe(0, _st(7, 7), 100.0)
    assert not s.suspected(100.0, settle=0.9)


def test_entries_are_fetched_before_the_ring_buffer_can_wrap():
    s = EntrySchedule(entries_interval=10, buffer_entries={0: 100})
    _fetched(s, 0, _st(10, 10), 0.0)
    s.observe(0, _st(59, 59), 1.0)
    assert s.decide(0, 1.0, False) is Action.WAIT
    s.observe(0, _st(60, 60), 1.5)  # half a buffer since the last fetch
    assert s.decide(0, 1.5, False) is Action.FETCH and s.fetches["wrap"] == 1


def test_gone_ranks_are_forgotten():
    s = EntrySchedule(entries_interval=10, buffer_entries={0: 100, 1: 100})
    _fetched(s, 0, _st(1, 1), 0.0)
    _fetched(s, 1, _st(1, 1), 0.0)
    s.forget({1})
    assert s.decide(0, 1.0, False) is Action.FETCH and set(s.buffer_entries) == {1}


def test_a_rank_whose_process_exits_is_read_one_last_time():
    s = EntrySchedule(entries_interval=10)
    _fetched(s, 0, _st(3, 3), 0.0)
    s.observe(0, _st(9, 9), 1.0, exiting=True)  # moved, not due: but there is no later
    assert s.decide(0, 1.0, False) is Action.FETCH


def test_entries_read_before_any_status_are_not_read_again_first():
    """The first poll of a rank reads its entries before the handler that serves statuses is known:
    the status those entries came with (the dump's own) is where the schedule starts, not nowhere
    (which asked for every rank's whole buffer twice)."""
    s = EntrySchedule(entries_interval=10)
    assert s.decide(0, 0.0, False) is Action.FETCH
    s.fetched(0, 0.0, _st(5, 5))
    s.observe(0, _st(5, 5), 1.0)
    assert s.decide(0, 1.0, False) is Action.RESTAMP
    assert s.fetches == {"first": 1}


def test_a_rank_due_whatever_its_status_says_is_fetched_without_reading_it():
    """The read before a fetch that is certain (due) or, at the rank's rate since its last fetch,
    reaches half its buffer (wrap) is skipped: the entries bring their own status."""
    s = EntrySchedule(entries_interval=10, buffer_entries={0: 100, 1: 100})
    _fetched(s, 0, _st(10, 10), 0.0)
    assert s.ahead(0, 0.5) is None  # no read since its fetch: not known to move
    s.observe(0, _st(40, 40), 1.0)  # 30 ops a second
    assert s.ahead(0, 2.0) is None  # 60 by now: past half a buffer, but near it: read, as before
    assert s.ahead(0, 2.1) == "wrap"  # 63 by now: clearly past it
    assert s.decide(0, 2.1, False) is Action.WAIT  # (what its old read alone would say)
    _fetched(s, 1, _st(10, 10), 0.0)
    s.observe(1, _st(11, 11), 1.0)  # slow: never near a wrap
    assert s.ahead(1, 9.9) is None and s.ahead(1, 10.0) == "due"
    s.fetch("due")
    s.fetched(1, 10.0, _st(20, 20))
    assert s.ahead(1, 25.0) is None  # not read since that fetch


def test_a_rank_that_did_not_move_since_its_fetch_is_never_fetched_ahead():
    s = EntrySchedule(entries_interval=10, buffer_entries={0: 100})
    _fetched(s, 0, _st(10, 10), 0.0)
    s.observe(0, _st(10, 10), 1.0)
    assert s.ahead(0, 100.0) is None  # its next read may well say the same: re-stamped, not fetched
    s.observe(0, _st(12, 11), 2.0, exiting=True)
    assert s.ahead(0, 100.0) is None  # exiting: read (decide fetches it at once)


def test_a_fetch_made_without_a_read_tells_whether_the_rank_moved():
    """A stall that begins just before a fetch made without a read is timed from that fetch, as a
    read there would have timed it."""
    s = EntrySchedule(entries_interval=10)
    _fetched(s, 0, _st(10, 10), 0.0)
    s.observe(0, _st(20, 20), 1.0)
    s.fetched(0, 10.0, _st(31, 30))  # fetched ahead (due): one op pending
    s.observe(0, _st(31, 30), 11.0)
    assert s.decide(0, 11.0, False) is Action.RESTAMP
    assert s.suspected(12.0, settle=2.0)  # still since 10.0, not 11.0
