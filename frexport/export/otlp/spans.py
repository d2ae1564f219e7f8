"""Flight Recorder entries and findings as OpenTelemetry spans: pure mapping, no I/O, no threads.

Model (docs/traces.md):
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
Span ids are derived from (job, rank, epoch, record id), so the same entry always has the same id.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from frexport import __version__
from frexport.analysis.findings import MISSING_KINDS, Finding
from frexport.live.state import EntryEvent
from frexport.model.dump import Entry
from frexport.model.outcome import Outcome

if TYPE_CHECKING:
    from opentelemetry.util.types import AnyValue

NS = "pytorch.distributed."
SCOPE = InstrumentationScope("frexport", __version__)
# Culprits of these kinds never showed up in the collective: their span says `missing`, not `stalled`.

FindingIndex = Mapping[tuple[str, int, int], Finding]  # (pg name, collective seq, culprit rank) -> finding


def trace_id_for(job_id: str, pg_name: str, seq: int, p2p: bool = False) -> int:
    """The same on every rank's sidecar: all ranks' spans of one collective form one trace."""
    key = f"{job_id}|{pg_name}|{'p2p' if p2p else 'coll'}|{seq}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:16], "big") or 1


def entry_trace_id(job_id: str, e: Entry) -> int:
    return trace_id_for(job_id, e.pg_name, e.seq_id, e.is_p2p)


def span_id_for(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big") or 1


def entry_span_id(job_id: str, ev: EntryEvent) -> int:
    return span_id_for(job_id, ev.rank, ev.epoch, ev.entry.record_id)


def resource_attributes(rank: int, job_id: str, world_size: int | None,
                        env: Mapping[str, str] | None = None) -> dict[str, AnyValue]:
    """A rank process's resource, before OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are merged in."""
    env = os.environ if env is None else env
    attrs: dict[str, AnyValue] = {NS + "rank": rank, "host.name": socket.gethostname()}
    if world_size:
        attrs[NS + "world_size"] = world_size
    for var, key in (("POD_NAME", "k8s.pod.name"), ("POD_NAMESPACE", "k8s.namespace.name"),
                     ("NODE_NAME", "k8s.node.name")):
        if env.get(var):
            attrs[key] = env[var]
    if job_id:
        attrs[NS + "job_id"] = job_id
    if not env.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = job_id or "pytorch-training"
    return attrs


class Resources:
    """One Resource per (rank, world size), built once: an elastic restart may change the world size.
    A rank's own snapshots say its world size when they can; else the configured one applies."""

    def __init__(self, job_id: str, world_size: int | None = None) -> None:
        self.job_id = job_id
        self.world_size = world_size
        self._declared: dict[int, int] = {}
        self._cache: dict[tuple[int, int | None], Resource] = {}

    def saw(self, ev: EntryEvent) -> None:
        if ev.world_size:
            self._declared[ev.rank] = ev.world_size

    def of(self, rank: int) -> Resource:
        world_size = self._declared.get(rank, self.world_size)
        r = self._cache.get((rank, world_size))
        if r is None:  # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
            r = self._cache[(rank, world_size)] = Resource.create(resource_attributes(rank, self.job_id, world_size))
        return r


def end_time(e: Entry, observed_ns: int, outcome: Outcome) -> tuple[int, str]:
    """When the entry ended, and how we know (the span's end_time_source)."""
    if outcome is Outcome.ISSUED:  # a hook retired it when it was issued: how long it ran, nothing says
        return e.time_created_ns, "unknown"
    # torch 2.15's hook stamps start and completion with one time, when the backend reported it done:
    # that is the end, and the duration ran before it
    if e.duration_ms is not None and e.time_started_ns and e.time_started_ns != e.time_completed_ns:
        return e.time_started_ns + int(e.duration_ms * 1e6), "duration"
    if e.time_completed_ns:
        return e.time_completed_ns, "discovered"
    return observed_ns, "observed"


def entry_attributes(rank: int, e: Entry) -> dict[str, AnyValue]:
    attrs: dict[str, AnyValue] = {
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


def finding_index(findings: list[Finding]) -> dict[tuple[str, int, int], Finding]:
    """Which entries a finding names: its culprits' entries of its collective."""
    out = {}
    for f in findings:
        if f.collective_seq_id is None:
            continue
        for rank in f.culprit_ranks:
            out[(f.pg_name, f.collective_seq_id, rank)] = f
    return out


def entry_span(ev: EntryEvent, job_id: str, resource: Resource, finding: Finding | None = None,
               trace_id: int | None = None) -> ReadableSpan:
    """`trace_id`: `entry_trace_id`, where the caller made it already."""
    e = ev.entry
    end, source = end_time(e, ev.observed_ns, ev.outcome)
    status = Status(StatusCode.UNSET)
    events = []
    if ev.outcome is Outcome.TIMED_OUT:
        status = Status(StatusCode.ERROR, "timed out")
    if finding is not None:
        status = Status(StatusCode.ERROR, finding.kind)
        events.append(Event(finding.kind, {"message": finding.message}, timestamp=end))
    attrs = entry_attributes(ev.rank, e)
    attrs[NS + "end_time_source"] = source
    attrs[NS + "outcome"] = ev.outcome
    ctx = SpanContext(trace_id or entry_trace_id(job_id, e), entry_span_id(job_id, ev), False,
                      TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(e.op or e.profiling_name, ctx, None, resource, attrs, events, (), SpanKind.INTERNAL,
                        status=status, start_time=e.time_created_ns, end_time=max(end, e.time_created_ns),
                        instrumentation_scope=SCOPE)


def stall_key(f: Finding, rank: int) -> tuple:
    """One stall of one rank: its span is sent once, however many passes still see it."""
    return (f.kind, f.pg_name, f.collective_seq_id, rank)


def stalled_ranks(f: Finding) -> list[int]:
    """The ranks that get a stall span for a finding: none unless it is a timed root cause of a collective."""
    if not f.root_cause or f.collective_seq_id is None or not f.time_ns:
        return []
    return sorted(set(f.culprit_ranks) | set(f.blocked_ranks))


def stall_span(f: Finding, rank: int, job_id: str, resource: Resource, now_ns: int) -> ReadableSpan:
    """`stalled <op>` (or `missing <op>` for a culprit that never issued it), enqueue to detection."""
    assert f.collective_seq_id is not None and f.time_ns is not None  # (for mypy) as stalled_ranks picks
    missing = rank in f.culprit_ranks and f.kind in MISSING_KINDS
    name = f"{'missing' if missing else 'stalled'} {f.op or 'collective'}"
    attrs: dict[str, AnyValue] = {NS + "rank": rank, NS + "pg.name": f.pg_name, NS + "pg.desc": f.pg_desc,
             NS + "collective_seq_id": f.collective_seq_id, NS + "op": f.op or "",
             NS + "finding": f.kind, NS + "culprit": rank in f.culprit_ranks}
    ctx = SpanContext(trace_id_for(job_id, f.pg_name, f.collective_seq_id),
                      span_id_for(job_id, rank, "stalled", f.kind, f.pg_name, f.collective_seq_id), False,
                      TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(name, ctx, None, resource, attrs, [Event("stalled", {"message": f.message}, timestamp=now_ns)],
                        (), SpanKind.INTERNAL, status=Status(StatusCode.ERROR, f.kind), start_time=f.time_ns,
                        end_time=max(now_ns, f.time_ns), instrumentation_scope=SCOPE)
