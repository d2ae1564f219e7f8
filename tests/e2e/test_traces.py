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


def test_every_pod_of_a_job_puts_one_collective_in_one_trace(tmp_path):
    """Two real `frexport serve` sidecars, one per pod, each seeing two of a 4-rank job's ranks: one given
    the job id by FREXPORT_JOB_ID (what the chart sets from the Job), one by the config file's job_id.
    Every rank's span of one collective carries the same trace id, and every resource the job id."""
    from tests.support.sidecar import Sidecar
    from tests.support.synth import dump, healthy_job, write

    job = healthy_job(world=4, steps=6)
    pods = [write(tmp_path / f"pod{p}", {r: dump(job[r], world=4) for r in (2 * p, 2 * p + 1)}) for p in (0, 1)]
    (tmp_path / "cfg.yaml").write_text("job_id: train-7\n")
    with GrpcReceiver() as rx:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_INSECURE": "true", "FREXPORT_TRACES__ENABLED": "true"}
        with Sidecar("--dump-dir", str(pods[0]), env=dict(otel, FREXPORT_JOB_ID="train-7")), \
                Sidecar("--dump-dir", str(pods[1]), "--config", str(tmp_path / "cfg.yaml"), env=otel):
            spans = _wait(rx.received, 4 * 6, timeout=60)
    by_collective = defaultdict(set)
    for s in spans:
        assert s.resource["pytorch.distributed.job_id"] == "train-7", s.resource
        by_collective[s.attributes["pytorch.distributed.collective_seq_id"]].add(
            (s.trace_id, s.attributes["pytorch.distributed.rank"]))
    assert len(by_collective) == 6
    for seq, seen in by_collective.items():
        assert {rank for _, rank in seen} == {0, 1, 2, 3}, (seq, seen)
        assert len({trace for trace, _ in seen}) == 1, (seq, seen)  # one trace across both pods


def test_sampled_collectives_come_from_every_pod_or_none(tmp_path):
    """Two real sidecars, one per pod of a 4-rank job, each sampling by OTEL_TRACES_SAMPLER at 0.5: the
    collectives sent are those the SDK's own ratio sampler keeps by their trace id, each from all four
    ranks; the others from none."""
    from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

    from frexport.export.otlp.spans import trace_id_for
    from tests.support.sidecar import Sidecar
    from tests.support.synth import dump, healthy_job, write

    steps = 40
    job = healthy_job(world=4, steps=steps)
    pods = [write(tmp_path / f"pod{p}", {r: dump(job[r], world=4) for r in (2 * p, 2 * p + 1)}) for p in (0, 1)]
    with GrpcReceiver() as rx:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_INSECURE": "true", "FREXPORT_TRACES__ENABLED": "true", "FREXPORT_JOB_ID": "train-7",
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
        with Sidecar("--dump-dir", str(pods[0]), env=otel), Sidecar("--dump-dir", str(pods[1]), env=otel):
            pg = _wait(rx.received, 1, timeout=60)[0].attributes["pytorch.distributed.pg.name"]
            sampler = TraceIdRatioBased(0.5)
            kept = {seq for seq in range(1, steps + 1) if sampler.should_sample(
                None, trace_id_for("train-7", pg, seq), "").decision is Decision.RECORD_AND_SAMPLE}
            spans = _wait(rx.received, 4 * len(kept), timeout=60)
            time.sleep(1.0)  # nothing more comes
    assert 0 < len(kept) < steps
    sent = defaultdict(set)
    for s in rx.received.spans:
        sent[s.attributes["pytorch.distributed.collective_seq_id"]].add(s.attributes["pytorch.distributed.rank"])
    assert len(spans) == 4 * len(kept) and set(sent) == kept
    assert all(ranks == {0, 1, 2, 3} for ranks in sent.values())
