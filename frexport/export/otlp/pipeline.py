"""The OTLP sink: passes in, spans out on a thread of its own, never in the sidecar loop's way.

`consume` only queues the pass's finished entries and the newest findings; the export thread maps
them to spans (spans.py), skips what the checkpoint says was exported before a restart, and ships
them in batches through the checkpoint wrapper (checkpoint.py), which records progress on success.
Entries and spans share one bounded queue (`traces.queue_size`): when an unreachable collector lets
it fill, the oldest are dropped and counted, so memory stays bounded and polling never slows.
Before an entry is mapped, the sampler (sampling.py, OTEL_TRACES_SAMPLER) decides whether its
collective is sent; errors are sent whatever it says. As the SDK's batch processor does, spans are
sent once a batch is full or the oldest has waited `schedule_delay_s` (OTEL_BSP_SCHEDULE_DELAY), not
after every pass: each export is one call to the collector (~0.2 ms of CPU before the first span, and
gRPC's own), which a busy sidecar made every second.
Self-metrics: frexport_otlp_spans_total{result="exported|failed|dropped|sampled_out"},
frexport_otlp_queue_spans.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from frexport import logs
from frexport.analysis.findings import Finding
from frexport.export.otlp import spans as S
from frexport.export.otlp.checkpoint import CheckpointExporter, Progress
from frexport.export.otlp.sampling import TraceSampling
from frexport.live.sink import Pass
from frexport.live.state import EntryEvent
from frexport.model.outcome import Outcome

_NO_FINDINGS: list[Finding] = []  # shared (never mutated): passes without analysis compare equal by identity


@dataclass
class _Work:
    """Entries of one or more passes that saw the same analysis result, and that result's findings."""

    events: deque[EntryEvent]
    findings: list[Finding]
    now_ns: int  # when these findings were first handed over: a stall span ends at detection


