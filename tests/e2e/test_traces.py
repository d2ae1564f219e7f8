"""OTLP spans of collectives, checked on real OTLP receivers (gRPC and HTTP/protobuf)."""

import pickle
import socket
import time
from collections import defaultdict

import pytest

from frexport.analysis.engine import Options, analyze
from frexport.decode.read import decode_bytes
from frexport.export.otlp import TraceExporter, make_exporter
from frexport.live.state import LiveState
from frexport.model.rank_trace import build_rank_trace
from tests.support import paths
from tests.support.otlp_receiver import GrpcReceiver, HttpReceiver
from tests.support.synth import STEP_NS, T0, dump, entry

REAL = paths.REAL_FIXTURES


def _snapshot(rank, lo, hi, at, stuck_at=None):
    es = [entry(i, i + 1, created=T0 + i * STEP_NS + rank * 1000) for i in range(lo, hi)]
    if stuck_at is not None:
        es.append(entry(hi, stuck_at, state="started", created=T0 + hi * STEP_NS))
    return decode_bytes(pickle.dumps(dump(es, world=2), protocol=2), "x", rank=rank, dumped_at_ns=at)


def _exporter(monkeypatch, endpoint, protocol, **kw):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=train-0,deployment.environment=test")
    exp = TraceExporter(make_exporter(), job_id="job-7", **kw)
    exp.start()
    return exp


def _run_polls(state, exp, polls=20, ranks=(0, 1)):
    """20 overlapping polls: each sees a 10-entry window moving by 2 entries."""
    for p in range(polls):
        for r in ranks:
            exp.on_events(state.ingest(_snapshot(r, 2 * p, 2 * p + 10, T0 + p), "s", T0 + p))
        exp.pump([])
    return 2 * (polls - 1) + 10  # entries per rank


def _wait(received, n, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(received.spans) < n:
        time.sleep(0.05)
    return received.spans


@pytest.mark.parametrize("receiver_cls,protocol", [(GrpcReceiver, "grpc"), (HttpReceiver, "http/protobuf")])
def test_one_span_per_entry_one_trace_per_collective(monkeypatch, tmp_path, receiver_cls, protocol):
    with receiver_cls() as rx:
        state = LiveState()
        exp = _exporter(monkeypatch, rx.endpoint, protocol, checkpoint_file=str(tmp_path / "cp.json"))
        per_rank = _run_polls(state, exp)
        assert exp.flush(10)
        spans = _wait(rx.received, 2 * per_rank)
        time.sleep(0.3)
        assert len(spans) == 2 * per_rank  # every entry of both ranks, exactly once over 20 polls
        assert len({s.span_id for s in spans}) == len(spans)
        traces = defaultdict(list)
        for s in spans:
            traces[s.trace_id].append(s)
        assert len(traces) == per_rank
        for t in traces.values():  # each collective: one span from each rank, same seq
            assert sorted(s.attributes["pytorch.distributed.rank"] for s in t) == [0, 1]
            assert len({s.attributes["pytorch.distributed.collective_seq_id"] for s in t}) == 1
        s = spans[0]
        assert s.name == "all_reduce" and s.parent_span_id == ""
        assert s.attributes["pytorch.distributed.pg.desc"] == "default_pg"
        assert s.attributes["pytorch.distributed.input_dtypes"] == ["Float"]
        assert s.attributes["pytorch.distributed.end_time_source"] == "duration"
        assert s.attributes["code.filepath"] == "/job/train.py" and s.attributes["code.lineno"] == 10
        assert s.end_ns > s.start_ns
        assert s.resource["pytorch.distributed.rank"] in (0, 1) and s.resource["k8s.pod.name"] == "train-0"
        assert s.resource["service.name"] == "job-7"
        assert s.resource["pytorch.distributed.world_size"] == 2  # from the default group's pg_config
        exp.shutdown()

        # A restarted sidecar with the same checkpoint sends nothing twice, then only what is new.
        state2 = LiveState()
        exp2 = _exporter(monkeypatch, rx.endpoint, protocol, checkpoint_file=str(tmp_path / "cp.json"))
        _run_polls(state2, exp2)
        assert exp2.flush(10)
        time.sleep(0.5)
        assert len(rx.received.spans) == 2 * per_rank
        exp2.on_events(state2.ingest(_snapshot(0, per_rank - 5, per_rank + 3, T0 + 100), "s", T0 + 100))
        exp2.pump([])
        assert exp2.flush(10)
        assert len(_wait(rx.received, 2 * per_rank + 3)) == 2 * per_rank + 3
        exp2.shutdown()


def test_stalled_collective_is_visible_while_stuck(monkeypatch):
    with GrpcReceiver() as rx:
        state = LiveState()
        exp = _exporter(monkeypatch, rx.endpoint, "grpc")
        now = T0 + 10**12
        exp.on_events(state.ingest(_snapshot(0, 0, 5, now, stuck_at=6), "s", now))
        exp.on_events(state.ingest(_snapshot(1, 0, 5, now), "s", now))
        traces = [build_rank_trace(d) for d in state.latest_dumps().values()]
        findings = analyze(traces, options=Options(stuck_after_s=1)).findings
        assert findings[0].kind == "missing_rank" and findings[0].culprit_ranks == (1,)
        exp.pump(findings, now_ns=now)
        exp.pump(findings, now_ns=now + 5)  # the same stall is not sent twice
        assert exp.flush(10)
        spans = _wait(rx.received, 12)
        time.sleep(0.3)
        stalled = [s for s in spans if s.name in ("stalled all_reduce", "missing all_reduce")]
        assert sorted((s.name, s.attributes["pytorch.distributed.rank"]) for s in stalled) == [
            ("missing all_reduce", 1), ("stalled all_reduce", 0)]
        assert all(s.status_code == 2 and s.events[0][0] == "stalled" for s in stalled)
        assert len({s.trace_id for s in stalled}) == 1  # both in the stuck collective's trace
        assert len(spans) == 10 + 2
        exp.shutdown()


def test_world_size_of_gloo_dumps_comes_from_the_setting(monkeypatch):
    # Real gloo dumps (torch 2.13 worker server) leave pg_config empty: no world size in the data.
    gloo = decode_bytes((REAL / "healthy" / "json" / "trace_0.json").read_bytes(), "w", rank=0)
    assert gloo.world_size is None
    with GrpcReceiver() as rx:
        for setting, expected in ((4, 4), (None, None)):
            rx.received.spans.clear()
            state = LiveState()
            exp = _exporter(monkeypatch, rx.endpoint, "grpc", world_size=setting)
            exp.on_events(state.ingest(gloo, "s", T0))
            exp.pump([])
            assert exp.flush(10)
            spans = _wait(rx.received, len(gloo.entries))
            assert spans and {s.resource.get("pytorch.distributed.world_size") for s in spans} == {expected}
            exp.shutdown()


def test_unreachable_collector_is_bounded_and_counted(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    state = LiveState()
    exp = _exporter(monkeypatch, f"http://127.0.0.1:{port}", "http/protobuf", queue_size=50, batch_size=10)
    start = time.monotonic()
    _run_polls(state, exp, polls=20)
    assert time.monotonic() - start < 2.0  # polling never waits for the collector
    assert exp.queued() <= 50 and exp.dropped >= 76 - 50 - 10  # queue + one batch in flight, no more
    time.sleep(2.5)
    assert exp.failed > 0 and exp.exported == 0
    exp.shutdown(0.5)
