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
        pacing.after_pass()  # (the first pass: see below)
        ref = _cycle()[1]
        assert ref() is not None
        pacing.after_pass()
        assert ref() is None
    finally:
        pacing.stop()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_cycle_among_a_pass_survivors_lives_until_the_paced_full_collection():
    # a fake clock on which a full collection takes 1 s: at a 25% share the next one comes 4 s after it
    now = [0.0]

    def full_takes_a_second(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            now[0] += 1.0

    pacing = GcPacing(full_share=0.25, full_every_s=0.0, clock=lambda: now[0])
    gc.callbacks.append(full_takes_a_second)
    pacing.start()
    try:
        pacing.after_pass()  # 0 s: the first pass, frozen
        pacing.after_pass()  # 0-1 s: everything collected
        assert pacing.last_full_s == 1.0
        held, ref = _cycle()
        now[0] = 2.0
        pacing.after_pass()  # 2 s: survives the pass, frozen
        del held
        now[0] = 3.0
        pacing.after_pass()
        assert ref() is not None  # the young collection does not walk frozen objects
        now[0] = 5.0
        pacing.after_pass()  # everything collected again
        assert ref() is None
    finally:
        pacing.stop()
        gc.callbacks.remove(full_takes_a_second)


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


def test_the_first_pass_is_frozen_unwalked_and_its_cycles_wait_for_the_first_full_collection():
    # all a first pass keeps is young: collecting it walked the whole window (seconds in a big job's view)
    # before its results were handed out
    now = [0.0]
    pacing = GcPacing(full_every_s=60.0, clock=lambda: now[0])
    pacing.start()
    try:
        held, ref = _cycle()
        del held
        pacing.after_pass()
        assert ref() is not None and gc.get_freeze_count() > 0
        now[0] = 59.0
        pacing.after_pass()
        assert ref() is not None  # frozen: the young collections do not see it
        now[0] = 60.0
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


def test_young_collections_that_find_nothing_come_less_often_and_one_that_finds_cycles_brings_them_back():
    # a young collection walks what a pass allocated and kept (a twentieth of a 16384-rank view's pass) and
    # in the view's passes finds nothing: each that finds nothing doubles the passes to the next (here each
    # one counts as costly: `young_share` 0)
    young: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 1:
            young.append(info["collected"])

    pacing = GcPacing(full_every_s=60.0, clock=lambda: 0.0, young_every_max=4, young_share=0.0)
    gc.callbacks.append(seen)
    pacing.start()
    try:
        pacing.after_pass()  # the first pass: frozen, not collected

        def passes(n: int) -> list[bool]:
            collected = []
            for _ in range(n):
                young.clear()
                pacing.after_pass()
                collected.append(bool(young))
            return collected

        assert passes(12) == [True, False, True, False, False, False, True, False, False, False, True, False]
        # a cycle made in a skipped pass is not frozen with it: the next young collection finds it, and the
        # collections come every pass again
        skipped_held, skipped = _cycle()
        del skipped_held
        assert passes(2) == [False, False]
        assert skipped() is not None
        assert passes(1) == [True] and skipped() is None and young[0] >= 2
        assert passes(3) == [True, False, True]  # every pass again, then backing off anew
    finally:
        pacing.stop()
        gc.callbacks.remove(seen)


def test_a_young_collection_that_costs_little_runs_every_pass():
    # the sidecar's: ~2 ms after a 5 s pass, under the 1 % share; backing off would only keep its cycles longer
    now = [0.0]
    collected = []

    def seen(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 1:
            collected.append(now[0])
            now[0] += 0.002  # the collection's cost on the fake clock

    pacing = GcPacing(full_every_s=600.0, clock=lambda: now[0])
    gc.callbacks.append(seen)
    pacing.start()
    try:
        for _ in range(8):
            now[0] += 5.0
            pacing.after_pass()
        assert len(collected) == 7 and pacing.young_every == 1  # (the first pass is frozen uncollected)
        for _ in range(3):
            now[0] += 0.1  # passes of 0.1 s: the same 2 ms is 2 % of them
            pacing.after_pass()
        assert pacing.young_every == 4
    finally:
        pacing.stop()
        gc.callbacks.remove(seen)


def test_a_loop_that_makes_a_few_cycles_every_pass_has_them_collected_every_pass():
    # the sidecar's passes make a few hundred objects of cycles each while its OTLP collector is down (the
    # exporter's timeouts, kept with their tracebacks): a back-off that took that for "nothing" froze them
    # until the full collection, and its memory climbed 25-39 MB/min in the hostile soak
    pacing = GcPacing(full_every_s=60.0, clock=lambda: 0.0)
    pacing.start()
    try:
        pacing.after_pass()
        for _ in range(8):
            ref = _cycle()[1]
            pacing.after_pass()
            assert ref() is None
    finally:
        pacing.stop()


def test_full_collections_that_find_nothing_come_less_often_and_one_that_finds_a_cycle_brings_them_back():
    # a busy 2-rank sidecar's full collection walks ~30,000 objects in ~20 ms and finds nothing, a fifth of
    # its CPU watching paused ranks: each that finds nothing doubles the time to the next, up to the most
    now, fulls = [0.0], []

    def seen(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            fulls.append((now[0], info["collected"]))

    gc.collect()  # what the test run left behind is not this loop's
    pacing = GcPacing(full_every_s=60.0, full_every_max_s=240.0, clock=lambda: now[0])
    gc.callbacks.append(seen)
    pacing.start()
    try:
        def passes_until(end: float) -> None:
            while now[0] < end:
                now[0] += 5.0
                pacing.after_pass()

        pacing.after_pass()  # 0 s: the first pass, frozen
        passes_until(700.0)
        assert [t for t, _ in fulls] == [60.0, 180.0, 420.0, 660.0], fulls
        held, ref = _cycle()
        pacing.after_pass()  # survives a pass: frozen, and only a full collection finds it once dropped
        del held
        passes_until(900.0)
        assert ref() is None and fulls[4][0] == 900.0 and fulls[4][1] >= 2, fulls
        passes_until(1000.0)
        assert [t for t, _ in fulls[4:]] == [900.0, 960.0], fulls  # once a minute again, then backing off
    finally:
        pacing.stop()
        gc.callbacks.remove(seen)
