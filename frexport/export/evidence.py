"""Evidence bundles: what an on-call engineer needs, saved the moment a stall is seen.

A bundle is a directory `<evidence dir>/<UTC time>-<reason>/` with every rank's
Flight Recorder snapshot as `trace_<rank>` (PyTorch's pickle format: the raw
bytes of the agent's pickle handler when it answered, with stack frames, else
re-encoded from the last snapshot), the stuck ranks' Python stacks
(`stacks/rank_<r>.traceback.txt`, `stacks/rank_<r>.pyspy_dump.txt`; only handlers the worker
server lists are asked for), the analysis (`report.txt`,
`report.json`: `frexport analyze` on the bundle itself, so call sites come from the pickles' frames
and each culprit's place now from its stack) and `manifest.json`. It is written to a hidden temp directory and
renamed, so a half-written bundle is never seen; its name is unpredictable (mkdtemp) and files
are created exclusively, so nothing planted in the evidence directory redirects a write. A bundle
holds each rank's raw data only while it stays within `max_bytes` (the manifest lists the ranks
left out). Retention keeps at most `max_bundles` bundles and `max_bytes` bytes, oldest removed
first, counting only bundles this sidecar signed (the manifest's HMAC and file hashes,
export/bundle_files.py), never the one just written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from frexport import logs
from frexport.export.bundle_files import NotOurs, bundle_key, digest, open_bundle, sign, tree_size
from frexport.export.encode import to_pickle
from frexport.export.report import render_text
from frexport.live.sink import Pass
from frexport.model.dump import DEFAULT_RECORDER, RankDump

# (bundle directory, the live stall threshold) -> its report (text, JSON): `frexport analyze` on the
# bundle (cli wires it in). The bundle's files were written moments after the ranks answered, so
# their times are a clock, and the threshold is the one that saw the stall.
Reporter = Callable[[str, float], tuple[str, dict]]
_REPORT_RESERVE = 16 << 10  # room kept at least for the bundle's own report
PARTIAL_MAX_AGE_S = 3600.0  # a half-written bundle (.bundle-*) older than this was abandoned


@dataclass
class Bundle:
    reason: str
    report_text: str  # the live diagnosis: the report when no reporter is given, or it fails
    report_json: dict
    dumps: dict[int, RankDump]
    raw_pickles: dict[int, bytes]  # rank -> PyTorch's own pickle (with frames), when fetched
    stacks: dict[int, dict[str, str]]  # rank -> {"traceback": text, "pyspy": text}
    stall_after_s: float = 30.0  # the live analysis' threshold when the incident was seen


class EvidenceWriter:
    def __init__(self, directory: str, max_bundles: int = 20, max_bytes: int = 1 << 30,
                 reporter: Reporter | None = None) -> None:
        self.directory = directory
        self.reporter = reporter
        self.max_bundles = max_bundles
        self.max_bytes = max_bytes
        self.written = 0
        self.failed = 0
        self._not_ours: set[str] = set()  # directories retention left alone, said once each

    def write(self, bundle: Bundle) -> str | None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{stamp}-{_slug(bundle.reason)}"
        tmp = final = ""
        try:
            os.makedirs(self.directory, exist_ok=True)
            # an unpredictable name made fresh (mkdtemp: O_EXCL, mode 0700): nothing planted in the
            # directory (a symlink under a guessable temp name) can redirect what is written
            self._sweep_partials()
            tmp = tempfile.mkdtemp(prefix=".bundle-", dir=self.directory)
            os.chmod(tmp, 0o755)  # readable like bundles always were; created 0700 until it is ours
            os.mkdir(os.path.join(tmp, "stacks"))
            manifest = self._fill(tmp, bundle, stamp)
            n, final = 1, os.path.join(self.directory, name)
            while os.path.lexists(final):
                n += 1
                final = os.path.join(self.directory, f"{name}-{n}")
            os.rename(tmp, final)
        except OSError as exc:
            self.failed += 1
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            logs.get().error("could not write evidence bundle %s: %s", final or name, exc, extra={"error": str(exc)})
            return None
        self.written += 1
        removed = self._retain(os.path.basename(final))
        omitted = manifest["omitted_over_max_bytes"]
        logs.get().warning("evidence bundle written: %s%s%s", final,
                           f" (raw data of ranks {_ranks_text(omitted)} left out: over evidence.max_bytes)"
                           if omitted else "",
                           f"; retention removed {len(removed)} older bundles" if removed else "",
                           extra={"path": final})
        return final

    def _fill(self, tmp: str, bundle: Bundle, stamp: str) -> dict:
        """Write the bundle's files; each rank's raw data only while the bundle stays within max_bytes."""
        live_size = len(bundle.report_text) + len(json.dumps(bundle.report_json))
        # the bundle's own report is written after the data; the live one is its size's measure
        reserve = max(2 * live_size, _REPORT_RESERVE)
        budget = self.max_bytes - reserve - 64 * 1024  # and the manifest
        files, omitted, used, hashes = [], [], 0, {}
        for rank, kinds in sorted(bundle.stacks.items()):  # stacks first: small, and what matters most
            for kind, text in sorted(kinds.items()):
                data = text.encode(errors="replace")
                if used + len(data) > budget:
                    continue
                rel = f"stacks/rank_{rank}.{kind}.txt"
                used += _write(os.path.join(tmp, rel), data)
                files.append(rel)
                hashes[rel] = digest(data)
        for rank, dump in sorted(bundle.dumps.items()):
            data = bundle.raw_pickles.get(rank) or to_pickle(dump)
            if used + len(data) > budget:
                omitted.append(rank)
                continue
            used += _write(os.path.join(tmp, f"trace_{rank}"), data)
            files.append(f"trace_{rank}")
            hashes[f"trace_{rank}"] = digest(data)
        text, report = self._report(tmp, bundle)
        health = _c10d_health(bundle.dumps)
        if health:  # torch 2.15's health check: the backends that aborted, said before the analysis
            text = "".join(f"c10d health check: backend {b} aborted on ranks {_ranks(rs)}\n"
                           for b, rs in sorted(health.items())) + text
        text_b, json_b = text.encode(errors="replace"), json.dumps(report, indent=2).encode()
        if len(text_b) + len(json_b) > reserve:  # max_bytes holds: the live report fits by construction
            text_b = bundle.report_text.encode(errors="replace")
            json_b = json.dumps(bundle.report_json, indent=2).encode()
        _write(os.path.join(tmp, "report.txt"), text_b)
        _write(os.path.join(tmp, "report.json"), json_b)
        hashes.update({"report.txt": digest(text_b), "report.json": digest(json_b)})
        manifest = {BUNDLE_MARKER: 1, "reason": bundle.reason, "created": stamp, "ranks": sorted(bundle.dumps),
                    "with_frames": sorted(r for r in bundle.raw_pickles if r not in omitted),
                    "omitted_over_max_bytes": omitted, "files": files + ["report.txt", "report.json"],
                    "recorders": {str(r): list(d.recorders) for r, d in sorted(bundle.dumps.items()) if d.recorders},
                    "c10d_unhealthy_backends": {b: rs for b, rs in sorted(health.items())},
                    "sha256": hashes}
        # signed: the marker alone is public, and a planted copy of it fooled retention (bundle_files.py)
        manifest = sign(manifest, bundle_key(self.directory))
        _write(os.path.join(tmp, "manifest.json"), json.dumps(manifest, indent=2).encode())
        return manifest

    def _report(self, tmp: str, bundle: Bundle) -> tuple[str, dict]:
        """The diagnosis of what the bundle holds (pickles with frames, stacks), as `frexport analyze`
        makes it; the live diagnosis (from JSON polls, without call sites) only if that fails."""
        if self.reporter is not None:
            try:
                text, report = self.reporter(tmp, bundle.stall_after_s)
                # paths relative to the bundle: the temp directory's name means nothing once renamed
                inside = tmp.rstrip("/") + "/"
                return (text.replace(inside, ""),
                        json.loads(json.dumps(report).replace(json.dumps(inside)[1:-1], "")))
            except Exception:  # noqa: BLE001 - the bundle still matters without its own analysis
                logs.get().exception("analysing the evidence bundle failed: its report is the live diagnosis")
        return bundle.report_text, bundle.report_json

    def _sweep_partials(self) -> None:
        """Remove bundles left half-written by a writer that was killed (a sidecar stopped mid-bundle):
        retention counts only finished bundles, so they would fill the volume over restarts. Only old
        ones: a bundle is written within its fetch deadline, seconds, never PARTIAL_MAX_AGE_S."""
        cutoff = time.time() - PARTIAL_MAX_AGE_S
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(".bundle-")]
        except OSError:
            return
        for n in names:
            path = os.path.join(self.directory, n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_mtime < cutoff:
                shutil.rmtree(path, ignore_errors=True)  # rmtree never follows a link (avoids_symlink_attacks)

    def _retain(self, just_written: str) -> list[str]:
        """Oldest first, only bundles this sidecar signed (bundle_files.py: a planted copy of the public
        marker is not one), never the one just written. Returns what was removed. Everything is
        opened relative to the directory with O_NOFOLLOW; what is not ours is left alone, and said once."""
        try:
            key = bundle_key(self.directory)
            dfd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return []
        try:
            sizes: dict[str, int] = {}
            for n in sorted(os.listdir(dfd)):
                if n.startswith(".") or n == just_written:
                    continue
                try:
                    bfd, _, _ = open_bundle(dfd, n, key)
                except (NotOurs, OSError) as exc:
                    if n not in self._not_ours:
                        if len(self._not_ours) > 4096:  # bounded: a volume full of plants is said again
                            self._not_ours.clear()
                        self._not_ours.add(n)
                        logs.get().info("evidence retention leaves %s alone: %s", n, exc)
                    continue
                try:
                    sizes[n] = tree_size(bfd)
                finally:
                    os.close(bfd)
            names = list(sizes)
            total = sum(sizes.values()) + _tree_size(os.path.join(self.directory, just_written))
            removed = []
            while names and (len(names) + 1 > self.max_bundles or total > self.max_bytes):
                n = names.pop(0)
                if sys.version_info >= (3, 11):
                    shutil.rmtree(n, dir_fd=dfd, ignore_errors=True)
                else:  # (found by mypy) 3.10's rmtree has no dir_fd: its TypeError ended every write's retention
                    shutil.rmtree(os.path.join(self.directory, n), ignore_errors=True)
                total -= sizes[n]
                removed.append(n)
            return removed
        except OSError:
            return []
        finally:
            os.close(dfd)


BUNDLE_MARKER = "frexport_evidence_bundle"


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (f" and {len(ranks) - 20} more" if len(ranks) > 20 else "")


def _write(path: str, data: bytes) -> int:
    # O_EXCL|O_NOFOLLOW: a file that is already there (planted) is an error, never written through
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return len(data)


def _tree_size(path: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for n in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return total


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:60].strip("-") or "bundle"


class Fetcher(Protocol):
    """What the evidence sink needs of the worker-server source (satisfied by WorkerServerSource)."""

    def targets(self) -> list: ...

    def handlers(self, rank: int) -> frozenset[str]: ...

    def fetch_all(self, wanted: list, deadline_s: float) -> dict: ...


PICKLE_HANDLER = "frexport_fr_pickle"
STACK_HANDLERS = {"dump_traceback": "traceback", "pyspy_dump": "pyspy_dump"}


class IncidentSink:
    """What every evidence sink shares: it takes passes on the loop's thread and only keeps the
    newest incident there; its own thread collects and writes one incident at a time, so a newer
    incident that arrives meanwhile is collected next (older unstarted ones are superseded), and a
    slow rank or store never costs the loop's time. Subclasses say which passes are incidents
    (`wants`) and how one becomes a bundle (`write_incident`)."""

    name = "evidence"
    thread_name = "frexport-evidence"

    def __init__(self, writer: EvidenceWriter, after_write: Callable[[str], object] | None = None) -> None:
        self.writer = writer
        self.after_write = after_write  # e.g. the upload (export/upload.py), on this sink's thread
        self._next: Pass | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wants(self, p: Pass) -> bool:
        raise NotImplementedError

    def write_incident(self, p: Pass) -> str | None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def consume(self, p: Pass) -> None:
        if not self.wants(p):
            return
        with self._lock:
            self._next = p
        self._wake.set()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def describe(self) -> Iterator[Metric]:
        yield _bundles_family()

    def collect(self) -> Iterator[Metric]:
        c = _bundles_family()
        c.add_metric(["written"], self.writer.written)
        c.add_metric(["failed"], self.writer.failed)
        yield c

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                p, self._next = self._next, None
            if p is not None and not self._stop.is_set():
                try:
                    path = self.write_incident(p)
                    if path is not None and self.after_write is not None:
                        self.after_write(path)
                except Exception:  # noqa: BLE001 - one bad incident must not end evidence collection
                    logs.get().exception("%s bundle failed", type(self).__name__)


class EvidenceSink(IncidentSink):
    """Writes a bundle when a new root cause appears or ranks go down.

    Everything the bundle needs from the ranks (pickles with frames, the stuck ranks' stacks) is
    fetched concurrently within one total deadline, so an unresponsive handler costs at most that
    deadline."""

    def __init__(self, writer: EvidenceWriter, fetcher: Fetcher | None = None, pyspy: bool = True,
                 deadline_s: float = 20.0, max_stacks: int = 8,
                 after_write: Callable[[str], object] | None = None) -> None:
        super().__init__(writer, after_write)
        self.fetcher = fetcher
        self.pyspy = pyspy
        self.deadline_s = deadline_s
        self.max_stacks = max_stacks

    def wants(self, p: Pass) -> bool:
        # ranks going down is an incident when we hold what they were doing (not for sockets a job left
        # behind before frexport started)
        return (p.result is not None and bool(p.result.new_root_causes)) or bool(p.gone_down & set(p.dumps))

    def write_incident(self, p: Pass) -> str | None:
        roots = p.result.new_root_causes if p.result is not None else []
        reason = roots[0].kind if roots else "ranks-down"
        focus = {r for f in roots for r in f.culprit_ranks + f.blocked_ranks} or set(p.gone_down)
        raw, stacks = self._fetch(p.dumps, focus)
        diagnosis = r.diagnosis if (r := p.result or p.latest) else None
        text = render_text(diagnosis) if diagnosis else "no analysis yet\n"
        report = diagnosis.to_json() if diagnosis else {}
        live = p.result or p.latest
        return self.writer.write(Bundle(reason, text, report, p.dumps, raw, stacks,
                                        live.stall_after_s if live else 30.0))

    def _fetch(self, dumps: dict[int, RankDump],
               focus: set[int]) -> tuple[dict[int, bytes], dict[int, dict[str, str]]]:
        if self.fetcher is None:
            return {}, {}
        targets = {t.rank: t for t in self.fetcher.targets()}
        # A rank read from one recorder: that recorder's pickle (its stack frames). One read from several
        # (model/recorders.py) is written from its merged dump instead, without frames: one file per rank.
        recorders = {r: d.recorders or (DEFAULT_RECORDER,) for r, d in dumps.items()}
        wanted = [(targets[r], f"{PICKLE_HANDLER}?backend={recorders[r][0]}") for r in sorted(dumps)
                  if r in targets and len(recorders[r]) == 1]
        # culprits first: their stacks matter most when only a few are fetched
        for r in sorted(focus & set(targets))[: self.max_stacks]:
            listed = self.fetcher.handlers(r)
            for handler in STACK_HANDLERS:
                if handler == "pyspy_dump" and not self.pyspy:
                    continue
                if handler in listed or (not listed and handler == "dump_traceback"):
                    wanted.append((targets[r], handler))
        # torch 2.15 writes a rank's pickle where it dumps on a timeout (the dump directory frexport
        # watches): asked for the culprits and blocked ranks, for what the recorder holds on its side
        wanted += [(targets[r], f"fr_dump_file?backend={rec}") for r in sorted(focus & set(targets))
                   if "fr_dump_file" in self.fetcher.handlers(r) for rec in recorders.get(r, ())]
        got = self.fetcher.fetch_all(wanted, self.deadline_s)
        raw: dict[int, bytes] = {}
        stacks: dict[int, dict[str, str]] = {}
        for (rank, handler), body in got.items():
            if not isinstance(body, bytes):
                continue  # failed: the manifest lists what is missing; no files of errors
            if handler.startswith(PICKLE_HANDLER):
                raw[rank] = body
            elif handler in STACK_HANDLERS:  # (fr_dump_file's answer is the file it wrote on its side)
                stacks.setdefault(rank, {})[STACK_HANDLERS[handler]] = body.decode(errors="replace")
        return raw, stacks


def _c10d_health(dumps: dict[int, RankDump]) -> dict[str, list[int]]:
    """backend -> the ranks whose c10d health check says it aborted (torch >= 2.15)."""
    out: dict[str, list[int]] = {}
    for rank, d in sorted(dumps.items()):
        for backend in d.unhealthy_backends or ():
            out.setdefault(backend, []).append(rank)
    return out


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _bundles_family() -> CounterMetricFamily:
    return CounterMetricFamily("frexport_evidence_bundles", "Evidence bundles written or failed", labels=["result"])
