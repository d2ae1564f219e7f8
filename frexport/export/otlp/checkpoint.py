"""Exactly once across sidecar restarts: a `SpanExporter` wrapper that remembers what was exported.

A restarted sidecar sees every rank's ring buffer again and would export it all again. The
checkpoint remembers, per rank, the newest creation time exported and the recent record ids, so
those entries are skipped; entries that finished out of order are still sent, and a restarted
trainer (record ids from 0 again, newer creation times) is recognised as new.

Progress is recorded only when the wrapped exporter reports SUCCESS, and only from what the
pipeline told the wrapper when it queued each span (`expect`): the spans themselves are not read
back. The file is written with one atomic write at most every `save_every_s`, and on flush and
shutdown; an unreadable file means no checkpoint (export starts over), never a crash.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from frexport import logs
from frexport.files import atomic_write

WINDOW = 8192  # record ids remembered per rank: more than a ring buffer holds by default


@dataclass(frozen=True)
class Progress:
    """What exporting one entry's span means for the checkpoint."""

    rank: int
    record_id: int
    created_ns: int


@dataclass
class RankCheckpoint:
    """What was exported for one rank: the newest creation time (a restarted process's entries are
    newer), and the recent record ids (entries that finished out of order are still exported)."""

    created_ns: int = 0
    ids: set[int] = field(default_factory=set)

    def has(self, record_id: int, created_ns: int) -> bool:
        if not self.ids or created_ns > self.created_ns:
            return False
        return record_id in self.ids or record_id < min(self.ids)

    def add(self, record_id: int, created_ns: int) -> None:
        self.ids.add(record_id)
        self.created_ns = max(self.created_ns, created_ns)
        if len(self.ids) > WINDOW:
            for rid in sorted(self.ids)[: len(self.ids) - WINDOW]:
                self.ids.discard(rid)


class CheckpointExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, path: str | None = None, save_every_s: float = 5.0) -> None:
        self.inner = inner
        self.path = path
        self.save_every_s = save_every_s
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one writer of the file at a time (export thread, shutdown)
        self._expected: dict[int, Progress] = {}  # span id -> what its export proves
        self._ranks: dict[int, RankCheckpoint] = self._load()
        self._saved_at = time.monotonic()
        self._dirty = False

    # --- told by the pipeline ----------------------------------------------------------------

    def exported(self, p: Progress) -> bool:
        """Whether this entry's span was exported before (by this process or one before a restart)."""
        with self._lock:
            cp = self._ranks.get(p.rank)
            return cp is not None and cp.has(p.record_id, p.created_ns)

    def expect(self, span_id: int, p: Progress) -> None:
        """A span was queued: when it is exported, this is the progress it makes."""
        with self._lock:
            self._expected[span_id] = p

    def forget(self, span_ids: Iterable[int]) -> None:
        """Spans that will never be exported (dropped from a full queue)."""
        with self._lock:
            for sid in span_ids:
                self._expected.pop(sid, None)

    # --- SpanExporter --------------------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        finally:
            # whatever happened, these spans are not retried: their expectations end here (in a call of
            # its own: a failed export can keep this frame in a cycle of the HTTP client's, with its locals)
            self._settle(spans, result == SpanExportResult.SUCCESS)
        return result

    def _settle(self, spans: Sequence[ReadableSpan], exported: bool) -> None:
        with self._lock:
            made = [self._expected.pop(s.context.span_id, None) for s in spans]
            if not exported:
                return
            for p in made:
                if p is not None:
                    self._ranks.setdefault(p.rank, RankCheckpoint()).add(p.record_id, p.created_ns)
                    self._dirty = True
            due = self._dirty and time.monotonic() - self._saved_at >= self.save_every_s
        if due:
            self.save()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.save()
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.save()
        self.inner.shutdown()

    # --- the file ------------------------------------------------------------------------------

    def save(self) -> None:
        if not self.path:
            return
        with self._save_lock:
            with self._lock:
                data = {"ranks": {str(r): {"created_ns": c.created_ns, "ids": sorted(c.ids)}
                                  for r, c in self._ranks.items()}}
                self._dirty, self._saved_at = False, time.monotonic()
            try:
                atomic_write(self.path, json.dumps(data).encode())
            except OSError as exc:
                logs.get().warning("cannot write trace checkpoint %s: %s", self.path, exc)

    def _load(self) -> dict[int, RankCheckpoint]:
        if not self.path:
            return {}
        try:
            with open(self.path) as f:
                data = json.load(f)
            return {int(r): RankCheckpoint(int(v["created_ns"]), {int(i) for i in v["ids"]})
                    for r, v in data.get("ranks", {}).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logs.get().warning("ignoring unreadable trace checkpoint %s: %s", self.path, exc)
            return {}
