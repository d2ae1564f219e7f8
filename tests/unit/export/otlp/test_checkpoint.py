"""Exactly once across sidecar restarts: the checkpoint wrapper records what the collector accepted."""

import json

from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from frexport.export.otlp.checkpoint import CheckpointExporter, Progress
from frexport.export.otlp.pipeline import OtlpSink
from frexport.live.state import LiveState
from tests.support.fr_events import a_pass, polls, snapshot
from tests.support.synth import T0


class Failing(InMemorySpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE


def _run(exporter, path, n=20, extra=None):
    """One sidecar lifetime: a fresh state sees every rank's ring buffer (again), then stops."""
    state = LiveState()
    sink = OtlpSink(exporter, "job-7", checkpoint_file=path)
    sink.start()
    for events in polls(state, n):
        sink.consume(a_pass(events))
    if extra is not None:
        sink.consume(a_pass(state.ingest(extra, "s", T0 + 100)))
    sink.stop(5.0)
    return sink


def _ids(exporter):
    return [(s.attributes["pytorch.distributed.rank"], s.attributes["pytorch.distributed.record_id"])
            for s in exporter.get_finished_spans()]


def test_a_restarted_sidecar_sends_nothing_twice_then_only_what_is_new(tmp_path):
    path = str(tmp_path / "cp.json")
    first = InMemorySpanExporter()
    _run(first, path)
    per_rank = 2 * 19 + 10
    assert sorted(_ids(first)) == [(r, i) for r in (0, 1) for i in range(per_rank)]

    second = InMemorySpanExporter()
    _run(second, path, extra=snapshot(0, per_rank - 5, per_rank + 3, T0 + 100))
    assert _ids(second) == [(0, per_rank), (0, per_rank + 1), (0, per_rank + 2)]  # only the 3 new entries


def test_a_failed_export_does_not_advance_the_checkpoint(tmp_path):
    path = str(tmp_path / "cp.json")
    sink = _run(Failing(), path, n=3)
    assert sink.failed == 2 * 14 and sink.exported == 0
    retry = InMemorySpanExporter()
    _run(retry, path, n=3)
    assert len(retry.get_finished_spans()) == 2 * 14  # nothing was lost to the failure


def test_progress_is_recorded_from_what_the_wrapper_was_told_not_from_span_attributes(tmp_path):
    path = str(tmp_path / "cp.json")
    cp = CheckpointExporter(InMemorySpanExporter(), path, save_every_s=0)
    cp.expect(1, Progress(5, 41, T0))  # told when queued: span 1 is rank 5's record 41
    assert cp.export([_Bare(1), _Bare(2)]) == SpanExportResult.SUCCESS  # span 2: a stall, no progress
    assert json.loads(open(path).read()) == {"ranks": {"5": {"created_ns": T0, "ids": [41]}}}
    assert cp.exported(Progress(5, 41, T0)) and cp.exported(Progress(5, 3, T0))  # older ids: sent
    assert not cp.exported(Progress(5, 42, T0 + 1))  # newer: not yet


def test_a_restarted_trainer_is_new_although_its_record_ids_were_sent(tmp_path):
    path = str(tmp_path / "cp.json")
    cp = CheckpointExporter(InMemorySpanExporter(), path)
    for rid in range(10):
        cp.expect(rid + 1, Progress(0, rid, T0 + rid))
    cp.export([_Bare(rid + 1) for rid in range(10)])
    cp.shutdown()
    again = CheckpointExporter(InMemorySpanExporter(), path)  # after a sidecar restart
    assert again.exported(Progress(0, 4, T0 + 4))
    assert not again.exported(Progress(0, 4, T0 + 10**12))  # same id, created later: a new process
    assert not again.exported(Progress(1, 4, T0 + 4))  # another rank


def test_an_unreadable_checkpoint_starts_over(tmp_path):
    path = tmp_path / "cp.json"
    path.write_text("{not json")
    cp = CheckpointExporter(InMemorySpanExporter(), str(path))
    assert not cp.exported(Progress(0, 0, T0))


class _Bare:
    """A span with only an id: the wrapper must not need its attributes."""

    def __init__(self, span_id):
        self.context = type("Ctx", (), {"span_id": span_id})()
