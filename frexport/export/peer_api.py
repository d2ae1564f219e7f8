"""The peers endpoint: this sidecar's live window, for a job-level view (`frexport jobview`).

    GET /api/v1/ranks?since=RANK:EPOCH:RECORD:NPG,... every local rank's latest snapshot, compact JSON
    GET /api/v1/ranks/RANK/handler/NAME             one of a few worker-server handlers of a local rank

Served by the web server beside /metrics, behind the same web config (TLS, basic auth); only when
`peers.serve` is set (docs/multi-node.md). Per rank the body holds the entries of the analysis window
(the newest `window` and every older unfinished one) from the client's cursor on: a client that sends
back the oldest record it still holds unfinished (else its newest + 1) with the epoch it got moves
only what is new or may have changed since its last pass. A rank whose epoch changed (restarted) is
sent whole; the process groups only when the client holds another number of them (NPG: groups are
only ever added, and a 4096-rank group's member list is large). The handler proxy asks the rank's
worker server for its pickle (call sites) or stacks, the evidence the view needs from ranks in
other pods; nothing else is proxied. py-spy (which stops the rank's process while it reads it) is
proxied only when this sidecar's `evidence.pyspy` allows it, and at most once per rank every
PYSPY_INTERVAL_S (a second ask within it is 429 with Retry-After): a peer cannot make a rank be
paused again and again.
"""

from __future__ import annotations

import json
import re
import threading
import time

from frexport.live.state import LiveState
from frexport.model.dump import Entry, RankDump
from frexport.model.peer_rows import COLUMNS, FORMAT

PROXIED = ("frexport_fr_pickle", "dump_traceback", "pyspy_dump")
PYSPY_INTERVAL_S = 30.0
_HANDLER_PATH = re.compile(r"^/api/v1/ranks/(\d{1,9})/handler/([a-z_]{1,64})$")
_COLUMN_INDEX = [Entry._fields.index(c) for c in COLUMNS]


class PeerApi:
    def __init__(self, state: LiveState, window: int, fetcher=None, deadline_s: float = 20.0,
                 pyspy: bool = True) -> None:
        self.state = state
        self.window = window
        self.fetcher = fetcher  # the worker-server source (targets, handlers, fetch_all), when there is one
        self.deadline_s = deadline_s
        self.requests = 0
        self.pyspy = pyspy
        self._proxied = PROXIED if pyspy else tuple(h for h in PROXIED if h != "pyspy_dump")
        self._pyspy_at: dict[int, float] = {}  # rank -> when py-spy last ran for a peer
        self._lock = threading.Lock()

    def handle(self, path: str, query: str) -> tuple[int, bytes, str]:
        self.requests += 1
        if path == "/api/v1/ranks":
            cursors = parse_cursors(query)
            if cursors is None:
                return 400, b"bad since: expected since=RANK:EPOCH:RECORD:NPG,...\n", "text/plain"
            return 200, self.ranks_body(cursors), "application/json"
        m = _HANDLER_PATH.match(path)
        if m:
            return self.proxy(int(m.group(1)), m.group(2))
        return 404, b"not found\n", "text/plain"

    def ranks_body(self, cursors: dict[int, tuple[int, int, int]]) -> bytes:
        ranks = []
        for rank, (epoch, dump) in sorted(self.state.latest_epochs().items()):
            cur = cursors.get(rank)
            same = cur is not None and cur[0] == epoch
            ranks.append(self._rank(rank, epoch, dump, cur[1] if cur is not None and same else None,
                                    not same or cur is None or cur[2] != len(dump.pg_config)))
        doc = {"format": FORMAT, "now_ns": time.time_ns(), "ranks": ranks}
        return json.dumps(doc, separators=(",", ":")).encode()

    def _rank(self, rank: int, epoch: int, dump: RankDump, since: int | None, groups: bool) -> dict:
        entries = dump.entries
        cut = max(0, len(entries) - self.window)
        window = [e for e in entries[:cut] if not e.finished] + list(entries[cut:])
        sent = window if since is None else [e for e in window if e.record_id >= since]
        handlers = sorted(self.fetcher.handlers(rank) & set(self._proxied)) if self.fetcher is not None else []
        out = {"rank": rank, "epoch": epoch, "dumped_at_ns": dump.dumped_at_ns, "world_size": dump.world_size,
               "first": window[0].record_id if window else None, "full": since is None,
               "version": dump.version_text, "comm_lib_version": dump.comm_lib_version,
               "pg_status": [list(s) for s in dump.pg_status], "handlers": handlers,
               "entries": [[e[i] for i in _COLUMN_INDEX] for e in sent]}
        if groups:
            out["pg_config"] = [[c.name, c.desc, list(c.ranks) if c.ranks is not None else None]
                                for c in dump.pg_config]
        return out

    def proxy(self, rank: int, handler: str) -> tuple[int, bytes, str]:
        if handler not in self._proxied:
            off = " (evidence.pyspy is off on this sidecar)" if handler in PROXIED else ""
            return 404, f"handler {handler} is not served to peers{off}\n".encode(), "text/plain"
        targets = {t.rank: t for t in self.fetcher.targets()} if self.fetcher is not None else {}
        if rank not in targets:
            return 404, f"rank {rank} has no worker server here\n".encode(), "text/plain"
        if handler == "pyspy_dump" and not self._pyspy_due(rank):
            return (429, f"py-spy ran for rank {rank} less than {PYSPY_INTERVAL_S:.0f} s ago: it pauses the "
                    "rank each time\n".encode(), "text/plain")
        got = self.fetcher.fetch_all([(targets[rank], handler)], self.deadline_s).get((rank, handler))
        if not isinstance(got, bytes):
            return 502, f"rank {rank}: {getattr(got, 'detail', 'no answer')}\n".encode(), "text/plain"
        ctype = "application/octet-stream" if handler == "frexport_fr_pickle" else "text/plain"
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


def parse_cursors(query: str) -> dict[int, tuple[int, int, int]] | None:
    """'since=3:0:120:2,4:1:7:2' -> {3: (0, 120, 2), 4: (1, 7, 2)}; None when malformed."""
    out: dict[int, tuple[int, int, int]] = {}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key != "since" or not value:
            continue
        for item in value.replace("%3A", ":").replace("%3a", ":").replace("%2C", ",").replace("%2c", ",").split(","):
            fields = item.split(":")
            if len(fields) != 4 or not all(f.isdecimal() and len(f) <= 19 for f in fields):
                return None
            out[int(fields[0])] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return out
