"""Watch a dump directory: PyTorch's dumps on timeout, the agent's snapshots, copied-in files.

inotify (through watchdog) says when something changed; a file is only read once
it is complete: closed after writing (close-write), or, where that event does not
exist (the polling observer for NFS and other shared volumes, where inotify misses
writes made on other hosts), once its size and mtime stayed the same for
`settle_s`. A file is decoded again only when its (inode, size, mtime) changes,
so PyTorch overwriting a rank's dump is picked up and an unchanged file never
costs a second decode. A periodic rescan covers what events can miss (an inotify
queue overflow, the directory deleted and recreated). Pickles are decoded in a
`collect()` returns the new snapshots. A file is read once (open without following a
final symlink and without blocking, fstat the descriptor, check, read within the
size cap) and exactly those bytes are decoded, pickle or JSON, in a long-lived
sandboxed worker (decode/sandbox.DecoderPool) under its memory limit and deadline:
what replaces the path after the check (a FIFO, a pickle bomb) cannot matter.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, replace

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from frexport import logs
from frexport.config import DumpDir
from frexport.decode.discover import not_a_dump_type, parse_name
from frexport.decode.errors import DecodeError
from frexport.decode.read import decode_bytes, read_checked
from frexport.decode.sandbox import DecoderPool, Limits
from frexport.model.dump import RankDump
from frexport.model.outcome import waited_in
from frexport.sources.base import Snapshot
from frexport.sources.health import HealthRegistry


@dataclass
class _Pending:
    closed: bool = False
    stat_key: tuple | None = None
    stable_since: float = 0.0


@dataclass(frozen=True)
class DecodeJob:
    """Runs in a decoder worker: the bytes that were checked, never the path again."""

    data: bytes
    path: str
    rank: int
    mtime_ns: int
    max_entries: int = 20000

    def __call__(self) -> RankDump:
        return decode_bytes(self.data, self.path, rank=self.rank, dumped_at_ns=self.mtime_ns,
                            max_entries=self.max_entries)


class DumpDirSource:
    def __init__(self, health: HealthRegistry, cfg: DumpDir, limits: Limits | None = None,
                 pool: DecoderPool | None = None) -> None:
        self.health = health
        self.cfg = cfg
        self.path = cfg.path
        self.prefix = cfg.prefix
        self._own_pool = pool is None
        self.pool = pool or DecoderPool(1, limits or Limits())
        self._pending: dict[str, _Pending] = {}
        self._decoded: dict[str, tuple] = {}  # path -> stat key last decoded
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None
        self._root_key: tuple | None = None
        self._last_rescan = 0.0
        self._started_ns = 0
        self._said_missing = False

    @property
    def name(self) -> str:
        return f"dumps:{self.path}"

    def start(self) -> None:
        self._started_ns = time.time_ns()
        self._watch()
        self._rescan()

    def stop(self) -> None:
        self._unwatch()
        if self._own_pool:
            self.pool.close()

    def _unwatch(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None

    def _watch(self) -> None:
        self._unwatch()
        try:
            st = os.stat(self.path)
        except OSError:
            self._root_key = None
            return
        self._root_key = (st.st_dev, st.st_ino)
        observer = PollingObserver(timeout=self.cfg.poll_interval) if self.cfg.polling else Observer()
        observer.schedule(_Handler(self), self.path, recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def mark(self, path: str, closed: bool = False) -> None:
        name = os.path.basename(path)
        rest = name[len(self.prefix):] if self.prefix and name.startswith(self.prefix) else name
        # stacks, logs, configs beside the dumps (an evidence bundle, a fixture) are not dumps: as analyze
        if name.startswith(".") or not_a_dump_type(name) or parse_name(rest) is None:
            return
        if self.prefix and not name.startswith(self.prefix):
            return
        with self._lock:
            p = self._pending.setdefault(path, _Pending())
            p.closed = p.closed or closed

    def forget(self, path: str) -> None:
        with self._lock:
            self._pending.pop(path, None)
            self._decoded.pop(path, None)

    def collect(self) -> list[Snapshot]:
        """Decode every file that is complete and changed."""
        now = time.monotonic()
        if now - self._last_rescan >= self.cfg.rescan_interval:
            self._rescan()
        with self._lock:
            items = list(self._pending.items())
        ready = []
        for path, p in items:
            key = _stat_key(path, self.cfg.follow_symlinks)
            if key is None:
                self.forget(path)
                continue
            if key != p.stat_key:
                p.stat_key, p.stable_since = key, now
                if not p.closed:
                    continue
            if p.closed or now - p.stable_since >= self.cfg.settle:
                with self._lock:
                    self._pending.pop(path, None)
                if self._decoded.get(path) != key:
                    ready.append((path, key))
        return [snap for path, key in ready if (snap := self._take(path, key)) is not None]

    def _take(self, path: str, key: tuple) -> Snapshot | None:
        name = os.path.basename(path)
        parsed = parse_name(name[len(self.prefix):] if self.prefix and name.startswith(self.prefix) else name)
        assert parsed is not None  # (for mypy) only names parse_name accepts are pending
        rank = parsed[0]
        start = time.monotonic()
        now_ns = time.time_ns()
        try:
            data, st = read_checked(path, self.cfg.max_file_bytes, self.cfg.follow_symlinks)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # what was read, not what was listed
            dump = self.pool.run(DecodeJob(data, path, rank, st.st_mtime_ns, self.cfg.max_entries))
            del data
            if isinstance(dump, DecodeError):
                raise dump
            if st.st_mtime_ns < self._started_ns and not file_time_can_be_dump_time(dump, st.st_mtime_ns):
                dump = replace(dump, dumped_at_is_clock=False)
        except DecodeError as exc:
            # A file that is not a (readable) dump is skipped and counted; the directory itself was read
            # fine, so the source stays up: down means frexport cannot see what lands here.
            self._decoded[path] = key  # do not retry an unchanged bad file
            self.health.count_decode_error(exc.reason)
            self.health.count_skipped(self.name, exc.reason, exc.detail)
            logs.get().info("skipped %s: %s", path, exc.detail, extra={"path": path, "error": exc.reason})
            return None
        self._decoded[path] = key
        self.health.record(self.name, True, time.monotonic() - start, now_ns)
        return Snapshot(dump, self.name, now_ns, timeout_dump=self.cfg.timeout_dumps and key[3] >= self._started_ns)

    def _rescan(self) -> None:
        self._last_rescan = time.monotonic()
        try:
            st = os.stat(self.path)
            root_key = (st.st_dev, st.st_ino)
        except OSError:
            root_key = None
        if root_key != self._root_key or (root_key is not None and self._observer is None):
            self._watch()  # the directory appeared, or was deleted and recreated
        if root_key is None:
            # frexport.agent and the Helm chart create the directory before the job starts: missing, it
            # is a wrong path or an unmounted volume, and dumps written "there" are never seen. Watched
            # (it may still appear), but down, and said once.
            self.health.record(self.name, False, 0.0, time.time_ns(), "missing", f"{self.path} does not exist")
            if not self._said_missing:
                self._said_missing = True
                logs.get().warning("dump directory %s does not exist: no dump written there can be read",
                                   self.path, extra={"source": self.name, "path": self.path})
            return
        if self._said_missing:
            self._said_missing = False
            logs.get().info("dump directory %s exists now", self.path, extra={"source": self.name})
        for dirpath, _, filenames in os.walk(self.path, followlinks=self.cfg.follow_symlinks):
            for name in filenames:
                path = os.path.join(dirpath, name)
                key = _stat_key(path, self.cfg.follow_symlinks)
                if key is not None and self._decoded.get(path) != key:
                    self.mark(path)
        if not os.access(self.path, os.R_OK | os.X_OK):
            self.health.record(self.name, False, 0.0, time.time_ns(), "unreadable", f"{self.path}: permission denied")
        elif not self._decoded and not self._pending:
            self.health.record(self.name, True, 0.0, time.time_ns())  # watching an empty directory is healthy


# The watchdog's own dump on timeout comes a little after the timeout itself.
TIMEOUT_DUMP_MARGIN_NS = 60 * 10**9


def file_time_can_be_dump_time(dump: RankDump, mtime_ns: int) -> bool:
    """Whether a file that was here before we watched can have been dumped at its mtime.

    Such a time is when the job wrote it (a sidecar restarted during a hang) or when a checkout or a
    copy made it (the demo's bundled dumps, cloned days after they were captured): nobody saw which.
    A rank cannot wait in an op longer than its group's timeout, the watchdog ends the wait and dumps
    on the way, so a time later than that after the oldest op the dump still waits in is not its dump
    time. Without such an op the time times nothing; without a timeout it cannot be checked."""
    pending = [e for e in waited_in(dump.entries) if e.time_created_ns]
    if not pending:
        return True
    oldest = min(pending, key=lambda e: e.time_created_ns)
    if not oldest.timeout_ms or oldest.timeout_ms <= 0:
        return False
    return mtime_ns <= oldest.time_created_ns + oldest.timeout_ms * 1_000_000 + TIMEOUT_DUMP_MARGIN_NS


def _stat_key(path: str, follow: bool) -> tuple | None:
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError:
        return None
    if not (st.st_mode & 0o170000) == 0o100000:  # regular files only (not FIFOs, devices, links)
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _Handler(FileSystemEventHandler):
    def __init__(self, source: DumpDirSource) -> None:
        self.source = source

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        kind = event.event_type
        if kind == "deleted":
            self.source.forget(_text(event.src_path))
        elif kind == "moved":
            self.source.forget(_text(event.src_path))
            self.source.mark(_text(event.dest_path), closed=True)  # a rename completes an atomic write
        elif kind == "closed":
            self.source.mark(_text(event.src_path), closed=True)
        elif kind in ("created", "modified"):
            self.source.mark(_text(event.src_path))


def _text(p: str | bytes) -> str:
    return p.decode(errors="surrogateescape") if isinstance(p, bytes) else p
