"""During an incident the sidecar loop keeps its pace: a rank whose stack handler never answers
delays neither polls nor analysis, the evidence bundle is written within its deadline with the
other ranks' data, and spans reach the collector even while analysis passes fail.

The ranks are fakes (tests/support/fake_rank.py) on real unix sockets: a real torch rank cannot be
made to hang its `dump_traceback` handler while its recorder keeps answering. The sidecar is the
real one, built by `cli/serve.build_sidecar` and run in a thread; spans go to a real gRPC receiver.
"""

import json
import threading
import time

from frexport.cli.serve import build_sidecar
from frexport.config import load_config
from frexport.live.diagnosis import LiveAnalysis
from tests.support.fake_rank import FakeRank
from tests.support.otlp_receiver import GrpcReceiver

POLL, INTERVAL, DEADLINE = 0.5, 0.5, 3.0
TICK = 0.2  # the loop wakes this often: a due poll or analysis waits for the next tick


def _gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def test_a_hanging_stack_handler_stops_nothing(tmp_path, monkeypatch):
    sockets, evidence = tmp_path / "sockets", tmp_path / "evidence"
    sockets.mkdir()
    start = time.time()
    incident = start + 3.0  # rank 1 stops issuing collectives; rank 0 waits in the next one
    ranks = [FakeRank(0, str(sockets / "rank-0.sock"), 2, start, stop_at=incident, stuck="inside"),
             FakeRank(1, str(sockets / "rank-1.sock"), 2, start, stop_at=incident, stuck="absent",
                      hang_stacks=True)]

    calls, failed_until = [], 4  # (monotonic time, spans received by then, new root causes)
    original = LiveAnalysis.run

    def flaky_run(self, dumps, down=frozenset(), contested=frozenset()):
        n = len(calls)
        if n < failed_until:  # the first passes fail: spans must not wait for the analysis
            calls.append((time.monotonic(), len(rx.received.spans), None))
            raise RuntimeError("analysis bug")
        result = original(self, dumps, down, contested)
        calls.append((time.monotonic(), len(rx.received.spans), result.new_root_causes))
        return result

    monkeypatch.setattr(LiveAnalysis, "run", flaky_run)
    with GrpcReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # spans sent within 0.1 s, not the default 5 s
        cfg = load_config(env={}, overrides={
            "sources.worker_servers.sockets_dir": str(sockets), "sources.worker_servers.poll_interval": POLL,
            "sources.worker_servers.timeout": 1.0, "analysis.interval": INTERVAL, "analysis.stall_after": 1.0,
            "evidence.dir": str(evidence), "evidence.pyspy": False, "evidence.deadline": DEADLINE,
            "traces.enabled": True, "job_id": "job-7"})
        sidecar, _ = build_sidecar(cfg)
        loop = threading.Thread(target=sidecar.run, kwargs={"install_signals": False}, daemon=True)
        loop.start()
        try:
            bundle = None
            end = time.monotonic() + 25
            while bundle is None and time.monotonic() < end:
                time.sleep(0.05)
                found = list(evidence.glob("*/manifest.json")) if evidence.exists() else []
                bundle = found[0].parent if found else None
            written = time.monotonic()
            time.sleep(1.0)  # a little after the bundle, to see the loop still going
        finally:
            sidecar.stop_event.set()
            loop.join(10)
            for r in ranks:
                r.close()
        assert not loop.is_alive()
        assert bundle is not None, "no evidence bundle"

        # spans arrived while every analysis pass so far had failed
        first_ok = calls[failed_until]
        assert first_ok[1] > 0, "no span exported before the first successful analysis"

        # the incident: found, then the bundle within the deadline although rank 1's stacks never come
        detected = next(t for t, _, new in calls if new)
        assert detected - incident_mono(incident) < 1.0 + 2 * INTERVAL + POLL + 0.5
        assert written - detected < DEADLINE + 1.0
        assert ranks[1].stack_requests >= 1  # it was asked, and never answered
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["reason"] == "missing_rank" and manifest["ranks"] == [0, 1]
        assert (bundle / "trace_0").stat().st_size > 0 and (bundle / "trace_1").stat().st_size > 0
        assert "rank 0" in (bundle / "stacks" / "rank_0.traceback.txt").read_text()
        assert not (bundle / "stacks" / "rank_1.traceback.txt").exists()

        # meanwhile the loop kept its pace: analysis every INTERVAL, each rank polled every POLL
        during = [t for t, _, _ in calls if detected <= t <= written + 1.0]
        assert len(during) >= (written + 1.0 - detected) / (INTERVAL + TICK) - 1
        assert max(_gaps(during)) < INTERVAL + TICK + 0.3, _gaps(during)
        for r in ranks:
            polls = [t for t in r.polls if detected <= t <= written + 1.0]
            assert max(_gaps(polls)) < POLL + TICK + 0.3, (r.rank, _gaps(polls))
            # at the poll interval, not faster: the loop's 0.2 s tick is not a poll
            assert len(polls) <= (written + 1.0 - detected) / POLL + 2, (r.rank, len(polls))

        # and the stall is in the traces
        names = {(s.name, s.attributes["pytorch.distributed.rank"]) for s in rx.received.spans if " " in s.name}
        assert names == {("missing all_reduce", 1), ("stalled all_reduce", 0)}


def incident_mono(wall: float) -> float:
    """A wall-clock moment on the monotonic clock the other times are on."""
    return time.monotonic() - (time.time() - wall)
