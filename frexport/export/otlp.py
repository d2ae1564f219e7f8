"""OpenTelemetry spans of collectives, exported over OTLP (gRPC or HTTP/protobuf).

Model:
- resource = one rank process: service.name (OTEL_SERVICE_NAME, else the job id, else
  "pytorch-training"), host.name, k8s.pod.name / k8s.namespace.name / k8s.node.name from the
  downward API (POD_NAME, POD_NAMESPACE, NODE_NAME), OTEL_RESOURCE_ATTRIBUTES, and
  pytorch.distributed.rank / .job_id / .world_size (the rank's pg_config, else what frexport.agent
  declared, else the world_size setting: gloo's dumps do not say);
- one span per recorded entry per rank, named after the op ("all_reduce", "send"), from enqueue
  (time_created_ns) to completion: start + duration_ms (NCCL with timing), else the discovered
  completion time, else, for gloo, the moment the sidecar saw the entry retire (precision: one
  poll interval; the attribute pytorch.distributed.end_time_source says which);
- one trace per collective across ranks: the trace id is derived from (job id, group name,
  collective_seq_id), so every rank's span of a collective lands in the same trace although each
  rank's sidecar exports alone. Spans are roots: no rank owns the collective;
- status ERROR for timed-out entries and for entries a finding names, with the finding as an event;
- while a job is stuck, each stalled or blocked rank gets a span `stalled <op>` that ends at
  detection time with status ERROR and a `stalled` event; a culprit that never issued the
  collective gets a `missing <op>` span in that trace.
Exactly once: span ids are derived from (job, rank, epoch, record id) and a checkpoint file
remembers, per rank, how far export went, across sidecar restarts. Spans wait in a bounded
queue; an unreachable collector drops the oldest (counted), never slows polling.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from frexport import __version__, logs
from frexport.analysis.findings import Finding
from frexport.files import atomic_write
from frexport.live.sink import Pass
from frexport.live.state import FINISHED_TIMED_OUT, EntryEvent
from frexport.model.dump import Entry

NS = "pytorch.distributed."
_SCOPE = InstrumentationScope("frexport", __version__)


def trace_id_for(job_id: str, pg_name: str, seq: int, p2p: bool = False) -> int:
    key = f"{job_id}|{pg_name}|{'p2p' if p2p else 'coll'}|{seq}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:16], "big") or 1


def span_id_for(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big") or 1


def make_exporter(env: dict[str, str] | None = None) -> SpanExporter:
    """The OTLP exporter the standard variables ask for (endpoint, headers, timeout, compression, ...)."""
    env = os.environ if env is None else env
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use grpc or http/protobuf")
    return OTLPSpanExporter()


CHECKPOINT_WINDOW = 8192  # record ids remembered per rank: more than a ring buffer holds by default


@dataclass
class _RankCheckpoint:
    """What was exported for one rank: the newest creation time (a restarted process's entries are
    newer), and the recent record ids (entries that finished out of order are still exported)."""

    created_ns: int = 0
    ids: set[int] = field(default_factory=set)

    def has(self, e: Entry) -> bool:
        if not self.ids or e.time_created_ns > self.created_ns:
            return False
        return e.record_id in self.ids or e.record_id < min(self.ids)

    def add(self, record_id: int, created_ns: int) -> None:
        self.ids.add(record_id)
        self.created_ns = max(self.created_ns, created_ns)
        if len(self.ids) > CHECKPOINT_WINDOW:
            for rid in sorted(self.ids)[: len(self.ids) - CHECKPOINT_WINDOW]:
                self.ids.discard(rid)


@dataclass
class TraceExporter:
    name: ClassVar[str] = "otlp"
    exporter: SpanExporter
    job_id: str = ""
    queue_size: int = 20000
    checkpoint_file: str | None = None
    batch_size: int = 512
    world_size: int | None = None  # when the dumps do not say
    exported: int = 0
    failed: int = 0
    dropped: int = 0
    _events: deque = field(default_factory=deque)
    _spans: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _resources: dict[tuple[int, int | None], Resource] = field(default_factory=dict)
    _world_sizes: dict[int, int] = field(default_factory=dict)  # rank -> as its snapshots say
    _checkpoint: dict[int, _RankCheckpoint] = field(default_factory=dict)
    _stalled_sent: set = field(default_factory=set)
    _thread: threading.Thread | None = None
    _saved_at: float = 0.0

    def __post_init__(self) -> None:
        self._load_checkpoint()

    # --- input (called from the sidecar loop) -------------------------------------------------

    def consume(self, p: Pass) -> None:
        """Spans of this pass's entries, marked with the newest findings; whether or not this pass's
        analysis succeeded (spans never wait on the analysis)."""
        self.on_events(p.events)
        self.pump(p.latest.diagnosis.findings if p.latest is not None else [], p.now_ns)

    def stop(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        self.shutdown(min(1.0, timeout_s))

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("frexport_otlp_spans", "Spans exported over OTLP, failed to export, or dropped "
                                "from the full queue", labels=["result"])
        c.add_metric(["exported"], self.exported)
        c.add_metric(["failed"], self.failed)
        c.add_metric(["dropped"], self.dropped)
        yield c
        q = GaugeMetricFamily("frexport_otlp_queue_spans", "Spans waiting for export")
        q.add_metric([], self.queued())
        yield q

    def on_events(self, events: list[EntryEvent]) -> None:
        """State listener: must not block, so it only queues."""
        with self._lock:
            self._events.extend(events)
            self._trim(self._events)

    def pump(self, findings: list[Finding], now_ns: int | None = None) -> None:
        """Turn queued entries (and current stalls) into spans; called after each analysis pass,
        so spans of entries that a finding names carry it."""
        now_ns = now_ns or time.time_ns()
        with self._lock:
            events, self._events = list(self._events), deque()
        marks = _finding_index(findings)
        spans = []
        for ev in events:
            if ev.world_size:
                self._world_sizes[ev.rank] = ev.world_size
            if self._already_exported(ev):
                continue
            spans.append(self._entry_span(ev, marks.get((ev.entry.pg_name, ev.entry.collective_seq_id, ev.rank))))
        spans.extend(self._stall_spans(findings, now_ns))
        with self._lock:
            self._spans.extend(spans)
            self._trim(self._spans)
        self._wake.set()

    # --- background export ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="frexport-otlp", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.checkpoint_file:
            self._save_checkpoint()
        try:
            self.exporter.shutdown()
        except Exception:  # noqa: BLE001 - shutting down must not raise
            pass

    def flush(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._spans and not self._events:
                    return True
            self._wake.set()
            time.sleep(0.05)
        return False

    def queued(self) -> int:
        with self._lock:
            return len(self._spans) + len(self._events)

    def _run(self) -> None:
        while not self._stop.is_set() or self._spans:
            self._wake.wait(1.0)
            self._wake.clear()
            while True:
                with self._lock:
                    batch = [self._spans.popleft() for _ in range(min(self.batch_size, len(self._spans)))]
                if not batch:
                    break
                try:
                    ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
                except Exception as exc:  # noqa: BLE001 - an exporter bug must not end exporting
                    logs.get().warning("OTLP export failed: %s", exc)
                    ok = False
                if ok:
                    self.exported += len(batch)
                    self._advance_checkpoint(batch)
                else:
                    self.failed += len(batch)
                if self._stop.is_set() and not ok:
                    return

    # --- spans ---------------------------------------------------------------------------------

    def _resource(self, rank: int) -> Resource:
        world_size = self._world_sizes.get(rank, self.world_size)
        r = self._resources.get((rank, world_size))  # an elastic restart may change the world size
        if r is None:
            attrs = {NS + "rank": rank, "host.name": socket.gethostname()}
            if world_size:
                attrs[NS + "world_size"] = world_size
            for env, key in (("POD_NAME", "k8s.pod.name"), ("POD_NAMESPACE", "k8s.namespace.name"),
                             ("NODE_NAME", "k8s.node.name")):
                if os.environ.get(env):
                    attrs[key] = os.environ[env]
            if self.job_id:
                attrs[NS + "job_id"] = self.job_id
            if not os.environ.get("OTEL_SERVICE_NAME"):
                attrs["service.name"] = self.job_id or "pytorch-training"
            r = self._resources[(rank, world_size)] = Resource.create(attrs)  # merges OTEL_RESOURCE_ATTRIBUTES
        return r

    def _entry_span(self, ev: EntryEvent, finding: Finding | None) -> ReadableSpan:
        e = ev.entry
        end, source = _end_time(e, ev.observed_ns)
        status = Status(StatusCode.UNSET)
        events = []
        if ev.outcome == FINISHED_TIMED_OUT:
            status = Status(StatusCode.ERROR, "timed out")
        if finding is not None:
            status = Status(StatusCode.ERROR, finding.kind)
            events.append(Event(finding.kind, {"message": finding.message}, timestamp=end))
        attrs = _attributes(ev.rank, e)
        attrs[NS + "end_time_source"] = source
        attrs[NS + "outcome"] = ev.outcome
        ctx = SpanContext(trace_id_for(self.job_id, e.pg_name, e.seq_id, e.is_p2p),
                          span_id_for(self.job_id, ev.rank, ev.epoch, e.record_id), False,
                          TraceFlags(TraceFlags.SAMPLED))
        return ReadableSpan(e.op or e.profiling_name, ctx, None, self._resource(ev.rank), attrs, events, (),
                            SpanKind.INTERNAL, status=status, start_time=e.time_created_ns,
                            end_time=max(end, e.time_created_ns), instrumentation_scope=_SCOPE)

    def _stall_spans(self, findings: list[Finding], now_ns: int) -> list[ReadableSpan]:
        spans = []
        for f in findings:
            if not f.root_cause or f.collective_seq_id is None or not f.time_ns:
                continue
            tid = trace_id_for(self.job_id, f.pg_name, f.collective_seq_id)
            for rank in sorted(set(f.culprit_ranks) | set(f.blocked_ranks)):
                key = (f.kind, f.pg_name, f.collective_seq_id, rank)
                if key in self._stalled_sent:
                    continue
                self._stalled_sent.add(key)
                missing = rank in f.culprit_ranks and f.kind in ("missing_rank", "missing_dump", "unmatched_p2p")
                name = f"{'missing' if missing else 'stalled'} {f.op or 'collective'}"
                attrs = {NS + "rank": rank, NS + "pg.name": f.pg_name, NS + "pg.desc": f.pg_desc,
                         NS + "collective_seq_id": f.collective_seq_id, NS + "op": f.op or "",
                         NS + "finding": f.kind, NS + "culprit": rank in f.culprit_ranks}
                ctx = SpanContext(tid, span_id_for(self.job_id, rank, "stalled", f.kind, f.pg_name,
                                                   f.collective_seq_id), False, TraceFlags(TraceFlags.SAMPLED))
                spans.append(ReadableSpan(
                    name, ctx, None, self._resource(rank), attrs,
                    [Event("stalled", {"message": f.message}, timestamp=now_ns)], (), SpanKind.INTERNAL,
                    status=Status(StatusCode.ERROR, f.kind), start_time=f.time_ns, end_time=max(now_ns, f.time_ns),
                    instrumentation_scope=_SCOPE))
        return spans

    # --- exactly once across restarts ------------------------------------------------------------

    def _already_exported(self, ev: EntryEvent) -> bool:
        cp = self._checkpoint.get(ev.rank)
        return cp is not None and cp.has(ev.entry)

    def _advance_checkpoint(self, batch: list[ReadableSpan]) -> None:
        for span in batch:
            attrs = span.attributes or {}
            rid = attrs.get(NS + "record_id")
            if rid is not None:
                self._checkpoint.setdefault(attrs[NS + "rank"], _RankCheckpoint()).add(rid, span.start_time)
        now = time.monotonic()
        if self.checkpoint_file and now - self._saved_at >= 5.0:
            self._save_checkpoint()
            self._saved_at = now

    def _load_checkpoint(self) -> None:
        if not self.checkpoint_file:
            return
        try:
            with open(self.checkpoint_file) as f:
                data = json.load(f)
            self._checkpoint = {int(r): _RankCheckpoint(int(v["created_ns"]), {int(i) for i in v["ids"]})
                                for r, v in data.get("ranks", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._checkpoint = {}

    def _save_checkpoint(self) -> None:
        data = {"ranks": {str(r): {"created_ns": c.created_ns, "ids": sorted(c.ids)}
                          for r, c in self._checkpoint.items()}}
        try:
            atomic_write(self.checkpoint_file, json.dumps(data).encode())
        except OSError as exc:
            logs.get().warning("cannot write trace checkpoint %s: %s", self.checkpoint_file, exc)

    def _trim(self, q: deque) -> None:
        while len(q) > self.queue_size:
            q.popleft()
            self.dropped += 1


def _end_time(e: Entry, observed_ns: int) -> tuple[int, str]:
    if e.duration_ms is not None and e.time_started_ns:
        return e.time_started_ns + int(e.duration_ms * 1e6), "duration"
    if e.time_completed_ns:
        return e.time_completed_ns, "discovered"
    return observed_ns, "observed"


def _attributes(rank: int, e: Entry) -> dict:
    attrs = {
        NS + "rank": rank, NS + "pg.name": e.pg_name, NS + "pg.desc": e.pg_desc, NS + "pg.id": e.pg_id,
        NS + "collective_seq_id": e.collective_seq_id, NS + "p2p_seq_id": e.p2p_seq_id,
        NS + "record_id": e.record_id, NS + "op": e.op, NS + "backend": e.backend,
        NS + "profiling_name": e.profiling_name, NS + "is_p2p": e.is_p2p, NS + "state": e.state,
        NS + "input_sizes": json.dumps([list(s) for s in e.input_sizes]),
        NS + "output_sizes": json.dumps([list(s) for s in e.output_sizes]),
        NS + "input_dtypes": list(e.input_dtypes), NS + "output_dtypes": list(e.output_dtypes),
    }
    if e.op_id is not None:
        attrs[NS + "op_id"] = e.op_id
    if e.timeout_ms is not None:
        attrs[NS + "timeout_ms"] = e.timeout_ms
    if e.duration_ms is not None:
        attrs[NS + "duration_ms"] = e.duration_ms
    if e.call_site is not None:
        attrs["code.filepath"] = e.call_site.filename
        attrs["code.lineno"] = e.call_site.line
        attrs["code.function"] = e.call_site.name
    return attrs


def _finding_index(findings: list[Finding]) -> dict[tuple[str, int, int], Finding]:
    out = {}
    for f in findings:
        if f.collective_seq_id is None:
            continue
        for rank in f.culprit_ranks:
            out[(f.pg_name, f.collective_seq_id, rank)] = f
    return out
