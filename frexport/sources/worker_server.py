"""Live-poll every rank's Flight Recorder through PyTorch's worker server.

Targets are unix sockets found in a directory (`rank-<N>.sock`, as frexport.agent
creates them; any name carrying a rank works) and configured TCP URLs. Each poll
POSTs the JSON handler the server lists: `dump_nccl_trace_json` on CUDA builds
(the NCCL recorder), else `fr_trace_json`. A refused connection means the rank
is down: counted, backed off, never a crash. Polls run with bounded concurrency.
Only socket files are targets (symlinks in the directory are not followed), at most
`max_ranks` of them; a name that is not UTF-8 is labeled with its bytes escaped.
Bodies over `in_process_max_bytes` are decoded in the sandboxed decoder pool, under
its memory limit; smaller ones in-process (incrementally, see `_decode`).
The source remembers each rank's last snapshot (its own memory, not the sidecar's
state) so the next poll decodes only the entries that are new or still unfinished.
"""

from __future__ import annotations

import json
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from frexport import logs
from frexport.config import WorkerServers
from frexport.decode.discover import parse_name
from frexport.decode.errors import DecodeError
from frexport.decode.json_tail import parse_tail
from frexport.decode.normalize import normalize
from frexport.decode.read import decode_bytes
from frexport.decode.sandbox import DecoderPool
from frexport.model.dump import RankDump
from frexport.sources.base import Snapshot
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
    names: frozenset[str] = frozenset()  # handlers the server listed, when it did
    agent_meta: tuple[int, int | None] = (0, None)  # (mtime_ns, world size) of the agent's rank-<N>.json
    was_up: bool = False  # answered at least once
    refused: bool = False  # the last attempt found nothing listening


