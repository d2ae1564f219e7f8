"""Live-poll every rank's Flight Recorder through PyTorch's worker server.

Targets are unix sockets found in a directory (`rank-<N>.sock`, as frexport.agent
creates them; any name carrying a rank works) and configured TCP URLs. Each poll
POSTs the JSON handler the server lists: frexport.agent's `frexport_fr_live` where the
agent runs (it sends only the entries from a cursor on: `?after=<record id>`, at less than
half the trainer's CPU), else `dump_nccl_trace_json` on CUDA builds (the NCCL recorder),
else PyTorch's `fr_trace_json`. A refused connection means the rank
is down: counted, backed off, never a crash. Polls run with bounded concurrency.
Only socket files are targets (symlinks in the directory are not followed), at most
`max_ranks` of them; a name that is not UTF-8 is labeled with its bytes escaped.
A poll decodes in-process only what is new since the last snapshot (see `_decode`) when that
part is at most `in_process_max_bytes`; otherwise a body over that size is decoded whole in the
sandboxed decoder pool, under its memory limit, and a smaller one in-process.
The source remembers each rank's last snapshot (its own memory, not the sidecar's
state) so the next poll decodes only the entries that are new or still unfinished.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import stat
import time
from bisect import bisect_left
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from operator import attrgetter

from frexport import logs
from frexport.config import WorkerServers, recorder_name_ok
from frexport.decode import scanned
from frexport.decode.discover import parse_name
from frexport.decode.errors import DecodeError
from frexport.decode.fields import opt_int
from frexport.decode.json_decode import parse_tail
from frexport.decode.normalize import normalize
from frexport.decode.pickle_tail import parse_pickle_tail
from frexport.decode.read import decode_bytes
from frexport.decode.sandbox import DecoderPool
from frexport.decode.scanned_dump import dump_from_pickle
from frexport.model.dump import ProcessGroupStatus, RankDump
from frexport.model.recorders import Shifter, group_statuses, merge_recorders, pg_names
from frexport.sources.base import Snapshot
from frexport.sources.entry_schedule import Action, EntrySchedule, Status, status_rows
from frexport.sources.handlers import DUMP_FILE_HANDLER, PICKLE_HANDLER, Fetched, fetch_cap
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError, Response, Target, fetch_within, request, request_all
from frexport.sources.live_cursor import Cursors

_record_id = attrgetter("record_id")

# frexport.agent's live-poll handler (frexport/agent/live.py; the sidecar imports nothing of the
# agent, a unit test keeps the names equal): the entries from `?after=<record id>` on, and the
# record id of the oldest entry the buffer still holds under FIRST_RECORD_KEY.
LIVE_HANDLER = "frexport_fr_live"
FIRST_RECORD_KEY = "frexport_first_record"
RECORDERS_HANDLER = "frexport_recorders"
_PICKLE = b"\x80"  # the first byte of PyTorch's pickles (protocol 2): the agent's live answer in that form
LIVE_RETRY_S = 60.0  # after the live handler failed, PyTorch's own JSON handler is polled this long

# A rank is every recorder its process holds (model/recorders.py). PyTorch's handlers: gloo's (the
# default) recorder is `fr_trace_json`, the legacy NCCL one `dump_nccl_trace_json` (CUDA builds; empty
# for gloo groups), and from 2.15 (which also lists `fr_dump_file`) any backend's `fr_trace_json?backend=`.
DEFAULT_RECORDER = "gloo"
LEGACY_NCCL = "nccl"
LEGACY_NCCL_HANDLER = "dump_nccl_trace_json"
PER_BACKEND_MARKER = DUMP_FILE_HANDLER
# Without the agent, the hooked recorders a 2.15 rank may hold are found by asking for these (an
# unknown name answers an empty recorder): the backends PyTorch itself ships. An out-of-tree backend
# is found by the agent only (it reads the names from the process groups).
PROBED_RECORDERS = ("nccl2", "nccl-lazy", "nccl", "xccl", "mpi", "ucc")
PROBE_EVERY_S = 30.0
SOCKETS_RACY_S = 2.0  # a sockets dir that changed this recently is listed at every poll (_socket_targets)
RELIST_S = 10.0  # the agent's list of recorders is asked again this often (a group on a new backend)
STATUS_HANDLER = "frexport_fr_status"  # frexport.agent: one recorder's pg_status, no entries
BUFFER_SIZE_KEY = "frexport_buffer_size"
EXITING_KEY = "frexport_exiting"  # the rank's process is exiting: its entries, one last time
MAX_BUFFER = 1 << 24
HEALTH_HANDLER = "c10d_health_check"  # torch 2.15: which backends aborted (a watchdog timeout, an async error)
MAX_RECORDERS = 16
MAX_GROUPS = 4096  # process groups read from one status
# Answers parsed in this process, outside the decoders' sandbox, are read up to a bound and no further
# (the client's body cap stops the read; a 60 MiB status took the sidecar to 1.5 GB): a status up to
# `in_process_max_bytes` (it lists every group), these up to SMALL_ANSWER_BYTES. Past it, the rank's
# poll fails (too_large).
SMALL_ANSWER_BYTES = 64 * 1024  # the agent's recorder list, c10d_health_check: about 100 bytes


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
    pid: tuple[int, int] | None = None  # (mtime_ns of rank-<N>.json, pid) when the pid can be checked from here
    live_off_until: float = 0.0  # monotonic time before which the agent's live handler is not asked (it failed)
    recorders: tuple[str, ...] = ()  # the recorders polled (model/recorders.py), re-listed as _recorders says
    recorders_at: float = 0.0  # monotonic time they were last listed
    next_whole: float = 0.0  # without a status-only read: monotonic time of its next whole-dump poll
    read_before: bool = False  # its entries were read once (frexport_entries_reads_total: first, not poll)
    # the agent's live answer asked in its pickle form (decode/pickle_tail.py) until one could not be
    # read (a layout the scanner refuses): JSON from then on, never the whole buffer at every read
    live_pickle: bool = True


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
        self._last: dict[tuple[int, str], RankDump] = {}  # (rank, recorder) -> its last snapshot (incremental decode)
        self._cursors = Cursors()  # where each _last's next answer starts
        self._shifters: dict[int, dict[str, Shifter]] = {}  # rank -> its recorders' record-id moves
        self._merged: dict[int, RankDump] = {}  # rank -> its last snapshot (all recorders)
        self.schedule = EntrySchedule(cfg.entries_interval, on_fetch=health.count_read)
        self._suspected = False
        self._status_ns: dict[int, int] = {}  # rank -> wall clock when its last status read began
        self._names: dict[tuple[int, str], dict[int, str]] = {}  # (rank, recorder) -> pg_names of its _last
        self._pool: ThreadPoolExecutor | None = None
        self._next_poll = 0.0
        self._turn = 0.0  # when the current turn of `collect` began (monotonic): what it decides by
        self._sockets_seen = time.monotonic()  # when the sockets dir last held a socket (or we started)
        self._said_no_sockets = False
        self._said: set[tuple[str, str]] = set()  # (source, what) logged once (_say_once)
        self._listing: tuple[tuple[int, int, int] | None, dict[int, RankTarget]] = (None, {})  # the sockets dir's

    def targets(self) -> list[RankTarget]:
        found = dict(self._socket_targets(self.cfg.sockets_dir)) if self.cfg.sockets_dir else {}
        for rank, url in self.cfg.urls.items():
            found[rank] = RankTarget(rank, Target.parse(url), f"url:{url}")
        ranks = sorted(found)
        skipped = max(0, len(ranks) - self.max_ranks)
        if skipped and skipped != self.skipped_targets:
            logs.get().warning("%d worker-server targets over max_ranks (%d) are not polled", skipped,
                               self.max_ranks)
        self.skipped_targets = skipped
        return [found[r] for r in ranks[: self.max_ranks]]

    def _socket_targets(self, path: str) -> dict[int, RankTarget]:
        """The sockets dir's ranks, listed again only when the directory changed: the sidecar's loop asks
        several times a second, and listing 8 sockets each time was a tenth of its CPU. A directory's
        mtime moves when a file is added, removed or renamed in it; one that moved within the last
        `SOCKETS_RACY_S` is listed every time, since a second change inside the same timestamp tick leaves
        it unchanged (git's "racy" rule)."""
        try:
            st = os.stat(path)
        except OSError:
            return {}
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if key == self._listing[0] and time.time_ns() - st.st_mtime_ns > SOCKETS_RACY_S * 1e9:
            return self._listing[1]
        try:
            names = sorted(os.listdir(path))
        except OSError:
            names = []
        found = {}
        for name in names:
            if not name.endswith(".sock"):
                continue
            parsed = parse_name(name[: -len(".sock")])
            if parsed is None:
                continue
            sock = os.path.join(path, name)
            try:
                if not stat.S_ISSOCK(os.lstat(sock).st_mode):
                    continue  # a symlink (not followed: it could lead anywhere) or not a socket
            except OSError:
                continue
            found[parsed[0]] = RankTarget(parsed[0], Target(unix_path=sock), f"socket:{_label(name[:-5])}")
        self._listing = (key, found)
        return found

    def start(self) -> None:
        pass  # nothing to watch: targets are listed at every poll

    def collect(self) -> list[Snapshot]:
        """Poll every due target once: status first (sources/entry_schedule.py) every
        `status_interval` where the rank serves a status-only read, else its whole dump every
        `poll_interval` (the loop asks more often than either).

        Whatever is due is decided, and stamped, at the turn's time: a rank stamped when its own read
        began, a little later, was not yet due when the next turn came, and waited a whole interval more."""
        now = self._turn = time.monotonic()
        if now < self._next_poll:
            return []
        self._next_poll = now + (min(self.cfg.status_interval, self.cfg.poll_interval) if self.cfg.status_first
                                 else self.cfg.poll_interval)
        targets = self.targets()
        if self.cfg.sockets_dir:
            self._sockets_dir_health(any(t.target.unix_path for t in targets))
        live = {t.name for t in targets}
        for name in list(self._backoff):
            if name not in live:  # the socket file is gone: so is the rank's source
                del self._backoff[name]
                self.health.forget(name)
                self._said = {said for said in self._said if said[0] != name}
        ranks = {t.rank for t in targets}
        for key in [k for k in self._last if k[0] not in ranks]:
            del self._last[key]
            self._names.pop(key, None)
            self._cursors.forget(key)
        for rank in [r for r in self._shifters if r not in ranks]:
            del self._shifters[rank]
            self._merged.pop(rank, None)
        for rank in [r for r in self._status_ns if r not in ranks]:
            del self._status_ns[rank]
        self.schedule.forget(ranks)
        due = [t for t in targets if self._backoff.setdefault(t.name, _Backoff()).next_try <= now]
        if not due:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency),
                                            thread_name_prefix="frexport-poll")
        statused = [t for t in due if self._status_first(self._backoff[t.name])]
        whole = [t for t in due if t not in statused and self._backoff[t.name].next_whole <= now]
        for t in whole:
            self._backoff[t.name].next_whole = now + self.cfg.poll_interval
        # a rank whose entries are due whatever its status says: fetched without reading it first
        ahead = {t.name: why for t in statused if (why := self.schedule.ahead(t.rank, now)) is not None}
        to_read = [t for t in statused if t.name not in ahead]
        # every status before any decision: a stall suspected on one rank fetches every rank's entries
        read = self._read_all_statuses(to_read)
        suspected = self._suspected = self.schedule.suspected(now, settle=self.cfg.suspect_after)
        unread = [t for t in statused if t.name in ahead]
        # What a read status decides is decided here, and a rank that needs no entries has its snapshot
        # made here too: handing each to a poll thread and back cost as much as its status read.
        decided = {t.name: action for t in read if (action := self._decided(t, now, suspected)) is not None}
        kept = {t.name for t in read if decided.get(t.name) in (Action.RESTAMP, Action.WAIT) and t.rank in self._merged}
        everyone = read + unread + whole
        fetched = self._pool.map(lambda t: self._poll_one(t, suspected, ahead.get(t.name), decided.get(t.name)),
                                 [t for t in everyone if t.name not in kept])
        snaps = [self._poll_one(t, decided=decided[t.name]) if t.name in kept else next(fetched) for t in everyone]
        return [snap for snap in snaps if snap is not None]

    def _decided(self, t: RankTarget, now: float, suspected: bool) -> Action | None:
        """What the rank's status read decides; None where that raised (its poll decides again, guarded)."""
        try:
            return self.schedule.decide(t.rank, now, suspected)
        except Exception:  # noqa: BLE001 - said by its poll, as any error on one rank's data
            return None

    def next_due(self) -> float:
        """When `collect` will next poll (monotonic): the sidecar's loop sleeps until then."""
        return self._next_poll

    def stall_suspected(self) -> bool:
        """Whether the last status reads suspect a stall (a rank's work pending stopped moving): the
        sidecar then analyses often, and tells the job view so (peers API)."""
        return self._suspected

    def _status_first(self, b: _Backoff) -> bool:
        """Whether every recorder of the rank answers a status-only read (the agent's handler does for
        each; PyTorch's, only the legacy NCCL one's): only then does status first save the full reads."""
        if not self.cfg.status_first:
            return False
        if b.handler == LIVE_HANDLER and STATUS_HANDLER in b.names:
            return True
        return bool(b.recorders) and all(_status_handler(b, r) for r in b.recorders)

    def _read_all_statuses(self, targets: list[RankTarget]) -> list[RankTarget]:
        """Every status of these ranks read (`_read_statuses`); the ranks whose reads succeeded. Those whose
        recorders are known are read from this thread, all at once (http_client.request_all): handing each
        read to a poll thread and back cost a third of it. A rank whose recorders are to be listed again
        first (an exchange that must end before its status reads can start), or whose URL names a host to
        look up (a lookup blocks), is read on the poll threads."""
        assert self._pool is not None  # (for mypy) made by collect
        plan = {t.name: {r: h for r in recorders if (h := _status_handler(self._backoff[t.name], r)) is not None}
                for t in targets if (recorders := self._fresh_recorders(self._backoff[t.name])) is not None
                and _connects_at_once(t.target)}
        rest = [t for t in targets if t.name not in plan]
        read_apart = self._pool.map(self._read_statuses, rest)  # (under way meanwhile)
        asked = [(t, r, h) for t in targets if t.name in plan for r, h in plan[t.name].items()]
        start, now_ns = time.monotonic(), time.time_ns()
        answers = request_all([(t.target, f"/handler/{h}") for t, _r, h in asked], self.cfg.timeout,
                              self.in_process_max_bytes, limit=max(1, self.cfg.concurrency))
        by_rank: dict[str, dict[str, Response | PeerError]] = {name: {} for name in plan}
        for (t, r, _h), answer in zip(asked, answers):
            by_rank[t.name][r] = answer
        ok = dict(zip((t.name for t in rest), read_apart))
        ok.update((t.name, self._read_statuses(t, (start, now_ns, by_rank[t.name]))) for t in targets if t.name in plan)
        return [t for t in targets if ok[t.name]]

    def _read_statuses(self, t: RankTarget,
                       answered: tuple[float, int, dict[str, Response | PeerError]] | None = None) -> bool:
        """Every recorder's status of one rank, given to the schedule; False where it failed (said).
        `answered`: when the reads began (monotonic, wall clock) and their answers by recorder, where
        they were made already (`_read_all_statuses`)."""
        b = self._backoff[t.name]
        start, now_ns, answers = answered or (time.monotonic(), time.time_ns(), None)
        try:
            statuses, exiting = {}, False
            for r in self._recorders(t, b) if answers is None else answers:
                handler = _status_handler(b, r)
                if handler is None:  # a recorder found since: its entries come when due
                    continue
                doc = self._parsed(t, handler, self.in_process_max_bytes, None if answers is None else answers[r])
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
                statuses[r] = _status(doc)
                exiting = exiting or doc.get(EXITING_KEY) is True
                size = doc.get(BUFFER_SIZE_KEY)
                if type(size) is int and 0 < size <= MAX_BUFFER:
                    self.schedule.buffer_entries[t.rank] = size
        except PeerError as exc:
            b.refused = exc.down
            self._failed(t, b, exc.reason, exc.detail, start, now_ns)
            return False
        except (ValueError, RecursionError, AttributeError) as exc:
            self.health.count_decode_error("not_json")
            self._failed(t, b, "decode_not_json", f"status: {type(exc).__name__}: {exc}", start, now_ns)
            return False
        except Exception as exc:  # noqa: BLE001 - a MemoryError on one rank's answer must not stop the others
            self._internal(t, b, exc, start, now_ns)
            return False
        self.schedule.observe(t.rank, statuses, self._turn, exiting)
        self._status_ns[t.rank] = now_ns
        self.health.count_read("status")
        return True

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, t: RankTarget, handler: str, timeout_s: float | None = None, max_body: int | None = None) -> bytes:
        """POST one handler (stacks, pickles for evidence); raises PeerError."""
        return _body(t, handler, request(t.target, "POST", f"/handler/{handler}", timeout=timeout_s or self.cfg.timeout,
                                         max_body=max_body or self.cfg.max_body_bytes))

    def _poll_one(self, t: RankTarget, suspected: bool = False, ahead: str | None = None,
                  decided: Action | None = None) -> Snapshot | None:
        """One rank's snapshot. `ahead`: why its entries are fetched without a status read this turn;
        `decided`: what its status read this turn decided (collect)."""
        b = self._backoff[t.name]
        start = time.monotonic()
        now_ns = time.time_ns()
        try:
            if b.handler is None:
                b.handler = self._choose_handler(t)
            if decided is not None:
                action = decided
            elif ahead is not None:
                action = self.schedule.fetch(ahead)
            elif self._status_first(b):
                action = self.schedule.decide(t.rank, self._turn, suspected)
            else:  # no status-only read here (or its recorders not known yet): the whole dump
                action = Action.FETCH
                self.health.count_read("poll" if b.read_before else "first")
            b.read_before = True
            last = self._merged.get(t.rank)
            status_ns = self._status_ns.get(t.rank, now_ns)  # when its status was read: what it vouches for
            if action is Action.WAIT and last is not None:
                # moved since its last entries: they come when due, with their recorder times; the
                # status alone keeps the groups' numbers, progress and pending fresh meanwhile
                self.health.record(t.name, True, time.monotonic() - start, now_ns)
                return Snapshot(last, t.name, status_ns, groups=self._status_groups(t.rank), status_only=True)
            if action is Action.RESTAMP and last is not None:
                # its status, read at status_ns, is the one its last entries came with: nothing was
                # recorded since, and they were seen then (not later: it may have moved since)
                dump, groups = replace(last, dumped_at_ns=max(status_ns, last.dumped_at_ns or 0)), \
                    self._status_groups(t.rank)
            else:
                dumps = {r: self._poll_recorder(t, b, r, now_ns) for r in self._recorders(t, b)}
                for gone in [k for k in self._last if k[0] == t.rank and k[1] not in dumps]:
                    del self._last[gone]
                    self._names.pop(gone, None)
                    self._cursors.forget(gone)
                dump = merge_recorders(dumps, self._shifters.setdefault(t.rank, {}))
                # taken during the request, after now_ns: an op recorded meanwhile must not make the
                # time look older than the dump (rank_trace.dump_time_trusted: a copied file's), which
                # leaves every wait of the rank unmeasured and the live analysis guessing. Never past
                # the answer's arrival: a rank whose clock runs ahead (a URL target on another host)
                # must not date its snapshot in our future (the next one would look older)
                newest = min(dump.newest_event_ns(), time.time_ns())
                groups = group_statuses({r: d.pg_status for r, d in dumps.items()}, self._pg_names(t.rank, dumps))
                dump = replace(dump, dumped_at_ns=max(now_ns, newest),
                               read_via="frexport.agent" if self._via_agent(b) else "pytorch",
                               read_mode="status_first" if self._status_first(b) else "whole_dump",
                               unhealthy_backends=self._health(t) if HEALTH_HANDLER in b.names else None)
                if self._status_first(b):
                    # the status its entries came with is the one in the same dumps, read at once with them
                    self.schedule.fetched(t.rank, self._turn, {r: status_rows(d.pg_status) for r, d in dumps.items()})
        except PeerError as exc:
            if exc.down and not b.refused:  # said once per outage, not at every backed-off retry
                logs.get().warning("%s refuses connections: its process is gone", t.name,
                                   extra={"rank": t.rank, "source": t.name})
            b.refused = exc.down
            self._failed(t, b, exc.reason, exc.detail, start, now_ns)
            return None
        except DecodeError as exc:
            self.health.count_decode_error(exc.reason)
            self._failed(t, b, "decode_" + exc.reason, exc.detail, start, now_ns)
            return None
        except Exception as exc:  # noqa: BLE001 - a bug on one rank's data must not stop the others
            self._internal(t, b, exc, start, now_ns)
            return None
        b.failures, b.next_try, b.was_up, b.refused = 0, 0.0, True, False
        if dump.world_size is None and t.target.unix_path:
            dump = replace(dump, declared_world_size=_agent_world_size(t.target.unix_path, b))
        self._merged[t.rank] = dump
        self.health.record(t.name, True, time.monotonic() - start, now_ns)
        return Snapshot(dump, t.name, now_ns, groups=groups)

    def _status_groups(self, rank: int) -> dict[str, ProcessGroupStatus]:
        """The status read last for a rank, by group name (its recorders' last entries name the ids)."""
        statuses = self.schedule.statuses(rank)
        return group_statuses({r: tuple(ProcessGroupStatus(*row) for row in rows) for r, rows in statuses.items()},
                              self._pg_names(rank, statuses))

    def _pg_names(self, rank: int, recorders: Iterable[str]) -> dict[str, dict[int, str]]:
        """Per recorder of a rank, its groups' names by pg_id (from its last snapshot)."""
        return {r: names for r in recorders if (names := self._names.get((rank, r))) is not None}

    def _parsed(self, t: RankTarget, handler: str, bound: int, answer: Response | PeerError | None = None) -> object:
        """An answer parsed in this process, outside the decoders' sandbox: read up to `bound` bytes
        and no further (`answer`: read already, so). Raises PeerError (too_large past the bound, naming
        it), ValueError."""
        try:
            if isinstance(answer, PeerError):
                raise answer
            body = self.fetch(t, handler, max_body=bound) if answer is None else _body(t, handler, answer)
        except PeerError as exc:
            if exc.reason != "too_large":
                raise
            raise PeerError(exc.reason, f"{t.target}: its answer to {handler} is over {bound} bytes, the bound for "
                                        "an answer parsed in the sidecar's process: not read further") from None
        return json.loads(body)

    def _optional(self, t: RankTarget, handler: str) -> object | None:
        """A small answer the poll can do without (the recorder list, the health check): None where it
        could not be had, except past its bound (a rank sending megabytes of it: its poll fails)."""
        try:
            return self._parsed(t, handler, SMALL_ANSWER_BYTES)
        except PeerError as exc:
            if exc.reason == "too_large":
                raise
            return None
        except (ValueError, RecursionError):
            return None

    def _health(self, t: RankTarget) -> tuple[str, ...] | None:
        """torch 2.15's `c10d_health_check`: {"healthy": bool, "unhealthy_backends": [names]}; None
        where the answer is not that."""
        doc = self._optional(t, HEALTH_HANDLER)
        names = doc.get("unhealthy_backends") if isinstance(doc, dict) else None
        if not isinstance(names, list):
            return None
        return tuple(n for n in names[:MAX_RECORDERS] if recorder_name_ok(n))

    def recorders(self, t: RankTarget) -> tuple[str, ...]:
        """The recorders of one rank that hold a group, the default first (snapshots, evidence)."""
        b = self._backoff.setdefault(t.name, _Backoff())
        if b.handler is None:
            b.handler = self._choose_handler(t)
        return self._recorders(t, b)

    def dump_handlers(self, t: RankTarget, recorder: str) -> tuple[str, str]:
        """(the agent's pickle handler, PyTorch's JSON handler) for one recorder: the pickle carries
        stack frames, the JSON handler is what any worker server has."""
        b = self._backoff.setdefault(t.name, _Backoff())
        return f"{PICKLE_HANDLER}?backend={recorder}", _pytorch_handler(recorder, b.names)

    def _recorders(self, t: RankTarget, b: _Backoff) -> tuple[str, ...]:
        """The recorders to poll on this rank: the agent lists them (from its process groups), asked
        again every RELIST_S; PyTorch's own handlers are asked for each one they may have every
        PROBE_EVERY_S, and the ones that hold a group are polled. The default one where none does."""
        fresh = self._fresh_recorders(b)
        if fresh is not None:
            return fresh
        if _lists_recorders(b):
            doc = self._optional(t, RECORDERS_HANDLER)
            listed = doc.get("recorders") if isinstance(doc, dict) else None
            if isinstance(listed, list):
                b.recorders, b.recorders_at = self._listed_recorders(t, listed) or (DEFAULT_RECORDER,), time.monotonic()
                return b.recorders
            if b.recorders and time.monotonic() - b.recorders_at < self._probe_every(b):
                return b.recorders  # (its list did not come: PyTorch's handlers are probed at their pace)
        candidates = [DEFAULT_RECORDER]
        if LEGACY_NCCL_HANDLER in b.names:
            candidates.append(LEGACY_NCCL)
        if PER_BACKEND_MARKER in b.names:
            candidates.extend(n for n in (*PROBED_RECORDERS, *self.cfg.recorders) if n not in candidates)
        found = []
        for name in candidates if len(candidates) > 1 else ():  # one candidate: nothing to choose
            try:
                body = self.fetch(t, _pytorch_handler(name, b.names))
            except PeerError as exc:
                if exc.down:
                    raise
                continue
            if _holds_groups(body):
                found.append(name)
        b.recorders, b.recorders_at = tuple(found) or (DEFAULT_RECORDER,), time.monotonic()
        return b.recorders

    def _fresh_recorders(self, b: _Backoff) -> tuple[str, ...] | None:
        """The rank's recorders where they need no asking now (listed or probed recently), else None."""
        every = RELIST_S if _lists_recorders(b) else self._probe_every(b)
        return b.recorders if b.recorders and time.monotonic() - b.recorders_at < every else None

    def _probe_every(self, b: _Backoff) -> float:
        """How often PyTorch's handlers are probed for a rank's recorders. gloo's recorder (every torch has
        it) or one the user named (serve --recorder) not found yet is looked for at the agent's relist
        pace: one probed before its first group would leave the rank without that group's ops for 30 s,
        and a rank whose records lack a group's ops is where its peers wait."""
        return PROBE_EVERY_S if {DEFAULT_RECORDER, *self.cfg.recorders} <= set(b.recorders) else RELIST_S

    def _listed_recorders(self, t: RankTarget, listed: list) -> tuple[str, ...]:
        """The recorders of the agent's list that are polled: at most MAX_RECORDERS, each name one that
        goes into a URL as it is; the others said once."""
        if len(listed) > MAX_RECORDERS:
            self._say_once(t, "recorders", logging.WARNING, "%s lists %d recorders: the first %d are polled "
                           "(said once)", t.name, len(listed), MAX_RECORDERS)
        names = tuple(n for n in listed[:MAX_RECORDERS] if recorder_name_ok(n))
        refused = [ascii(n)[:80] for n in listed[:MAX_RECORDERS] if not recorder_name_ok(n)]
        if refused:
            self._say_once(t, "recorder names", logging.WARNING, "%s: recorder names refused (a name is 1-64 of "
                           "A-Z a-z 0-9 . _ -): %s; its other recorders are polled (said once)", t.name,
                           ", ".join(refused[:4]))
        return names

    def _poll_recorder(self, t: RankTarget, b: _Backoff, recorder: str, now_ns: int) -> RankDump:
        """One recorder of the rank: through the agent's live handler from the cursor on where it
        runs (and `entries_via` is "agent"), else (and for a whole buffer) through PyTorch's C++ handler
        for that recorder."""
        try:
            dump = self._poll_live(t, b, recorder, now_ns) if self._via_agent(b) else None
            if dump is None:
                dump = self._decode(t, recorder, self.fetch(t, _whole_buffer_handler(b, recorder)), now_ns)
        except PeerError as exc:
            if b.handler != LIVE_HANDLER or exc.down:
                raise
            # The agent's handler is Python: it cannot answer while a thread of the trainer holds
            # the GIL (a rank stuck in native code), where PyTorch's C++ handlers still do. Ask
            # one of those now, and for LIVE_RETRY_S.
            b.live_off_until = time.monotonic() + LIVE_RETRY_S
            b.handler = self._choose_handler(t)
            if b.handler == LIVE_HANDLER:
                raise
            dump = self._decode(t, recorder, self.fetch(t, _pytorch_handler(recorder, b.names)), now_ns)
        self._last[(t.rank, recorder)] = dump
        # its groups' names by pg_id, worked out once per snapshot: every status read needs them, and
        # a pass over the whole buffer at each would cost more than the read
        self._names[(t.rank, recorder)] = pg_names(dump)
        return dump

    def _via_agent(self, b: _Backoff) -> bool:
        """Whether the rank's entries are read through the agent's live handler (config.entries_via)."""
        return b.handler == LIVE_HANDLER and self.cfg.entries_via == "agent"

    def _decode(self, t: RankTarget, recorder: str, body: bytes, now_ns: int) -> RankDump:
        """Parse only what is new since the last snapshot when that can be done safely (and the part
        to decode is at most `in_process_max_bytes`), else all: in the sandbox when it is large."""
        last = self._last.get((t.rank, recorder))
        dump: RankDump | DecodeError | None
        if last is not None and last.entries:
            dump = self._decode_tail(t, recorder, body, now_ns, last)
            if dump is not None:
                return dump
        if self.decoder is not None and len(body) > self.in_process_max_bytes:
            # large: parsed under the decoders' memory limit, all of it (no incremental reuse)
            dump = self.decoder.run(BodyJob(body, str(t.target), t.rank, now_ns, self._max_entries(t), recorder))
            if isinstance(dump, DecodeError):
                raise dump
            return dump
        return decode_bytes(body, str(t.target), rank=t.rank, dumped_at_ns=now_ns, keep_frames=False, only="json",
                            previous={e.record_id: e for e in last.entries} if last is not None else None,
                            max_entries=self._max_entries(t), recorder=recorder)

    def _max_entries(self, t: RankTarget) -> int:
        """The newest entries kept of one recorder: `max_entries` holds per rank, its recorders share it
        (held per recorder, a rank listing 16 recorders held 16 times what one may)."""
        b = self._backoff.get(t.name)
        return max(1, self.cfg.max_entries // max(1, len(b.recorders) if b is not None else 1))

    def _poll_live(self, t: RankTarget, b: _Backoff, recorder: str, now_ns: int) -> RankDump | None:
        """Ask the agent only for the entries from the first one that may still change; None where
        that answer cannot be joined to the last snapshot (the caller then fetches the whole buffer)."""
        last = self._last.get((t.rank, recorder))
        if last is None or not last.entries:
            return None
        cursor = self._cursors.of((t.rank, recorder), last.entries)
        since = last.entries[cursor[0]].record_id
        # the agent's cut pickle where the compiled scanner reads it (decode/pickle_tail.py), else JSON
        body = self.fetch(t, f"{LIVE_HANDLER}?backend={recorder}&after={since}"
                             f"{'&format=pickle' if b.live_pickle and scanned.available() else ''}")
        dump = self._decode_tail(t, recorder, body, now_ns, last, window=True, cursor=cursor)
        if dump is None and body[:1] == _PICKLE:
            dump = self._whole_pickle(t, recorder, body, now_ns, since)
            if dump is None and len(body) <= self.in_process_max_bytes and scanned.columns(body) is None:
                # not a wrap, nor a cut the ids refuse: a layout the scanner does not read
                b.live_pickle = False
                self._say_once(t, "live_pickle", logging.INFO, "rank %s: the agent's pickle answer could not be "
                               "read here; asking its JSON answer from now on", t.rank)
        elif dump is None and _holds_whole_buffer(body, since):
            # the ring moved past the cursor (a buffer's worth of collectives since the last poll):
            # every entry came, so this body is decoded whole rather than asked for a second time
            dump = self._decode(t, recorder, body, now_ns)
        return dump

    def _whole_pickle(self, t: RankTarget, recorder: str, body: bytes, now_ns: int, since: int) -> RankDump | None:
        """A pickle answer that holds the whole buffer (the ring moved past the cursor: no cut), read
        whole: in-process by the compiled scanner only, and only as much as a JSON tail may be."""
        if len(body) > self.in_process_max_bytes:
            return None
        whole = dump_from_pickle(body, str(t.target), t.rank, now_ns, keep_frames=False,
                                 max_entries=self._max_entries(t), recorder=recorder)
        return whole if whole is not None and whole.entries and whole.entries[0].record_id > since else None

    def _decode_tail(self, t: RankTarget, recorder: str, body: bytes, now_ns: int, last: RankDump,
                     window: bool = False, cursor: tuple[int, bool] | None = None) -> RankDump | None:
        """The same process, further along: keep the older entries of `last`, decode the rest; None
        where that cannot be done (the caller parses it all). `window`: the body is the agent's
        answer from a cursor, which says where the buffer starts (FIRST_RECORD_KEY) instead of
        holding every entry. `cursor`: `Cursors.of` the last entries where the caller has it (a pass
        over what was not carried before, not made twice)."""
        entries, key = last.entries, (t.rank, recorder)
        resume, ordered = cursor or self._cursors.of(key, entries)
        since = entries[resume].record_id
        pickled = body[:1] == _PICKLE
        # bounded like a body parsed whole in-process: what is decoded is the tail and the small rest
        # (a pickle is decoded whole, by the compiled scanner only: the body is what is bounded)
        if pickled:
            tail = parse_pickle_tail(body, since) if len(body) <= self.in_process_max_bytes else None
        else:
            tail = parse_tail(body, since, self.in_process_max_bytes)
        if tail is None:
            return None
        first = tail.meta.pop(FIRST_RECORD_KEY, None) if window and not pickled else tail.first_record
        if window and (type(first) is not int or first > since):
            return None  # the buffer no longer holds the cursor's entry: more than a buffer's worth since
        anchor = entries[resume] if ordered else next((e for e in entries if e.record_id == since), None)
        if anchor is None or tail.first_created != anchor.time_created_ns \
                or (first is not None and first < entries[0].record_id):
            return None
        if first is None:
            first = since
        if ordered:  # the entries in [first, since): a slice
            carry = entries[bisect_left(entries, first, key=_record_id):resume]
        else:
            carry = tuple(e for e in entries if first <= e.record_id < since)
        raw = dict(tail.meta)
        raw["entries"] = tail.entries
        dump = normalize(raw, str(t.target), "pickle" if pickled else "json", rank=t.rank, dumped_at_ns=now_ns,
                         size_bytes=len(body), keep_frames=False, carry=carry, max_entries=self._max_entries(t),
                         recorder=recorder)
        self._cursors.carried(key, dump.entries, carry if ordered else ())
        return dump

    def down_ranks(self) -> set[int]:
        """Ranks whose process is gone (killed or crashed): a unix socket nobody listens on (the agent
        listens before it creates the file, so a refused socket is one its process left behind, also
        when frexport starts after the job died), a URL that answered before and now refuses, or a pid
        from the agent's rank-<N>.json that no longer exists. A rank whose socket file disappeared
        exited cleanly (the agent removes it) and is not listed."""
        out = set()
        for t in self.targets():
            b = self._backoff.get(t.name)
            if b is None:
                continue
            # never answered: refused twice, not once (a socket is refused for an instant while it binds)
            refused = b.refused and (b.was_up or (t.target.unix_path and b.failures >= 2))
            if refused or _pid_gone(t.target.unix_path, b):
                out.add(t.rank)
        return out

    def _sockets_dir_health(self, found: bool) -> None:
        """The sockets dir is a source of its own: up while it holds a socket; down (said once) when it
        has held none for `startup_grace`, from the start or since the last socket went (a wrong path,
        an unmounted volume, a trainer without the agent). Ranks' own health is per socket."""
        assert self.cfg.sockets_dir is not None  # (for mypy) only called with a sockets dir
        name, now = f"sockets:{self.cfg.sockets_dir}", time.monotonic()
        if found:
            self._sockets_seen = now
            self.health.record(name, True, 0.0, time.time_ns())
            if self._said_no_sockets:
                self._said_no_sockets = False
                logs.get().info("%s holds worker-server sockets again", self.cfg.sockets_dir, extra={"source": name})
            return
        if now - self._sockets_seen < self.cfg.startup_grace:
            return  # the trainer may still be starting
        why = "does not exist" if not os.path.isdir(self.cfg.sockets_dir) else "holds no rank-<N>.sock"
        self.health.record(name, False, 0.0, time.time_ns(), "no_sockets", f"{self.cfg.sockets_dir} {why}")
        if not self._said_no_sockets:
            self._said_no_sockets = True
            logs.get().warning("sockets dir %s %s after %g s: no rank can be polled (is frexport.agent enabled "
                               "in the trainer, FREXPORT_AGENT_DIR the same directory?)", self.cfg.sockets_dir, why,
                               self.cfg.startup_grace, extra={"source": name})

    def handlers(self, rank: int) -> frozenset[str]:
        """The handlers the rank's worker server listed at its last successful poll (empty: unknown)."""
        for t in self.targets():
            if t.rank == rank and t.name in self._backoff:
                return self._backoff[t.name].names
        return frozenset()

    def pid(self, rank: int) -> int | None:
        """The rank's pid from the agent's rank-<N>.json, where the trainer runs in our pid namespace
        (the chart's shareProcessNamespace): what a native-stack tool is pointed at."""
        for t in self.targets():
            if t.rank == rank and t.target.unix_path and t.target.unix_path.endswith(".sock"):
                return agent_pid(t.target.unix_path[: -len(".sock")] + ".json")
        return None

    def fetch_all(self, wanted: list[tuple[RankTarget, str]], deadline_s: float) -> Fetched:
        """POST many handlers at once (evidence: pickles and stacks of many ranks) within one deadline, each
        answer read to its kind's bound (handlers.fetch_cap), not the poll's."""
        return fetch_within(wanted, deadline_s, self.cfg.concurrency,
                            lambda t, handler, timeout_s: self.fetch(t, handler, timeout_s, fetch_cap(handler)),
                            "frexport-fetch")

    def _choose_handler(self, t: RankTarget) -> str:
        resp = request(t.target, "GET", "/handler/", timeout=self.cfg.timeout, max_body=1 << 20)
        try:
            listed = json.loads(resp.body) if resp.status == 200 else []
            names = frozenset(n for n in listed if isinstance(n, str)) if isinstance(listed, list) else frozenset()
        except (ValueError, TypeError, RecursionError):
            names = frozenset()
        self._backoff[t.name].names = names
        live_off = time.monotonic() < self._backoff[t.name].live_off_until
        # the agent's handler, else PyTorch's (per recorder: _pytorch_handler); "fr_trace_json" also
        # stands for servers too old to list their handlers
        return LIVE_HANDLER if LIVE_HANDLER in names and not live_off else "fr_trace_json"

    def _internal(self, t: RankTarget, b: _Backoff, exc: Exception, start: float, now_ns: int) -> None:
        """An error no rule foresaw on one rank's answer (a MemoryError under an address-space limit): that
        rank's poll failed, with the traceback once per kind (the health's last_error keeps saying it)."""
        self._say_once(t, type(exc).__name__, logging.ERROR, "polling %s failed (said once for this source; "
                       "counted as reason=internal)", t.name, exc_info=exc)
        self._failed(t, b, "internal", f"{type(exc).__name__}: {exc}", start, now_ns)

    def _say_once(self, t: RankTarget, what: str, level: int, msg: str, *args: object,
                  exc_info: BaseException | None = None) -> None:
        """Log a rank's trouble once per kind (`what`) while its socket stays: a peer that keeps sending
        what triggers it must not fill the log; its health counts every time."""
        if (t.name, what) not in self._said:
            self._said.add((t.name, what))
            logs.get().log(level, msg, *args, exc_info=exc_info, extra={"rank": t.rank, "source": t.name})

    def _failed(self, t: RankTarget, b: _Backoff, reason: str, detail: str, start: float, now_ns: int) -> None:
        if reason == "too_large":  # refused unread: the operator learns which rank and answer, once
            self._say_once(t, reason, logging.WARNING, "%s: %s (said once; counted as reason=too_large)",
                           t.name, detail)
        b.failures += 1
        b.handler = None
        b.next_try = self._turn + min(self.cfg.backoff_max, 0.5 * 2 ** min(b.failures, 16))
        self.health.record(t.name, False, time.monotonic() - start, now_ns, reason, detail)


@dataclass(frozen=True)
class BodyJob:
    """A worker-server body decoded in a sandboxed decoder (see DecoderPool)."""

    body: bytes
    path: str  # the target, for errors
    rank: int
    now_ns: int
    max_entries: int
    recorder: str = DEFAULT_RECORDER

    def __call__(self) -> RankDump:
        return decode_bytes(self.body, self.path, rank=self.rank, dumped_at_ns=self.now_ns, keep_frames=False,
                            only="json", max_entries=self.max_entries, recorder=self.recorder)


def _pytorch_handler(recorder: str, names: frozenset[str]) -> str:
    """PyTorch's own C++ JSON handler for one recorder (see DEFAULT_RECORDER)."""
    if recorder == LEGACY_NCCL and LEGACY_NCCL_HANDLER in names:
        return LEGACY_NCCL_HANDLER
    if recorder == DEFAULT_RECORDER or PER_BACKEND_MARKER not in names:
        return "fr_trace_json"
    return f"fr_trace_json?backend={recorder}"


def _connects_at_once(target: Target) -> bool:
    """A unix socket or an IP address: connected to without a name lookup, which would block the loop."""
    if target.unix_path:
        return True
    try:
        ipaddress.ip_address(target.host)
    except ValueError:
        return False
    return True


def _lists_recorders(b: _Backoff) -> bool:
    """Whether the rank's agent lists its recorders (else PyTorch's handlers are probed for them)."""
    return b.handler == LIVE_HANDLER and RECORDERS_HANDLER in b.names


def _body(t: RankTarget, handler: str, resp: Response) -> bytes:
    """An answer's body; PeerError where it is not a 200."""
    if resp.status != 200:
        # the rank's words say why (the agent's profile handler: "one profile per 600 s"), as peers.py's do
        said = resp.body[:200].decode(errors="replace").strip()
        raise PeerError("http_status", f"{t.target}: /handler/{handler} answered {resp.status}"
                        + (f": {said}" if said.isprintable() and said else ""))
    return resp.body


def _status_handler(b: _Backoff, recorder: str) -> str | None:
    """The handler that answers one recorder's status without its entries: the agent's, else, of
    PyTorch's, the legacy NCCL one with `includecollectives=false` (its C++ handler takes that
    parameter on every CUDA build; gloo's and 2.15's per-backend `fr_trace_json` dump every entry)."""
    if b.handler == LIVE_HANDLER and STATUS_HANDLER in b.names:
        return f"{STATUS_HANDLER}?backend={recorder}"
    if recorder == LEGACY_NCCL and LEGACY_NCCL_HANDLER in b.names:
        return f"{LEGACY_NCCL_HANDLER}?includecollectives=false"
    return None


def _whole_buffer_handler(b: _Backoff, recorder: str) -> str:
    """The handler to ask for a whole buffer (a rank's first poll, an answer that could not be
    joined): where the agent's live handler is chosen, PyTorch's C++ JSON handler for that recorder
    where this torch has one. For the whole buffer it costs the trainer as much as the live one, and
    it runs without the GIL."""
    if b.handler != LIVE_HANDLER:
        return _pytorch_handler(recorder, b.names)
    if recorder == DEFAULT_RECORDER or (recorder == LEGACY_NCCL and LEGACY_NCCL_HANDLER in b.names) \
            or PER_BACKEND_MARKER in b.names:
        return _pytorch_handler(recorder, b.names)
    return f"{LIVE_HANDLER}?backend={recorder}"


def _status(doc: object) -> Status:
    """A recorder's pg_status as (pg_id, enqueued, started, completed) rows, sorted: compared, not read."""
    raw = doc.get("pg_status") if isinstance(doc, dict) else None
    if not isinstance(raw, dict):
        raise ValueError("no pg_status")
    rows = []
    for key, val in list(raw.items())[:MAX_GROUPS]:
        if isinstance(val, dict):
            rows.append((opt_int(key) or 0, opt_int(val.get("last_enqueued_collective")),
                         opt_int(val.get("last_started_collective")), opt_int(val.get("last_completed_collective"))))
    return status_rows(rows)


def _holds_groups(body: bytes) -> bool:
    """Whether a recorder's JSON dump knows a group (an unused or unknown one answers
    `"pg_config":{}` and no entries)."""
    return b'"entries"' in body or (b'"pg_config"' in body and b'"pg_config":{}' not in body.replace(b" ", b""))


_FIRST_RECORD = re.compile(rb'"%s"\s*:\s*(\d{1,20})[,}\s]' % FIRST_RECORD_KEY.encode())


def _holds_whole_buffer(body: bytes, since: int) -> bool:
    """Whether an answer from `since` on holds every entry of the buffer: its oldest is newer than
    `since`. The agent writes the key before "entries"; only that head is searched."""
    end = body.find(b'"entries"')
    m = _FIRST_RECORD.search(body, 0, end if end >= 0 else min(len(body), 1 << 16))
    return m is not None and int(m.group(1)) > since


def _label(name: str) -> str:
    """A file name as text a label can hold: undecodable bytes (surrogate escapes) shown as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


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


_OWN_PID_NS: str | None = None


def _pid_namespace() -> str | None:
    global _OWN_PID_NS
    if _OWN_PID_NS is None:
        try:
            _OWN_PID_NS = os.readlink("/proc/self/ns/pid")
        except OSError:
            _OWN_PID_NS = ""
    return _OWN_PID_NS or None


def agent_pid(meta_path: str) -> int | None:
    """The pid an agent's rank-<N>.json names, if it says it runs in our pid namespace."""
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read(65536))
    except (OSError, ValueError, RecursionError):
        return None
    pid = meta.get("pid") if isinstance(meta, dict) else None
    same_ns = isinstance(meta, dict) and meta.get("pid_ns") is not None and meta.get("pid_ns") == _pid_namespace()
    return pid if type(pid) is int and pid > 0 and same_ns else None


def _pid_gone(socket_path: str | None, b: _Backoff) -> bool:
    """Whether the agent's rank-<N>.json names a process that no longer exists. Only trusted when the
    trainer wrote that it runs in our pid namespace (a sidecar container without a shared process
    namespace sees other pids, or none): then a missing pid is a dead rank."""
    if not socket_path or not socket_path.endswith(".sock"):
        return False
    path = socket_path[: -len(".sock")] + ".json"
    try:
        st = os.stat(path)
        if b.pid is None or b.pid[0] != st.st_mtime_ns:
            with open(path, "rb") as f:
                meta = json.loads(f.read(65536))
            pid = meta.get("pid") if isinstance(meta, dict) else None
            same_ns = isinstance(meta, dict) and meta.get("pid_ns") is not None \
                and meta.get("pid_ns") == _pid_namespace()
            b.pid = (st.st_mtime_ns, pid if type(pid) is int and pid > 0 and same_ns else 0)
    except (OSError, ValueError, RecursionError):
        return False
    if not b.pid[1]:
        return False
    try:
        os.kill(b.pid[1], 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False
