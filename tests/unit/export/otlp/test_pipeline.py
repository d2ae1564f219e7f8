"""The OTLP sink: the loop only queues; the queue is bounded and counts drops; stalls go out once."""

import gc
import socket
import threading
import time
import weakref

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from frexport.export.otlp.exporter import make_exporter
from frexport.export.otlp.pipeline import OtlpSink
from frexport.live.state import LiveState
from tests.support.fr_events import a_pass, polls, result_of, snapshot
from tests.support.synth import T0


class Blocking(InMemorySpanExporter):
    """A collector that does not answer until released."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def export(self, spans):
        self.release.wait(10)
        return super().export(spans)


class Raising(InMemorySpanExporter):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def export(self, spans):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("exporter bug")
        return super().export(spans)


def _metrics(sink):
    reg = CollectorRegistry(auto_describe=False)
    reg.register(sink)
    return {r: reg.get_sample_value("frexport_otlp_spans_total", {"result": r})
            for r in ("exported", "failed", "dropped")} | {"queued": reg.get_sample_value("frexport_otlp_queue_spans")}


def test_every_entry_once_one_trace_per_collective():
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "job-7")
    sink.start()
    for events in polls(LiveState()):
        sink.consume(a_pass(events))
    assert sink.flush(5)
    spans = exp.get_finished_spans()
    per_rank = 2 * 19 + 10
    assert len(spans) == 2 * per_rank and len({s.context.span_id for s in spans}) == len(spans)
    traces = {}
    for s in spans:
        traces.setdefault(s.context.trace_id, []).append(s.attributes["pytorch.distributed.rank"])
    assert len(traces) == per_rank and all(sorted(r) == [0, 1] for r in traces.values())
    assert _metrics(sink) == {"exported": 2 * per_rank, "failed": 0, "dropped": 0, "queued": 0}
    sink.stop(1)


def test_consume_only_queues_while_the_collector_hangs():
    exp = Blocking()
    sink = OtlpSink(exp, "j", batch_size=10)
    sink.start()
    start = time.monotonic()
    for events in polls(LiveState()):
        sink.consume(a_pass(events))
    # 20 passes, not one export waited for: a waiting one would block until the release below (the bound
    # is loose for a loaded machine; building the polls is timed too)
    assert time.monotonic() - start < 4.0
    assert sink.queued() == 96 and exp.get_finished_spans() == ()
    exp.release.set()
    assert sink.flush(5) and len(exp.get_finished_spans()) == 96
    sink.stop(1)


def test_a_full_queue_drops_the_oldest_and_counts_them():
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "j", queue_size=50)  # not started: nothing leaves the queue yet
    order = []
    for events in polls(LiveState()):
        sink.consume(a_pass(events))
        order += [(ev.rank, ev.entry.record_id) for ev in events]
    assert _metrics(sink) == {"exported": 0, "failed": 0, "dropped": 96 - 50, "queued": 50}
    sink.start()
    assert sink.flush(5)
    kept = [(s.attributes["pytorch.distributed.rank"], s.attributes["pytorch.distributed.record_id"])
            for s in exp.get_finished_spans()]
    assert kept == order[-50:]  # the newest 50 entries, in the order they finished
    assert _metrics(sink)["exported"] == 50
    sink.stop(1)


def test_spans_are_exported_when_no_analysis_succeeded():
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "j")
    sink.start()
    sink.consume(a_pass(LiveState().ingest(snapshot(0, 0, 5, T0), "s", T0), latest=None))
    assert sink.flush(5) and len(exp.get_finished_spans()) == 5
    sink.stop(1)


def test_a_stall_is_sent_once_however_many_passes_see_it():
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "j")
    sink.start()
    now = T0 + 10**12
    state = LiveState()
    events = state.ingest(snapshot(0, 0, 5, now, stuck_at=6), "s", now)
    events += state.ingest(snapshot(1, 0, 5, now), "s", now)
    sink.consume(a_pass(events, result_of(state.latest_dumps()), now))
    sink.consume(a_pass([], result_of(state.latest_dumps()), now + 5))  # a later analysis, same stall
    assert sink.flush(5)
    names = sorted(s.name for s in exp.get_finished_spans() if " " in s.name)
    assert names == ["missing all_reduce", "stalled all_reduce"]
    assert len(exp.get_finished_spans()) == 10 + 2
    sink.stop(1)


def test_an_exporter_that_raises_counts_failed_and_exporting_goes_on():
    exp = Raising()
    sink = OtlpSink(exp, "j")
    sink.start()
    state = LiveState()
    sink.consume(a_pass(state.ingest(snapshot(0, 0, 3, T0), "s", T0)))
    assert sink.flush(5)
    sink.consume(a_pass(state.ingest(snapshot(0, 0, 5, T0 + 1), "s", T0 + 1)))
    assert sink.flush(5)
    assert _metrics(sink)["failed"] == 3 and len(exp.get_finished_spans()) == 2
    sink.stop(1)


def test_stop_flushes_what_is_queued():
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "j")
    sink.start()
    sink.consume(a_pass(LiveState().ingest(snapshot(0, 0, 7, T0), "s", T0)))
    sink.stop(5)
    assert len(exp.get_finished_spans()) == 7 and not sink._thread.is_alive()
    assert exp.export([]) == SpanExportResult.FAILURE  # the wrapped exporter was shut down too


def test_spans_a_failed_export_kept_in_the_http_clients_cycles_are_freed_at_once(monkeypatch):
    """The real OTLP/HTTP exporter against a collector that refuses connections: urllib3 keeps its retries'
    exceptions with their tracebacks, in reference cycles that hold every frame up the call, ours too. The
    live loop runs with automatic collection off (live/gc_pacing.py), so what those frames hold waits for
    its next full collection: ~20000 spans a minute in the soak. Emptied, the batch's spans go at once."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    refs: list[weakref.ref] = []

    class Watched(SpanExporter):
        def __init__(self, inner: SpanExporter) -> None:
            self.inner = inner

        def export(self, spans):
            refs.extend(map(weakref.ref, spans))
            return self.inner.export(spans)

    sink = OtlpSink(Watched(make_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})), "j")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sink.start()
        state = LiveState()
        sink.consume(a_pass(state.ingest(snapshot(0, 0, 3, T0), "s", T0)))
        assert sink.flush(10)
        assert _metrics(sink)["failed"] == 3 and len(refs) == 3
        assert not any(r() for r in refs)
    finally:
        sink.stop(1)
        if was_enabled:
            gc.enable()