class OtlpSink:
    name = "otlp"

    def __init__(self, exporter: SpanExporter, job_id: str = "", queue_size: int = 20000,
                 checkpoint_file: str | None = None, batch_size: int = 512, world_size: int | None = None,
                 save_every_s: float = 5.0, sampling: TraceSampling | None = None,
                 schedule_delay_s: float = 5.0) -> None:
        self.exporter = CheckpointExporter(exporter, checkpoint_file, save_every_s)
        self.sampling = sampling or TraceSampling.from_env({})
        self.job_id = job_id
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.schedule_delay_s = schedule_delay_s
        self._queued_at = 0.0  # when the oldest queued span was queued (monotonic)
        self._flushing = 0  # flush() calls waiting: the queued spans go now
        self.resources = S.Resources(job_id, world_size)
        self.exported = self.failed = self.dropped = self.sampled_out = 0
        self._work: deque[_Work] = deque()
        self._events = 0  # entries waiting in self._work
        self._spans: deque[ReadableSpan] = deque()
        self._busy = 0  # entries being mapped, spans being exported
        self._stalled_sent: set[tuple] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the sink (called from the sidecar loop) -------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="frexport-otlp", daemon=True)
        self._thread.start()

    def consume(self, p: Pass) -> None:
        """Queue this pass's entries with the newest findings, whether or not this pass's analysis
        succeeded (spans never wait on the analysis). Mapping happens on the export thread."""
        findings = p.latest.diagnosis.findings if p.latest is not None else _NO_FINDINGS
        with self._lock:
            last = self._work[-1] if self._work else None
            if last is not None and last.findings is findings:
                last.events.extend(p.events)  # the same analysis result: one unit of work
            else:
                self._work.append(_Work(deque(p.events), findings, p.now_ns))
            self._events += len(p.events)
            self._trim()
        self._wake.set()

    def stop(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        self.shutdown(min(1.0, timeout_s))

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("frexport_otlp_spans", "Spans exported over OTLP, failed to export, dropped "
                                "from the full queue, or left out by the sampler (OTEL_TRACES_SAMPLER)",
                                labels=["result"])
        c.add_metric(["exported"], self.exported)
        c.add_metric(["failed"], self.failed)
        c.add_metric(["dropped"], self.dropped)
        c.add_metric(["sampled_out"], self.sampled_out)
        yield c
        q = GaugeMetricFamily("frexport_otlp_queue_spans", "Spans waiting for export")
        q.add_metric([], self.queued())
        yield q

    # --- flushing --------------------------------------------------------------------------------

    def queued(self) -> int:
        with self._lock:
            return self._events + len(self._spans) + self._busy

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued has been through the exporter (exported or failed)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._flushing += 1
        try:
            while self.queued():
                if time.monotonic() >= deadline:
                    return False
                self._wake.set()
                time.sleep(0.02)
            return True
        finally:
            with self._lock:
                self._flushing -= 1

    def shutdown(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self.exporter.shutdown()  # saves the checkpoint
        except Exception:  # noqa: BLE001 - shutting down must not raise
            logs.get().exception("OTLP exporter shutdown failed")

    # --- the export thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(min(1.0, max(0.05, self.schedule_delay_s)))
            self._wake.clear()
            while self._map_one():
                pass
            if not self._export_queued():
                return  # the collector fails while we stop: give up rather than hold the exit
            if self._stop.is_set() and not self.queued():
                return

    def _map_one(self) -> bool:
        with self._lock:
            if not self._work:
                return False
            w = self._work.popleft()
            self._events -= len(w.events)
            self._busy += len(w.events)
        try:
            spans = self._spans_of(w)
        except Exception:  # noqa: BLE001 - a mapping bug loses these spans, not the exporter
            logs.get().exception("mapping spans failed")
            spans = []
        with self._lock:
            self._busy -= len(w.events)
            if spans and not self._spans:
                self._queued_at = time.monotonic()
            self._spans.extend(spans)
            self._trim()
        return True

    def _spans_of(self, w: _Work) -> list[ReadableSpan]:
        marks = S.finding_index(w.findings)
        out = []
        sampling, sampled_out = self.sampling, 0
        # (a collective's trace id, made once for all the local ranks it came from: a hash each)
        trace_ids: dict[tuple[str, int, bool], int] = {}
        for ev in w.events:
            self.resources.saw(ev)
            e = ev.entry
            finding = marks.get((e.pg_name, e.collective_seq_id, ev.rank)) if marks else None
            trace_id = None
            if sampling.bound is not None:
                key = (e.pg_name, e.seq_id, e.is_p2p)
                trace_id = trace_ids.get(key)
                if trace_id is None:
                    trace_id = trace_ids[key] = S.entry_trace_id(self.job_id, e)
            if finding is None and ev.outcome is not Outcome.TIMED_OUT and not sampling.keeps(trace_id):
                sampled_out += 1
                continue
            progress = Progress(ev.rank, e.record_id, e.time_created_ns)
            if self.exporter.exported(progress):
                continue  # sent before a restart
            span = S.entry_span(ev, self.job_id, self.resources.of(ev.rank), finding, trace_id)
            self.exporter.expect(span.context.span_id, progress)
            out.append(span)
        for f in w.findings:
            for rank in S.stalled_ranks(f):
                key = S.stall_key(f, rank)
                if key not in self._stalled_sent:
                    self._stalled_sent.add(key)
                    out.append(S.stall_span(f, rank, self.job_id, self.resources.of(rank), w.now_ns))
        self.sampled_out += sampled_out
        return out

    def _due(self) -> bool:
        """Whether the queued spans go now (caller holds the lock): a full batch, the oldest waited the
        schedule delay, or a flush or the stop asks."""
        return bool(self._spans) and (len(self._spans) >= self.batch_size or self._flushing > 0
                                      or self._stop.is_set()
                                      or time.monotonic() - self._queued_at >= self.schedule_delay_s)

    def _export_queued(self) -> bool:
        while True:
            with self._lock:
                if not self._due():
                    return True
                batch = [self._spans.popleft() for _ in range(min(self.batch_size, len(self._spans)))]
                self._busy += len(batch)
            n = len(batch)
            try:
                ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception as exc:  # noqa: BLE001 - an exporter bug must not end exporting
                logs.get().warning("OTLP export failed: %s", exc)
                ok = False
            finally:
                # A failed export's frames outlive it in a reference cycle of the HTTP client's (urllib3
                # keeps its retries' exceptions with their tracebacks), and a frame keeps its callers'
                # frames: emptied, the batch's spans go now, not at the next full collection (with a
                # collector down that held ~20000 spans a minute, live/gc_pacing.py)
                batch.clear()
            with self._lock:
                self._busy -= n
                if ok:
                    self.exported += n
                else:
                    self.failed += n
            if self._stop.is_set() and not ok:
                return False

    def _trim(self) -> None:
        """Drop the oldest spans, then the oldest entries, past the bound (caller holds the lock)."""
        over = self._events + len(self._spans) - self.queue_size
        if over <= 0:
            return
        self.dropped += over
        gone = [self._spans.popleft().context.span_id for _ in range(min(over, len(self._spans)))]
        self.exporter.forget(gone)
        over -= len(gone)
        while over > 0 and self._work:
            w = self._work[0]
            n = min(over, len(w.events))
            for _ in range(n):
                w.events.popleft()
            self._events -= n
            over -= n
            if w.events or len(self._work) == 1:
                break
            self._work.popleft()  # a newer analysis result supersedes its findings
