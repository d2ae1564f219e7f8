"""Live-poll every rank's Flight Recorder through PyTorch's worker server.

Targets are unix sockets found in a directory (`rank-<N>.sock`, as frexport.agent
creates them; any name carrying a rank works) and configured TCP URLs. Each poll
POSTs the JSON handler the server lists: `dump_nccl_trace_json` on CUDA builds
(the NCCL recorder), else `fr_trace_json`. A refused connection means the rank
is down: counted, backed off, never a crash. Polls run with bounded concurrency.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

from frexport import logs
from frexport.decode.discover import parse_name
from frexport.decode.errors import DecodeError
from frexport.decode.json_tail import parse_tail
from frexport.decode.normalize import normalize
from frexport.decode.read import decode_bytes
from frexport.live.state import LiveState
from frexport.model.dump import RankDump
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError, Target, request

JSON_HANDLERS = ("dump_nccl_trace_json", "fr_trace_json")  # in order of preference


@dataclass(frozen=True)
class RankTarget:
    rank: int
    target: Target
    name: str  # health/metrics label


@dataclass
class _Backoff:
    failures: int = 0
    next_try: float = 0.0
    handler: str | None = None  # chosen JSON handler, re-chosen after a failure
    agent_meta: tuple[int, int | None] = (0, None)  # (mtime_ns, world size) of the agent's rank-<N>.json


@dataclass
class WorkerServerSource:
    state: LiveState
    health: HealthRegistry
    sockets_dir: str | None = None
    urls: dict[int, str] = field(default_factory=dict)  # rank -> http://host:port
    timeout_s: float = 5.0
    concurrency: int = 8
    backoff_max_s: float = 60.0
    max_body: int = 64 * 1024 * 1024
    max_entries: int = 20000
    on_snapshot: Callable[[int, bytes], None] | None = None  # raw JSON body, for evidence bundles
    _backoff: dict[str, _Backoff] = field(default_factory=dict)
    _pool: ThreadPoolExecutor | None = None

    def targets(self) -> list[RankTarget]:
        found = {}
        if self.sockets_dir:
            try:
                names = sorted(os.listdir(self.sockets_dir))
            except OSError:
                names = []
            for name in names:
                if not name.endswith(".sock"):
                    continue
                parsed = parse_name(name[: -len(".sock")])
                if parsed is not None:
                    path = os.path.join(self.sockets_dir, name)
                    found[parsed[0]] = RankTarget(parsed[0], Target(unix_path=path), f"socket:{name[:-5]}")
        for rank, url in self.urls.items():
            found[rank] = RankTarget(rank, Target.parse(url), f"url:{url}")
        return [found[r] for r in sorted(found)]

    def poll(self) -> int:
        """Poll every due target once; returns how many snapshots were taken in."""
        targets = self.targets()
        live = {t.name for t in targets}
        for name in list(self._backoff):
            if name not in live:  # the socket file is gone: so is the rank's source
                del self._backoff[name]
                self.health.forget(name)
        now = time.monotonic()
        due = [t for t in targets if self._backoff.setdefault(t.name, _Backoff()).next_try <= now]
        if not due:
            return 0
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.concurrency), thread_name_prefix="frexport-poll")
        return sum(self._pool.map(self._poll_one, due))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, t: RankTarget, handler: str, timeout_s: float | None = None) -> bytes:
        """POST one handler (stacks, pickles for evidence); raises PeerError."""
        resp = request(t.target, "POST", f"/handler/{handler}", timeout=timeout_s or self.timeout_s,
                       max_body=self.max_body)
        if resp.status != 200:
            raise PeerError("http_status", f"{t.target}: /handler/{handler} answered {resp.status}")
        return resp.body

    def _poll_one(self, t: RankTarget) -> int:
        b = self._backoff[t.name]
        start = time.monotonic()
        now_ns = time.time_ns()
        try:
            if b.handler is None:
                b.handler = self._choose_handler(t)
            body = self.fetch(t, b.handler)
            dump = self._decode(t, body, now_ns)
        except PeerError as exc:
            self._failed(t, b, exc.reason, exc.detail, start, now_ns)
            return 0
        except DecodeError as exc:
            self.state.count_decode_error(exc.reason)
            self._failed(t, b, "decode_" + exc.reason, exc.detail, start, now_ns)
            return 0
        except Exception as exc:  # noqa: BLE001 - a bug on one rank's data must not stop the others
            logs.get().exception("polling %s failed", t.name, extra={"rank": t.rank})
            self._failed(t, b, "internal", f"{type(exc).__name__}: {exc}", start, now_ns)
            return 0
        b.failures, b.next_try = 0, 0.0
        if dump.world_size is None and t.target.unix_path:
            dump = replace(dump, declared_world_size=_agent_world_size(t.target.unix_path, b))
        taken = self.state.ingest(dump, t.name, now_ns)
        self.health.record(t.name, True, time.monotonic() - start, now_ns)
        if self.on_snapshot is not None:
            self.on_snapshot(t.rank, body)
        return int(taken)

    def _decode(self, t: RankTarget, body: bytes, now_ns: int) -> RankDump:
        """Parse only what is new since the last snapshot when that can be done safely, else all."""
        resume = self.state.resume_point(t.rank)
        if resume is not None:
            since, last = resume
            tail = parse_tail(body, since)
            anchor = next((e for e in last.entries if e.record_id == since), None)
            if tail is not None and anchor is not None and tail.entries[0].get("time_created_ns") == \
                    anchor.time_created_ns and (tail.first_record is None
                                                or tail.first_record >= last.entries[0].record_id):
                # the same process, further along: keep its older entries, decode the rest
                first = tail.first_record if tail.first_record is not None else since
                carry = tuple(e for e in last.entries if first <= e.record_id < since)
                raw = dict(tail.meta)
                raw["entries"] = tail.entries
                return normalize(raw, str(t.target), "json", rank=t.rank, dumped_at_ns=now_ns, size_bytes=len(body),
                                 keep_frames=False, carry=carry, max_entries=self.max_entries)
        return decode_bytes(body, str(t.target), rank=t.rank, dumped_at_ns=now_ns, keep_frames=False, only="json",
                            previous=self.state.previous_entries(t.rank), max_entries=self.max_entries)

    def _choose_handler(self, t: RankTarget) -> str:
        resp = request(t.target, "GET", "/handler/", timeout=self.timeout_s, max_body=1 << 20)
        try:
            names = set(json.loads(resp.body)) if resp.status == 200 else set()
        except (ValueError, TypeError):
            names = set()
        for h in JSON_HANDLERS:
            if h in names:
                return h
        return "fr_trace_json"  # servers too old to list handlers

    def _failed(self, t: RankTarget, b: _Backoff, reason: str, detail: str, start: float, now_ns: int) -> None:
        b.failures += 1
        b.handler = None
        b.next_try = time.monotonic() + min(self.backoff_max_s, 0.5 * 2 ** min(b.failures, 16))
        self.health.record(t.name, False, time.monotonic() - start, now_ns, reason, detail)


def _agent_world_size(socket_path: str, b: _Backoff) -> int | None:
    """WORLD_SIZE from the metadata frexport.agent writes beside the socket (`rank-<N>.json`):
    gloo's recorder does not say how many ranks the job has. Re-read only when it changes."""
    path = socket_path[: -len(".sock")] + ".json" if socket_path.endswith(".sock") else socket_path + ".json"
    try:
        st = os.stat(path)
        if st.st_mtime_ns == b.agent_meta[0]:
            return b.agent_meta[1]
        with open(path, "rb") as f:
            meta = json.loads(f.read(65536))
        ws = meta.get("world_size") if isinstance(meta, dict) else None
        b.agent_meta = (st.st_mtime_ns, ws if type(ws) is int and 0 < ws <= 1 << 24 else None)
    except (OSError, ValueError, RecursionError):  # no agent, or a file being replaced: no declared size this time
        return None
    return b.agent_meta[1]