def test_spans_go_when_a_batch_is_full_or_the_oldest_waited_the_delay():
    """As the SDK's batch processor: fewer spans than a batch wait `schedule_delay_s` (one call to the
    collector for many passes), a full batch goes at once, and a flush sends what is queued now."""
    exp = InMemorySpanExporter()
    sink = OtlpSink(exp, "j", batch_size=30, schedule_delay_s=3.0)
    sink.start()
    state = LiveState()
    polls_ = polls(state)  # 20 passes; the first brings 10 entries a rank, the others 2
    sink.consume(a_pass(polls_[0]))
    time.sleep(0.5)
    assert exp.get_finished_spans() == ()  # 20 spans, less than a batch, not yet waited 3 s
    deadline = time.monotonic() + 10
    while not exp.get_finished_spans() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(exp.get_finished_spans()) == 20  # waited the delay
    for events in polls_[1:6]:  # 20 more: no batch yet
        sink.consume(a_pass(events))
    for events in polls_[6:]:  # 56 more: two full batches of 30 go at once, 16 wait
        sink.consume(a_pass(events))
    deadline = time.monotonic() + 1.5
    while len(exp.get_finished_spans()) < 80 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(exp.get_finished_spans()) == 80 and sink.queued() == 16
    assert sink.flush(5) and len(exp.get_finished_spans()) == 96
    sink.stop(1)
