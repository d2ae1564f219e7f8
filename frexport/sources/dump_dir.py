"""Watch a dump directory: PyTorch's dumps on timeout, the agent's snapshots, copied-in files.

inotify (through watchdog) says when something changed; a file is only read once
it is complete: closed after writing (close-write), or, where that event does not
exist (the polling observer for NFS and other shared volumes, where inotify misses
writes made on other hosts), once its size and mtime stayed the same for
`settle_s`. A file is decoded again only when its (inode, size, mtime) changes,
so PyTorch overwriting a rank's dump is picked up and an unchanged file never
costs a second decode. A periodic rescan covers what events can miss (an inotify
queue overflow, the directory deleted and recreated). Pickles are decoded in a
sandboxed worker process; JSON in-process. `collect()` returns the new snapshots.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from frexport.config import DumpDir
from frexport.decode.discover import parse_name
from frexport.decode.errors import DecodeError
from frexport.decode.read import decode_file, sniff_format
from frexport.decode.sandbox import Limits, SandboxPool
from frexport.model.dump import RankDump
from frexport.sources.base import Snapshot
from frexport.sources.health import HealthRegistry


@dataclass
class _Pending:
    closed: bool = False
    stat_key: tuple | None = None
    stable_since: float = 0.0


@dataclass(frozen=True)
class _DecodeTask:
    path: str
    rank: int
    max_bytes: int

    def __str__(self) -> str:
        return self.path


def _decode_task(task: _DecodeTask) -> RankDump:
    return decode_file(task.path, task.rank, max_bytes=task.max_bytes)


class DumpDirSource:
    def __init__(self, health: HealthRegistry, cfg: DumpDir, limits: Limits | None = None) -> None:
        self.health = health
        self.cfg = cfg
        self.path = cfg.path
        self.prefix = cfg.prefix
        self.limits = limits or Limits()
        self._pending: dict[str, _Pending] = {}
        self._decoded: dict[str, tuple] = {}  # path -> stat key last decoded
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None
        self._root_key: tuple | None = None
        self._last_rescan = 0.0
        self._started_ns = 0

    @property
    def name(self) -> str:
        return f"dumps:{self.path}"

    def start(self) -> None:
        self._started_ns = time.time_ns()
        self._watch()
        self._rescan()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None

    def _watch(self) -> None:
        self.stop()
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
        if name.startswith(".") or parse_name(name[len(self.prefix):] if self.prefix and name.startswith(self.prefix)
                                              else name) is None:
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
        rank = parse_name(name[len(self.prefix):] if self.prefix and name.startswith(self.prefix) else name)[0]
        start = time.monotonic()
        now_ns = time.time_ns()
        try:
            with open(path, "rb") as f:
                head = f.read(64)
            task = _DecodeTask(path, rank, self.cfg.max_file_bytes)
            if sniff_format(head) == "json":
                dump = _decode_task(task)
            else:  # pickles only ever in a limited worker process
                result = SandboxPool(1, self.limits).map(_decode_task, [task])[0]
                if isinstance(result, DecodeError):
                    raise result
                dump = result
        except DecodeError as exc:
            self._decoded[path] = key  # do not retry an unchanged bad file
            self.health.count_decode_error(exc.reason)
            self.health.record(self.name, False, time.monotonic() - start, now_ns, exc.reason, exc.detail)
            return None
        except OSError as exc:
            self.health.record(self.name, False, time.monotonic() - start, now_ns, "unreadable", str(exc))
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
            # Not yet there is normal (PyTorch creates it with the first dump): watched, not down.
            self.health.record(self.name, True, 0.0, time.time_ns())
            return
        for dirpath, _, filenames in os.walk(self.path, followlinks=self.cfg.follow_symlinks):
            for name in filenames:
                path = os.path.join(dirpath, name)
                key = _stat_key(path, self.cfg.follow_symlinks)
                if key is not None and self._decoded.get(path) != key:
                    self.mark(path)
        if not self._decoded and not self._pending:
            self.health.record(self.name, True, 0.0, time.time_ns())  # watching an empty directory is healthy


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
