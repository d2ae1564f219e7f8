"""When a live snapshot was seen: an op the rank records while the poll's request is on its way is in
the answer, after the time the poll began. The fake worker servers below record one at the moment
they answer: a real job does so only now and then (a loaded machine, the first collective), which a
test cannot make happen on demand. CI once saw four healthy ranks called stalled so."""

import json
import time

from frexport.config import Analysis, WorkerServers
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.synth import entry
from tests.support.unix_http import QuietHandler, serve_unix


class _RecordsWhileAnswering(QuietHandler):
    """PyTorch's handlers only; each answer holds one collective in flight, issued as it answers
    (`AHEAD_NS` later by its clock: a rank on a host whose clock runs ahead)."""

    AHEAD_NS = 0

    def do_GET(self):  # noqa: N802
        self.send(b'["fr_trace_json", "ping"]')

    def do_POST(self):  # noqa: N802
        if not self.path.startswith("/handler/fr_trace_json"):
            return self.send(b"", status=404)
        time.sleep(0.05)  # the request's way: the op below is issued after the poll began
        issued = {**entry(0, 1, backend="gloo", state="scheduled", retired=False,
                          created=time.time_ns() + self.AHEAD_NS),
                  "frames": []}
        doc = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[]"}},
               "pg_status": {"0": {"last_enqueued_collective": "1", "last_started_collective": "-1",
                                   "last_completed_collective": "0"}}, "entries": [issued]}
        self.send(json.dumps(doc).encode())


def test_an_op_issued_during_the_poll_is_a_collective_in_flight_not_a_hang(tmp_path):
    servers = [serve_unix(str(tmp_path / f"rank-{r}.sock"), _RecordsWhileAnswering) for r in range(2)]
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), poll_interval=0.0))
    state, analysis = LiveState(), LiveAnalysis(Analysis(stall_after=3.0))
    try:
        assert pump(src, state) == 2
        dumps = state.latest_dumps()
        # seen no earlier than what it holds: the dump time is one the analysis can time waits by
        assert all(d.dumped_at_ns >= d.newest_event_ns() for d in dumps.values())
        result = analysis.run(dumps)
        assert result.statuses == {0: "ok", 1: "ok"}, [f.message for f in result.diagnosis.findings]
    finally:
        src.stop()
        for s in servers:
            s.shutdown()


class _ClockAhead(_RecordsWhileAnswering):
    AHEAD_NS = 3600 * 10**9


def test_a_rank_whose_clock_runs_ahead_is_not_dated_in_the_future(tmp_path):
    """A URL target on another host: its recorder's times may run ahead of ours. Its snapshot is dated
    no later than its answer came, or the next snapshot would look older and be dropped."""
    server = serve_unix(str(tmp_path / "rank-0.sock"), _ClockAhead)
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), poll_interval=0.0))
    state = LiveState()
    try:
        pump(src, state)
        first = state.latest_dumps()[0].dumped_at_ns
        assert first <= time.time_ns()
        pump(src, state)
        assert state.latest_dumps()[0].dumped_at_ns > first  # the next snapshot is taken in
    finally:
        src.stop()
        server.shutdown()
