"""The peers endpoint's handler proxy: a job-level view asks this sidecar for a local rank's pickle
or stacks (`GET /api/v1/ranks/RANK/handler/NAME`, export/peer_api.py), the evidence it needs from
ranks in other pods. Only these handlers are asked, through the worker-server source's fetcher.

py-spy (which stops the rank's process while it reads it) is proxied only when this sidecar's
`evidence.pyspy` allows it, and at most once per rank every PYSPY_INTERVAL_S (a second ask within
it is 429 with Retry-After): a peer cannot make a rank be paused again and again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from frexport.sources.handlers import PICKLE_HANDLER, PYSPY_HANDLER, TRACEBACK_HANDLER, HandlerFetcher

PROXIED = (PICKLE_HANDLER, TRACEBACK_HANDLER, PYSPY_HANDLER)
PYSPY_INTERVAL_S = 30.0


class HandlerProxy:
    def __init__(self, fetcher: HandlerFetcher[Any] | None, deadline_s: float = 20.0, pyspy: bool = True) -> None:
        self.fetcher = fetcher  # the worker-server source; None: this sidecar has no worker server
        self.deadline_s = deadline_s
        self.pyspy = pyspy
        self._proxied = PROXIED if pyspy else tuple(h for h in PROXIED if h != PYSPY_HANDLER)
        self._pyspy_at: dict[int, float] = {}  # rank -> when py-spy last ran for a peer
        self._lock = threading.Lock()

    def served(self, rank: int) -> list[str]:
        """The handlers of `rank` a peer may ask for: those its worker server listed and we proxy."""
        return sorted(self.fetcher.handlers(rank) & set(self._proxied)) if self.fetcher is not None else []

    def fetch(self, rank: int, handler: str) -> tuple[int, bytes, str]:
        """(HTTP status, body, content type) of one handler of a local rank."""
        if handler not in self._proxied:
            off = " (evidence.pyspy is off on this sidecar)" if handler in PROXIED else ""
            return 404, f"handler {handler} is not served to peers{off}\n".encode(), "text/plain"
        targets = {t.rank: t for t in self.fetcher.targets()} if self.fetcher is not None else {}
        if self.fetcher is None or rank not in targets:
            return 404, f"rank {rank} has no worker server here\n".encode(), "text/plain"
        if handler == PYSPY_HANDLER and not self._pyspy_due(rank):
            return (429, f"py-spy ran for rank {rank} less than {PYSPY_INTERVAL_S:.0f} s ago: it pauses the "
                    "rank each time\n".encode(), "text/plain")
        got = self.fetcher.fetch_all([(targets[rank], handler)], self.deadline_s).get((rank, handler))
        if not isinstance(got, bytes):
            return 502, f"rank {rank}: {getattr(got, 'detail', 'no answer')}\n".encode(), "text/plain"
        ctype = "application/octet-stream" if handler == PICKLE_HANDLER else "text/plain"
        return 200, got, ctype

    def _pyspy_due(self, rank: int) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._pyspy_at.get(rank, -PYSPY_INTERVAL_S) < PYSPY_INTERVAL_S:
                return False
            if len(self._pyspy_at) > 65536:  # bounded: rank ids come from the URL
                self._pyspy_at.clear()
            self._pyspy_at[rank] = now
            return True
