"""Evidence bundles: what an on-call engineer needs, saved the moment a stall is seen.

A bundle is a directory `<evidence dir>/<UTC time>-<reason>/` with every rank's
Flight Recorder snapshot as `trace_<rank>` (PyTorch's pickle format: the raw
bytes of the agent's pickle handler when it answered, with stack frames, else
re-encoded from the last snapshot), the stuck ranks' Python stacks
(`stacks/rank_<r>.traceback.txt`, `stacks/rank_<r>.pyspy_dump.txt`; only handlers the worker
server lists are asked for), the analysis (`report.txt`,
`report.json`) and `manifest.json`. It is written to a hidden temp directory and
renamed, so a half-written bundle is never seen. Retention keeps at most
`max_bundles` bundles and `max_bytes` bytes, oldest removed first.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from frexport import logs
from frexport.export.encode import to_pickle
from frexport.export.report import render_text
from frexport.live.sink import Pass
from frexport.model.dump import RankDump


@dataclass
class Bundle:
    reason: str
    report_text: str
    report_json: dict
    dumps: dict[int, RankDump]
    raw_pickles: dict[int, bytes]  # rank -> PyTorch's own pickle (with frames), when fetched
    stacks: dict[int, dict[str, str]]  # rank -> {"traceback": text, "pyspy": text}


class EvidenceWriter:
    def __init__(self, directory: str, max_bundles: int = 20, max_bytes: int = 1 << 30) -> None:
        self.directory = directory
        self.max_bundles = max_bundles
        self.max_bytes = max_bytes
        self.written = 0
        self.failed = 0

    def write(self, bundle: Bundle) -> str | None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{stamp}-{_slug(bundle.reason)}"
        final = os.path.join(self.directory, name)
        n = 1
        while os.path.exists(final):
            n += 1
            final = os.path.join(self.directory, f"{name}-{n}")
        tmp = os.path.join(self.directory, "." + os.path.basename(final) + ".tmp")
        try:
            os.makedirs(os.path.join(tmp, "stacks"), exist_ok=True)
            files = []
            for rank, dump in sorted(bundle.dumps.items()):
                data = bundle.raw_pickles.get(rank) or to_pickle(dump)
                _write(os.path.join(tmp, f"trace_{rank}"), data)
                files.append(f"trace_{rank}")
            for rank, kinds in sorted(bundle.stacks.items()):
                for kind, text in sorted(kinds.items()):
                    rel = f"stacks/rank_{rank}.{kind}.txt"
                    _write(os.path.join(tmp, rel), text.encode(errors="replace"))
                    files.append(rel)
            _write(os.path.join(tmp, "report.txt"), bundle.report_text.encode())
            _write(os.path.join(tmp, "report.json"), json.dumps(bundle.report_json, indent=2).encode())
            manifest = {"reason": bundle.reason, "created": stamp, "ranks": sorted(bundle.dumps),
                        "with_frames": sorted(bundle.raw_pickles), "files": files + ["report.txt", "report.json"]}
            _write(os.path.join(tmp, "manifest.json"), json.dumps(manifest, indent=2).encode())
            os.rename(tmp, final)
        except OSError as exc:
            self.failed += 1
            shutil.rmtree(tmp, ignore_errors=True)
            logs.get().error("could not write evidence bundle %s: %s", final, exc, extra={"error": str(exc)})
            return None
        self.written += 1
        self._retain()
        logs.get().warning("evidence bundle written: %s", final, extra={"path": final})
        return final

    def _retain(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if not n.startswith(".")
                           and os.path.isfile(os.path.join(self.directory, n, "manifest.json")))
        except OSError:
            return
        sizes = {n: _tree_size(os.path.join(self.directory, n)) for n in names}
        while names and (len(names) > self.max_bundles or sum(sizes[n] for n in names) > self.max_bytes):
            if len(names) == 1:
                break  # never delete the bundle just written
            shutil.rmtree(os.path.join(self.directory, names.pop(0)), ignore_errors=True)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _tree_size(path: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for n in filenames:
            try:
                total += os.path.getsize(os.path.join(dirpath, n))
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


class EvidenceSink:
    """Writes a bundle when a new root cause appears or ranks go down, on a thread of its own.

    Everything the bundle needs from the ranks (pickles with frames, the stuck ranks' stacks) is
    fetched concurrently within one total deadline, so an unresponsive handler costs at most that
    deadline and never the sidecar loop's time. One incident is collected at a time; a newer one
    that arrives meanwhile is kept and collected next (older unstarted ones are superseded)."""

    name = "evidence"

    def __init__(self, writer: EvidenceWriter, fetcher: Fetcher | None = None, pyspy: bool = True,
                 deadline_s: float = 20.0, max_stacks: int = 8) -> None:
        self.writer = writer
        self.fetcher = fetcher
        self.pyspy = pyspy
        self.deadline_s = deadline_s
        self.max_stacks = max_stacks
        self._next: Pass | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="frexport-evidence", daemon=True)
        self._thread.start()

    def consume(self, p: Pass) -> None:
        if (p.result is None or not p.result.new_root_causes) and not p.gone_down:
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
                    self.write_incident(p)
                except Exception:  # noqa: BLE001 - one bad incident must not end evidence collection
                    logs.get().exception("evidence bundle failed")

    def write_incident(self, p: Pass) -> str | None:
        roots = p.result.new_root_causes if p.result is not None else []
        reason = roots[0].kind if roots else "ranks-down"
        focus = {r for f in roots for r in f.culprit_ranks + f.blocked_ranks} or set(p.gone_down)
        raw, stacks = self._fetch(sorted(p.dumps), focus)
        diagnosis = (p.result or p.latest).diagnosis if (p.result or p.latest) else None
        text = render_text(diagnosis) if diagnosis else "no analysis yet\n"
        report = diagnosis.to_json() if diagnosis else {}
        return self.writer.write(Bundle(reason, text, report, p.dumps, raw, stacks))

    def _fetch(self, ranks: list[int], focus: set[int]) -> tuple[dict[int, bytes], dict[int, dict[str, str]]]:
        if self.fetcher is None:
            return {}, {}
        targets = {t.rank: t for t in self.fetcher.targets()}
        wanted = [(targets[r], PICKLE_HANDLER) for r in ranks if r in targets]
        # culprits first: their stacks matter most when only a few are fetched
        for r in sorted(focus & set(targets))[: self.max_stacks]:
            listed = self.fetcher.handlers(r)
            for handler in STACK_HANDLERS:
                if handler == "pyspy_dump" and not self.pyspy:
                    continue
                if handler in listed or (not listed and handler == "dump_traceback"):
                    wanted.append((targets[r], handler))
        got = self.fetcher.fetch_all(wanted, self.deadline_s)
        raw: dict[int, bytes] = {}
        stacks: dict[int, dict[str, str]] = {}
        for (rank, handler), body in got.items():
            if not isinstance(body, bytes):
                continue  # failed: the manifest lists what is missing; no files of errors
            if handler == PICKLE_HANDLER:
                raw[rank] = body
            else:
                stacks.setdefault(rank, {})[STACK_HANDLERS[handler]] = body.decode(errors="replace")
        return raw, stacks


def _bundles_family() -> CounterMetricFamily:
    return CounterMetricFamily("frexport_evidence_bundles", "Evidence bundles written or failed", labels=["result"])