class WorkerServerSource:
    name = "worker_servers"

    def __init__(self, health: HealthRegistry, cfg: WorkerServers, decoder: DecoderPool | None = None,
                 in_process_max_bytes: int = 1 << 20, max_ranks: int = 4096) -> None:
        self.health = health
        self.cfg = cfg
        self.decoder = decoder
        self.in_process_max_bytes = in_process_max_bytes
        self.max_ranks = max_ranks
        self.skipped_targets = 0  # socket files over max_ranks at the last listing
        self._backoff: dict[str, _Backoff] = {}
        self._last: dict[int, RankDump] = {}  # rank -> its last snapshot (incremental decode)
        self._pool: ThreadPoolExecutor | None = None
        self._next_poll = 0.0
        self._internal_said: set[tuple[str, str]] = set()  # (source, exception type) logged with a traceback

    def targets(self) -> list[RankTarget]:
        found = {}
        if self.cfg.sockets_dir:
            try:
                names = sorted(os.listdir(self.cfg.sockets_dir))
            except OSError:
                names = []
            for name in names:
                if not name.endswith(".sock"):
                    continue
                parsed = parse_name(name[: -len(".sock")])
                if parsed is None:
                    continue
                path = os.path.join(self.cfg.sockets_dir, name)
                try:
                    if not stat.S_ISSOCK(os.lstat(path).st_mode):
                        continue  # a symlink (not followed: it could lead anywhere) or not a socket
                except OSError:
                    continue
                found[parsed[0]] = RankTarget(parsed[0], Target(unix_path=path), f"socket:{_label(name[:-5])}")
        for rank, url in self.cfg.urls.items():
            found[rank] = RankTarget(rank, Target.parse(url), f"url:{url}")
        ranks = sorted(found)
        skipped = max(0, len(ranks) - self.max_ranks)
        if skipped and skipped != self.skipped_targets:
            logs.get().warning("%d worker-server targets over max_ranks (%d) are not polled", skipped,
                               self.max_ranks)
        self.skipped_targets = skipped
        return [found[r] for r in ranks[: self.max_ranks]]

    def start(self) -> None:
        pass  # nothing to watch: targets are listed at every poll

    def collect(self) -> list[Snapshot]:
        """Poll every due target once, every `poll_interval` (the loop asks more often than that)."""
        now = time.monotonic()
        if now < self._next_poll:
            return []
        self._next_poll = now + self.cfg.poll_interval
        targets = self.targets()
        live = {t.name for t in targets}
        for name in list(self._backoff):
            if name not in live:  # the socket file is gone: so is the rank's source
                del self._backoff[name]
                self.health.forget(name)
                self._internal_said = {said for said in self._internal_said if said[0] != name}
        ranks = {t.rank for t in targets}
        for rank in [r for r in self._last if r not in ranks]:
            del self._last[rank]
        now = time.monotonic()
        due = [t for t in targets if self._backoff.setdefault(t.name, _Backoff()).next_try <= now]
        if not due:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency),
                                            thread_name_prefix="frexport-poll")
        return [snap for snap in self._pool.map(self._poll_one, due) if snap is not None]

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, t: RankTarget, handler: str, timeout_s: float | None = None) -> bytes:
        """POST one handler (stacks, pickles for evidence); raises PeerError."""
        resp = request(t.target, "POST", f"/handler/{handler}", timeout=timeout_s or self.cfg.timeout,
                       max_body=self.cfg.max_body_bytes)
        if resp.status != 200:
            raise PeerError("http_status", f"{t.target}: /handler/{handler} answered {resp.status}")
        return resp.body

    def _poll_one(self, t: RankTarget) -> Snapshot | None:
        b = self._backoff[t.name]
        start = time.monotonic()
        now_ns = time.time_ns()
        try:
            if b.handler is None:
                b.handler = self._choose_handler(t)
            body = self.fetch(t, b.handler)
            dump = self._decode(t, body, now_ns)
        except PeerError as exc:
            b.refused = exc.down
            self._failed(t, b, exc.reason, exc.detail, start, now_ns)
            return None
        except DecodeError as exc:
            self.health.count_decode_error(exc.reason)
            self._failed(t, b, "decode_" + exc.reason, exc.detail, start, now_ns)
            return None
        except Exception as exc:  # noqa: BLE001 - a bug on one rank's data must not stop the others
            # the traceback once per source and kind: a peer that keeps sending what triggers it
            # must not fill the log with one on every poll (the health's last_error keeps saying it)
            said = (t.name, type(exc).__name__)
            if said not in self._internal_said:
                self._internal_said.add(said)
                logs.get().exception("polling %s failed (said once for this source; counted as "
                                     "reason=internal)", t.name, extra={"rank": t.rank})
            self._failed(t, b, "internal", f"{type(exc).__name__}: {exc}", start, now_ns)
            return None
        b.failures, b.next_try, b.was_up, b.refused = 0, 0.0, True, False
        if dump.world_size is None and t.target.unix_path:
            dump = replace(dump, declared_world_size=_agent_world_size(t.target.unix_path, b))
        self._last[t.rank] = dump
        self.health.record(t.name, True, time.monotonic() - start, now_ns)
        return Snapshot(dump, t.name, now_ns)

    def _decode(self, t: RankTarget, body: bytes, now_ns: int) -> RankDump:
        """Parse only what is new since the last snapshot when that can be done safely, else all."""
        if self.decoder is not None and len(body) > self.in_process_max_bytes:
            # large: parsed under the decoders' memory limit, all of it (no incremental reuse)
            dump = self.decoder.run(BodyJob(body, str(t.target), t.rank, now_ns, self.cfg.max_entries))
            if isinstance(dump, DecodeError):
                raise dump
            return dump
        last = self._last.get(t.rank)
        if last is not None and last.entries:
            since = _resume_record(last)
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
                                 keep_frames=False, carry=carry, max_entries=self.cfg.max_entries)
        return decode_bytes(body, str(t.target), rank=t.rank, dumped_at_ns=now_ns, keep_frames=False, only="json",
                            previous={e.record_id: e for e in last.entries} if last is not None else None,
                            max_entries=self.cfg.max_entries)

    def down_ranks(self) -> set[int]:
        """Ranks that answered before and now refuse: their process is gone (killed or crashed). A rank
        whose socket file disappeared exited cleanly (the agent removes it) and is not listed."""
        return {t.rank for t in self.targets() if (b := self._backoff.get(t.name)) and b.was_up and b.refused}

    def handlers(self, rank: int) -> frozenset[str]:
        """The handlers the rank's worker server listed at its last successful poll (empty: unknown)."""
        for t in self.targets():
            if t.rank == rank and t.name in self._backoff:
                return self._backoff[t.name].names
        return frozenset()

    def fetch_all(self, wanted: list[tuple[RankTarget, str]],
                  deadline_s: float) -> dict[tuple[int, str], bytes | PeerError]:
        """POST many handlers at once (evidence: pickles and stacks of many ranks), all within one total
        deadline: a rank whose handler never answers costs the deadline, not the deadline per rank.
        Keyed by (rank, handler); a failure is the PeerError."""
        if not wanted:
            return {}
        end = time.monotonic() + deadline_s
        out: dict[tuple[int, str], bytes | PeerError] = {}
        pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency), thread_name_prefix="frexport-fetch")
        try:
            futures = {pool.submit(self._fetch_by, t, h, end): (t.rank, h) for t, h in wanted}
            done, pending = wait(futures, timeout=max(0.0, end - time.monotonic()))
            for f in done:
                try:
                    out[futures[f]] = f.result()
                except PeerError as exc:
                    out[futures[f]] = exc
            for f in pending:
                out[futures[f]] = PeerError("timeout", f"no answer within the {deadline_s:g} s evidence deadline")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a request still running ends at its own deadline
        return out

    def _fetch_by(self, t: RankTarget, handler: str, end: float) -> bytes:
        left = end - time.monotonic()
        if left <= 0:
            raise PeerError("timeout", "evidence deadline passed before the request started")
        return self.fetch(t, handler, left)

    def _choose_handler(self, t: RankTarget) -> str:
        resp = request(t.target, "GET", "/handler/", timeout=self.cfg.timeout, max_body=1 << 20)
        try:
            listed = json.loads(resp.body) if resp.status == 200 else []
            names = frozenset(n for n in listed if isinstance(n, str)) if isinstance(listed, list) else frozenset()
        except (ValueError, TypeError, RecursionError):
            names = frozenset()
        self._backoff[t.name].names = names
        for h in JSON_HANDLERS:
            if h in names:
                return h
        return "fr_trace_json"  # servers too old to list handlers

    def _failed(self, t: RankTarget, b: _Backoff, reason: str, detail: str, start: float, now_ns: int) -> None:
        b.failures += 1
        b.handler = None
        b.next_try = time.monotonic() + min(self.cfg.backoff_max, 0.5 * 2 ** min(b.failures, 16))
        self.health.record(t.name, False, time.monotonic() - start, now_ns, reason, detail)


@dataclass(frozen=True)
class BodyJob:
    """A worker-server body decoded in a sandboxed decoder (see DecoderPool)."""

    body: bytes
    path: str  # the target, for errors
    rank: int
    now_ns: int
    max_entries: int

    def __call__(self) -> RankDump:
        return decode_bytes(self.body, self.path, rank=self.rank, dumped_at_ns=self.now_ns, keep_frames=False,
                            only="json", max_entries=self.max_entries)


def _label(name: str) -> str:
    """A file name as text a label can hold: undecodable bytes (surrogate escapes) shown as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _resume_record(last: RankDump) -> int:
    """Where to parse the next snapshot from: the oldest entry still unfinished in the last one (it
    may have finished since), else the newest (parsed again to check it is the same process)."""
    return next((e.record_id for e in last.entries if not e.finished), last.entries[-1].record_id)


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
