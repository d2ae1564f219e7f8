import gc
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
        ref = _cycle()[1]
        assert ref() is not None
        pacing.after_pass()
        assert ref() is None
    finally:
        pacing.stop()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_cycle_among_a_pass_survivors_lives_until_the_periodic_full_collection():
    pacing = GcPacing(full_every=3)
    pacing.start()
    try:
        held, ref = _cycle()
        pacing.after_pass()  # survives the pass: frozen
        del held
        pacing.after_pass()
        assert ref() is not None  # the young collection does not walk frozen objects
        pacing.after_pass()  # the third pass unfreezes and collects everything
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
