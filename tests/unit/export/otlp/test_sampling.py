"""Spans sampled by the standard OTEL_TRACES_SAMPLER: per collective (the same on every rank's sidecar),
errors always sent, what was left out counted. (A sampler the SDK would not take stops `serve` at start:
tests/e2e/test_check_config.py.)"""

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from frexport.export.otlp.pipeline import OtlpSink
from frexport.export.otlp.sampling import TraceSampling
from frexport.live.state import LiveState
from tests.support.fr_events import a_pass, polls, result_of, snapshot
from tests.support.synth import T0

PER_RANK = 2 * 199 + 10  # polls(n=200): collectives each rank finished


def _sent(env: dict, n: int = 200, ranks=(0, 1)) -> tuple[list, OtlpSink]:
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "job-7", sampling=TraceSampling.from_env(env))
    sink.start()
    for events in polls(LiveState(), n, ranks):
        sink.consume(a_pass(events))
    assert sink.flush(10)
    sink.stop(1)
    return list(exp.get_finished_spans()), sink


def _seqs(spans, rank: int) -> set[int]:
    return {s.attributes["pytorch.distributed.collective_seq_id"] for s in spans
            if s.attributes["pytorch.distributed.rank"] == rank}


def test_a_ratio_sends_whole_collectives_the_same_on_every_sidecar():
    env = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    spans, sink = _sent(env)
    kept = _seqs(spans, 0)
    assert 0.15 * PER_RANK < len(kept) < 0.35 * PER_RANK
    assert _seqs(spans, 1) == kept  # in one sidecar
    alone, _ = _sent(env, ranks=(1,))  # rank 1's own sidecar decides alike
    assert _seqs(alone, 1) == kept
    reg = CollectorRegistry(auto_describe=False)
    reg.register(sink)
    assert reg.get_sample_value("frexport_otlp_spans_total", {"result": "sampled_out"}) == 2 * PER_RANK - len(spans)
    assert reg.get_sample_value("frexport_otlp_spans_total", {"result": "exported"}) == len(spans)


@pytest.mark.parametrize("env,share", [({}, 1.0), ({"OTEL_TRACES_SAMPLER": "always_off"}, 0.0),
                                       ({"OTEL_TRACES_SAMPLER": "traceidratio"}, 1.0),
                                       ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, 0.0),
                                       ({"OTEL_TRACES_SAMPLER": " ALWAYS_ON "}, 1.0)])
def test_the_standard_samplers(env, share):
    spans, _ = _sent(env, n=20)
    assert len(spans) == share * 2 * (2 * 19 + 10)


def test_errors_are_sent_whatever_the_sampler_says():
    """Rank 0 waits in collective 49, which rank 1 has not issued: the stall spans, rank 1's entry of
    49 that the finding names once it comes, and two timed-out entries go out; every other span is
    sampled out."""
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "job-7", sampling=TraceSampling.from_env({"OTEL_TRACES_SAMPLER": "always_off"}))
    sink.start()
    state = LiveState()
    for events in polls(state):
        sink.consume(a_pass(events))
    now = T0 + 10**12
    stuck = state.ingest(snapshot(0, 38, 48, now, stuck_at=49), "s", now)
    stuck += state.ingest(snapshot(1, 38, 48, now), "s", now)
    result = result_of(state.latest_dumps())
    sink.consume(a_pass(stuck, result, now))
    late = state.ingest(snapshot(1, 38, 50, now + 1), "s", now + 1)  # collectives 49 and 50
    sink.consume(a_pass(late, result, now + 1))
    timed_out = state.ingest(snapshot(1, 50, 52, now + 2, state="started", retired=True, backend="nccl"), "s", now + 2)
    sink.consume(a_pass(timed_out))
    assert sink.flush(5)
    sent = sorted((s.name, s.attributes["pytorch.distributed.rank"], s.status.status_code.name)
                  for s in exp.get_finished_spans())
    assert sent == [("all_reduce", 1, "ERROR")] * 3 + [("missing all_reduce", 1, "ERROR"),
                                                       ("stalled all_reduce", 0, "ERROR")]
    sink.stop(1)
