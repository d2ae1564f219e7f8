"""OTLP spans of collectives on real OTLP receivers, one test per protocol (gRPC, HTTP/protobuf): what
goes over the wire. Mapping, checkpoint and queue are unit-tested in tests/unit/export/otlp/."""

import time
from collections import defaultdict

import pytest

from frexport.export.otlp import OtlpSink, make_exporter
from frexport.live.state import LiveState
from tests.support.fr_events import a_pass, polls, result_of, snapshot
from tests.support.otlp_receiver import GrpcReceiver, HttpReceiver
from tests.support.synth import T0


def _wait(received, n, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(received.spans) < n:
        time.sleep(0.05)
    return received.spans


@pytest.mark.parametrize("receiver_cls,protocol", [(GrpcReceiver, "grpc"), (HttpReceiver, "http/protobuf")])
def test_spans_reach_a_real_receiver(monkeypatch, tmp_path, receiver_cls, protocol):
    with receiver_cls() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "no-such-protocol")  # the TRACES_ variable wins
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=train-0,deployment.environment=test")
        sink = OtlpSink(make_exporter(), "job-7", checkpoint_file=str(tmp_path / "cp.json"))
        sink.start()
        state = LiveState()
        for events in polls(state):
            sink.consume(a_pass(events))
        now = T0 + 10**12  # then rank 0 waits in collective 49, which rank 1 never issues
        stuck = state.ingest(snapshot(0, 38, 48, now, stuck_at=49), "s", now)
        stuck += state.ingest(snapshot(1, 38, 48, now), "s", now)
        sink.consume(a_pass(stuck, result_of(state.latest_dumps()), now))
        assert sink.flush(10)
        per_rank = 2 * 19 + 10
        spans = _wait(rx.received, 2 * per_rank + 2)
        time.sleep(0.3)
        assert len(spans) == 2 * per_rank + 2 and len({s.span_id for s in spans}) == len(spans)
        traces = defaultdict(list)
        for s in spans:
            traces[s.trace_id].append(s)
        assert len(traces) == per_rank + 1
        s = next(s for s in spans if s.name == "all_reduce")
        assert s.parent_span_id == "" and s.end_ns > s.start_ns
        assert s.attributes["pytorch.distributed.end_time_source"] == "duration"
        assert s.attributes["pytorch.distributed.input_dtypes"] == ["Float"]
        assert s.attributes["code.filepath"] == "/job/train.py" and s.attributes["code.lineno"] == 10
        assert s.resource["service.name"] == "job-7" and s.resource["k8s.pod.name"] == "train-0"
        assert s.resource["pytorch.distributed.world_size"] == 2
        stalled = sorted((s.name, s.attributes["pytorch.distributed.rank"], s.status_code, s.events[0][0])
                         for s in spans if " " in s.name)
        assert stalled == [("missing all_reduce", 1, 2, "stalled"), ("stalled all_reduce", 0, 2, "stalled")]
        sink.stop(2)
