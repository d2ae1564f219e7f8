"""Each source's own health, node_exporter style: up, duration, errors by reason, decode errors."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SourceHealth:
    name: str  # e.g. "socket:rank-3", "url:http://10.0.0.5:25999", "dumps:/shared/fr/dumps"
    up: bool = False
    last_success_ns: int | None = None
    last_duration_s: float = 0.0
    attempts: int = 0
    errors: Counter = field(default_factory=Counter)  # reason -> count
    last_error: str | None = None


class HealthRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, SourceHealth] = {}
        self._decode_errors: Counter[str] = Counter()  # across sources, by DecodeError reason
        self._reads: Counter[str] = Counter()  # ranks' reads: "status", or why entries were read

    def record(self, name: str, ok: bool, duration_s: float, now_ns: int, reason: str | None = None,
               detail: str | None = None) -> None:
        with self._lock:
            h = self._sources.get(name)
            if h is None:
                h = self._sources[name] = SourceHealth(name)
            h.attempts += 1
            h.up = ok
            h.last_duration_s = duration_s
            if ok:
                h.last_success_ns = now_ns
            else:
                h.errors[reason or "error"] += 1
                h.last_error = detail

    def count_skipped(self, name: str, reason: str, detail: str) -> None:
        """A file the source skipped (not a dump, unreadable as one): counted in its errors, while the
        source itself stays as up as it was: it was read, and holds what it should besides."""
        with self._lock:
            h = self._sources.get(name)
            if h is None:
                h = self._sources[name] = SourceHealth(name, up=True)
            h.errors[reason] += 1
            h.last_error = detail

    def count_decode_error(self, reason: str) -> None:
        with self._lock:
            self._decode_errors[reason] += 1

    def count_read(self, what: str) -> None:
        """One read of a rank: "status" (status only), else why its entries were read."""
        with self._lock:
            self._reads[what] += 1

    def reads(self) -> dict[str, int]:
        with self._lock:
            return dict(self._reads)

    def forget(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def view(self) -> list[SourceHealth]:
        with self._lock:
            return [SourceHealth(h.name, h.up, h.last_success_ns, h.last_duration_s, h.attempts, Counter(h.errors),
                                 h.last_error) for h in self._sources.values()]

    def decode_errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._decode_errors)
