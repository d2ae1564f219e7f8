import gc
import time
import weakref

from frexport.live.gc_pacing import GcPacing


class _Node:
    pass


def _cycle() -> tuple[_Node, weakref.ref]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


def test_a_cycle_made_during_a_pass_is_freed_at_its_end_while_automatic_collection_is_off():
    pacing = GcPacing()
    pacing.start()
    try:
        assert not gc.isenabled()
        pacing.after_pass()  # the first pass: only frozen
        ref = _cycle()[1]
        assert ref() is not None
        pacing.after_pass()
        assert ref() is None
    finally:
        pacing.stop()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_cycle_among_a_pass_survivors_lives_until_the_paced_full_collection():
    # the clock's readings: the first pass at 0 s; a full collection from 0 s to 1 s (full_every_s 0), at
    # a 25% share the next one from 5 s
    readings = iter([0.0, 0.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 6.0])  # (a young collection: two readings)
    pacing = GcPacing(full_share=0.25, full_every_s=0.0, clock=lambda: next(readings))
    pacing.start()
    try:
        pacing.after_pass()  # the first pass, only frozen
        pacing.after_pass()  # 0-1 s: the first full collection
        assert pacing.last_full_s == 1.0
        held, ref = _cycle()
        pacing.after_pass()  # 2 s: survives the pass, frozen
        del held
        pacing.after_pass()  # 3 s
        assert ref() is not None  # the young collection does not walk frozen objects
        pacing.after_pass()  # 5 s: everything collected again
        assert ref() is None
    finally:
        pacing.stop()


def test_a_small_window_is_collected_whole_once_a_minute():
    # a real clock, what collecting costs measured on it; the minute between is skipped over on it, not
    # slept (collecting the whole test process takes a tenth of a second or more, under the minute)
    skipped = [0.0]
    pacing = GcPacing(clock=lambda: time.monotonic() + skipped[0])
    pacing.start()
    try:
        pacing.after_pass()
        held, ref = _cycle()
        pacing.after_pass()
        del held
        skipped[0] += 30.0
        pacing.after_pass()  # half a minute on: the cycle is still there (frozen, not walked)
        assert ref() is not None
        skipped[0] += max(pacing.full_every_s, pacing.last_full_s / pacing.full_share)
        pacing.after_pass()
        assert ref() is None
    finally:
        pacing.stop()


def test_what_leaves_the_window_is_freed_at_once_while_frozen():
    pacing = GcPacing()
    pacing.start()
    try:
        held = [_Node()]
        pacing.after_pass()
        gone = weakref.ref(held[0])
        held.clear()  # reference counting, not the collector, frees a dropped snapshot
        assert gone() is None
    finally:
        pacing.stop()


def test_the_first_pass_is_not_followed_by_a_full_collection():
    pacing = GcPacing()
    pacing.start()
    try:
        held, ref = _cycle()
        pacing.after_pass()  # the young collection: the cycle is held, frozen
        del held
        pacing.after_pass()
        assert ref() is not None and pacing.last_full_s == 0.0
    finally:
        pacing.stop()


def test_after_a_costly_young_collection_passes_are_only_frozen_until_the_next_full_one():
    # the clock's readings: a second pass at 1 s whose young collection takes until 2 s (over young_max_s); a pass
    # at 3 s, only frozen; the full collection at 61-62 s; a young one again at 63 s
    readings = iter([0.5, 1.0, 2.0, 3.0, 61.0, 62.0, 63.0, 63.0])
    pacing = GcPacing(clock=lambda: next(readings), young_max_s=0.5)
    pacing.start()
    try:
        pacing.after_pass()  # 0.5 s: the first pass, only frozen
        pacing.after_pass()  # 1-2 s: walked, and found costly
        ref = _cycle()[1]
        pacing.after_pass()  # 3 s: frozen with the rest, not walked
        assert ref() is not None
        pacing.after_pass()  # 61 s: the full collection frees it
        assert ref() is None
        ref = _cycle()[1]
        pacing.after_pass()  # 63 s: young collections again
        assert ref() is None
    finally:
        pacing.stop()
