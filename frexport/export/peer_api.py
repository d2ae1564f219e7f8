"""The peers endpoint: this sidecar's live window, for a job-level view (`frexport jobview`).

    GET /api/v1/ranks?since=RANK:EPOCH:RECORD:NPG,...[&members=runs][&rows=kinds]
                                                    every local rank's latest snapshot, compact JSON
    GET /api/v1/ranks/RANK/handler/NAME             one of a few worker-server handlers of a local rank

Served by the web server beside /metrics, behind the same web config (TLS, basic auth); only when
`peers.serve` is set (docs/multi-node.md). Per rank the body holds the entries of the analysis window
(the newest `window` and every older unfinished one) from the client's cursor on: a client that sends
back the oldest record it still holds unfinished (else its newest + 1) with the epoch it got moves
only what is new or may have changed since its last pass. A rank whose epoch changed (restarted) is
sent whole; the process groups only when the client holds another number of them (NPG: groups are
only ever added, and a 4096-rank group's member list is large; with `members=runs` a long one goes as
runs, and with `rows=kinds` each rank's rows as kinds and short rows, model/peer_rows.py). The handler path
is answered by the evidence stage's proxy (frexport/evidence/proxy.py: which handlers, py-spy's rate
limit): this module only serves what the state and the proxy hand it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from itertools import compress, repeat
from operator import attrgetter, itemgetter, le

import msgspec

from frexport.evidence.proxy import HandlerProxy
from frexport.live.state import LiveState
from frexport.model.dump import Entry, RankDump
from frexport.model.peer_rows import COLUMNS, FORMAT, RUNS_FROM, by_kind, member_runs
from frexport.model.rank_trace import window

_HANDLER_PATH = re.compile(r"^/api/v1/ranks/(\d{1,9})/handler/([a-z_]{1,64})$")
_ROW = itemgetter(*(Entry._fields.index(c) for c in COLUMNS))  # an entry's columns, as a tuple
_ENCODER = msgspec.json.Encoder()
_RECORD_ID = attrgetter("record_id")


class PeerApi:
    def __init__(self, state: LiveState, window: int, proxy: HandlerProxy | None = None,
                 stall_suspected: Callable[[], bool] | None = None) -> None:
        self.state = state
        self.window = window
        self.stall_suspected = stall_suspected  # the pod's poller: whether it suspects a stall now
        self.proxy = proxy or HandlerProxy(None)  # without one: no handler served, every rank "not here"
        self.requests = 0
        self._runs: dict[int, tuple[tuple[int, ...], dict]] = {}  # id of a member tuple -> (it, its runs)

    def handle(self, path: str, query: str) -> tuple[int, bytes, str]:
        self.requests += 1
        if path == "/api/v1/ranks":
            cursors = parse_cursors(query)
            if cursors is None:
                return 400, b"bad since: expected since=RANK:EPOCH:RECORD:NPG,...\n", "text/plain"
            asked = query.split("&")
            return 200, self.ranks_body(cursors, "members=runs" in asked, "rows=kinds" in asked), "application/json"
        m = _HANDLER_PATH.match(path)
        if m:
            return self.proxy.fetch(int(m.group(1)), m.group(2))
        return 404, b"not found\n", "text/plain"

    def ranks_body(self, cursors: dict[int, tuple[int, int, int]], runs: bool = False, kinds: bool = False) -> bytes:
        ranks = []
        for rank, (epoch, dump) in sorted(self.state.latest_epochs().items()):
            cur = cursors.get(rank)
            same = cur is not None and cur[0] == epoch
            ranks.append(self._rank(rank, epoch, dump, cur[1] if cur is not None and same else None,
                                    not same or cur is None or cur[2] != len(dump.pg_config), runs, kinds))
        doc = {"format": FORMAT, "now_ns": time.time_ns(), "ranks": ranks,
               "stall_suspected": bool(self.stall_suspected is not None and self.stall_suspected())}
        return _encode(doc)

    def _rank(self, rank: int, epoch: int, dump: RankDump, since: int | None, groups: bool, runs: bool,
              kinds: bool) -> dict:
        held = window(dump.entries, self.window)  # (the analysis' window: C-level passes, as the rows below)
        sent = held if since is None else compress(held, map(le, repeat(since), map(_RECORD_ID, held)))
        handlers = self.proxy.served(rank)
        out: dict[str, object] = {
            "rank": rank, "epoch": epoch, "dumped_at_ns": dump.dumped_at_ns, "world_size": dump.world_size,
            "first": held[0].record_id if held else None, "full": since is None,
            "version": dump.version_text, "comm_lib_version": dump.comm_lib_version,
            "pg_status": [list(s) for s in dump.pg_status], "handlers": handlers,
            "entries": list(map(_ROW, sent))}
        if kinds:
            try:
                out["kinds"], out["entries"] = by_kind(out["entries"])  # type: ignore[arg-type]
            except TypeError:  # (a value that cannot be hashed: the rows go whole, which the client reads too)
                pass
        if groups:
            out["pg_config"] = [[c.name, c.desc, self._members(c.ranks, runs)] for c in dump.pg_config]
        return out

    def _members(self, ranks: tuple[int, ...] | None, runs: bool) -> list[int] | dict | None:
        if ranks is None or not runs or len(ranks) < RUNS_FROM:
            return list(ranks) if ranks is not None else None
        hit = self._runs.get(id(ranks))
        if hit is None or hit[0] is not ranks:
            if len(self._runs) > 1024:  # (the groups of a few ranks' snapshots)
                self._runs.clear()
            hit = self._runs[id(ranks)] = (ranks, {"runs": member_runs(ranks)})
        return hit[1]


def _encode(doc: dict) -> bytes:
    """Compact JSON. msgspec writes a busy pod's body ~4x faster than the standard library (at 16384 ranks
    the pods' serving was ~3 s of CPU a pass, two thirds of it json.dumps); the JSON it writes reads back
    the same. A value it refuses (a string with a lone surrogate, which a pickle can hold) is written
    as the standard library writes it: escaped. (The decoders make no NaN or infinite float, the one
    value the two would write differently.)"""
    try:
        return _ENCODER.encode(doc)
    except (TypeError, ValueError):
        return json.dumps(doc, separators=(",", ":")).encode()


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
