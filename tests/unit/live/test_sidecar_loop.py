"""`frexport serve`'s loop (live/sidecar.py) turns when something is due: a source that says when it
next polls (`next_due`: the worker servers' status reads) is asked then, not at every fixed tick; one that
cannot say (a dump directory's file events) is still asked every TICK_S."""

import threading
import time

from frexport.config import Analysis
from frexport.live import sidecar as loop
from frexport.live.sidecar import Sidecar
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry


class _Quiet:
    """A source with nothing to give that cannot say when it is next due; it counts when it was asked."""

    name = "counted"

    def __init__(self) -> None:
        self.asked: list[float] = []

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def collect(self) -> list:
        self.asked.append(time.monotonic())
        return []


class _SaysWhen(_Quiet):
    """The same, polling every `every` seconds and saying so."""

    def __init__(self, every: float) -> None:
        super().__init__()
        self.every = every

    def next_due(self) -> float:
        return (self.asked[-1] if self.asked else 0.0) + self.every


def _asked(sources: list, seconds: float) -> None:
    sc = Sidecar(Analysis(interval=60.0), LiveState(), HealthRegistry(), sources, [])
    runner = threading.Thread(target=sc.run, kwargs={"install_signals": False})
    runner.start()
    time.sleep(seconds)
    sc.stop_event.set()
    runner.join(10)
    assert not runner.is_alive()


def test_the_loop_turns_when_a_source_is_due_not_at_every_tick():
    slow, fast = _SaysWhen(every=30.0), _SaysWhen(every=0.3)
    _asked([slow], 2.2)
    # due in 30 s: asked at the start and when the loop wakes for down ranks and expiry (once a second)
    assert 2 <= len(slow.asked) <= 5, len(slow.asked)
    _asked([fast], 2.2)
    assert len(fast.asked) >= 2.2 / 0.3 - 1, len(fast.asked)  # (and at those wakes too)


def test_a_source_that_cannot_say_is_asked_every_tick():
    quiet = _Quiet()
    _asked([quiet], 2.2)
    assert len(quiet.asked) >= 2.2 / loop.TICK_S / 2, len(quiet.asked)


def test_what_is_due_about_together_is_done_in_one_turn():
    """A sidecar watching paused ranks woke 3.2 times a second for a status read due once a second: the
    once-a-second look at down ranks and at what expired were each stamped a little after the turn
    began, so each came due at its own moment and woke the loop again (~0.17 ms of CPU a turn)."""
    every_second = _SaysWhen(every=1.0)
    _asked([every_second], 4.5)
    # at 0, 1, 2, 3 and 4 s, and now and then a turn more: not a turn for each of the three
    assert len(every_second.asked) <= 7, _gaps(every_second.asked)


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(times, times[1:])]
