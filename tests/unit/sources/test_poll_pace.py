"""A rank is read at the pace its config asks, whatever a turn of the loop costs.

CI once saw a rank read 1.0 s after its last read, at a 0.5 s poll interval: the turn's due time was
stamped when the turn began and the rank's when its read began, a few instants later, so the next
turn, woken at the first, found the rank not yet due and waited a whole interval more. At the default
5 s interval of a rank without the agent, that is 10 s between reads.

Each step of a turn costs time on a real machine, a different time at each turn, so a test on the real
clock sees this now and then. The clock below makes it certain: it moves a millisecond at every reading
during the first turn (a cold start: the first listing, the first connections) and stands still within
the turns after, moving only while the loop sleeps. It is the source's clock only; the ranks and their
sockets are real.
"""

import json
import types

import pytest

from frexport.config import WorkerServers
from frexport.live.state import LiveState
from frexport.sources import worker_server
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.peers import FakeAgentRank


class _Clock:
    def __init__(self) -> None:
        self.now, self.cost = 1000.0, 0.001

    def monotonic(self) -> float:
        self.now += self.cost
        return self.now

    def sleep_until(self, when: float) -> None:
        """What the sidecar's loop does between turns: wakes at the source's `next_due()`."""
        self.now = max(self.now, when)


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    real = worker_server.time
    monkeypatch.setattr(worker_server, "time", types.SimpleNamespace(monotonic=clock.monotonic,
                                                                     time_ns=real.time_ns))
    return clock


def _turns(src, state, clock, n: int) -> None:
    for turn in range(n):
        clock.sleep_until(src.next_due())
        clock.cost = 0.001 if turn == 0 else 0.0
        pump(src, state)


@pytest.mark.parametrize("status_first", [True, False], ids=["turns-every-status-interval", "turns-every-poll"])
def test_a_rank_without_a_status_read_is_read_at_every_poll_interval(tmp_path, clock, status_first):
    rank = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0)
    rank.HANDLERS = ["fr_trace_json", "ping"]  # PyTorch's handlers only: its whole dump every poll_interval
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), poll_interval=5.0,
                                                             status_first=status_first, status_interval=1.0))
    try:
        _turns(src, LiveState(), clock, 11 if status_first else 3)  # 10 s on: turns 1 s or 5 s apart
        assert rank.asked.count("fr_trace_json") == 3, rank.asked  # at 0, 5 and 10 s
    finally:
        src.stop()
        rank.close()


def test_a_moving_rank_s_entries_are_read_at_every_entries_interval(tmp_path, clock):
    reads = []

    def moving(handler) -> None:  # one more collective completed at every status read
        reads.append(1)
        seq = len(reads) + 1
        handler.send(json.dumps({"pg_status": {"0": {"last_enqueued_collective": seq, "last_started_collective": seq,
                                                     "last_completed_collective": seq}}}).encode())

    rank = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0, {"frexport_fr_status": moving})
    src = WorkerServerSource(HealthRegistry(), WorkerServers(
        str(tmp_path), status_interval=1.0, entries_interval=3.0, suspect_after=3600.0))
    try:
        _turns(src, LiveState(), clock, 10)
        entries = [a for a in rank.asked if a.startswith("frexport_fr_live")]
        # at 0 s the first read (the whole dump: its recorders are not known yet), then every 3 s
        assert len(entries) == 3, rank.asked
    finally:
        src.stop()
        rank.close()
