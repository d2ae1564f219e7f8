"""The evidence stage's entry: a sink of the sidecar's loop that turns incidents into bundles.

It takes passes on the loop's thread and only keeps the newest incident there; its own thread
collects and writes one incident at a time, so a newer incident that arrives meanwhile is collected
next (older unstarted ones are superseded), and a slow rank or store never costs the loop's time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from frexport import logs
from frexport.analysis.report import render_text
from frexport.decode.rank_logs import ring_tail
from frexport.evidence import native
from frexport.evidence.bundle import Bundle, BundleWriter
from frexport.evidence.fetch import Raw, Stacks, pod_wanted, split
from frexport.evidence.report import Reporter, report_of
from frexport.live.sink import Pass
from frexport.model.dump import RankDump
from frexport.sources.handlers import HandlerFetcher


class IncidentSink:
    """What every evidence sink shares. Subclasses say which passes are incidents (`wants`) and how
    one becomes a bundle (`write_incident`)."""

    name = "evidence"
    thread_name = "frexport-evidence"

    def __init__(self, writer: BundleWriter, after_write: Callable[[str], object] | None = None) -> None:
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
    """A pod's bundle, when a new root cause appears or ranks go down: every rank's recorder, the
    stuck ranks' stacks (fetched through the worker-server source) and last lines printed (the agent's
    ring files in `logs_dir`, read here: a rank that left cannot answer), and the report of the
    bundle's own files by `reporter` (evidence/report.py's bundle_report; without one, the live diagnosis)."""

    def __init__(self, writer: BundleWriter, fetcher: HandlerFetcher[Any] | None = None, pyspy: bool = True,
                 deadline_s: float = 20.0, max_stacks: int = 8,
                 after_write: Callable[[str], object] | None = None, reporter: Reporter | None = None,
                 native_max: int = 0, logs_dir: str | None = None, max_logs: int = 32) -> None:
        super().__init__(writer, after_write)
        self.fetcher = fetcher
        self.native_max = native_max  # culprits and blocked ranks whose native stacks are taken (0: none)
        self.pyspy = pyspy
        self.deadline_s = deadline_s
        self.max_stacks = max_stacks
        self.reporter = reporter
        self.logs_dir = logs_dir
        self.max_logs = max_logs

    def wants(self, p: Pass) -> bool:
        # ranks going down is an incident when we hold what they were doing (not for sockets a job left
        # behind before frexport started)
        return (p.result is not None and bool(p.result.new_root_causes)) or bool(p.gone_down & set(p.dumps))

    def write_incident(self, p: Pass) -> str | None:
        roots = p.result.new_root_causes if p.result is not None else []
        reason = roots[0].kind if roots else "ranks-down"
        focus = {r for f in roots for r in f.culprit_ranks + f.blocked_ranks} or set(p.gone_down)
        ordered = [r for f in roots for r in f.culprit_ranks] + [r for f in roots for r in f.blocked_ranks]
        # native stacks are taken while the handlers are asked: a bundle waits for the slower of the two
        natives = ThreadPoolExecutor(max_workers=1, thread_name_prefix="frexport-native")
        native_future = natives.submit(self._native, list(dict.fromkeys(ordered)) or sorted(p.gone_down))
        natives.shutdown(wait=False)
        raw, stacks = self._fetch(p.dumps, focus)
        for rank, text in native_future.result().items():
            stacks.setdefault(rank, {})["native"] = text
        culprits = sorted({r for f in roots for r in f.culprit_ranks})
        logs = self._logs(culprits + sorted(focus - set(culprits)))
        live = p.result or p.latest
        diagnosis = live.diagnosis if live else None
        text = render_text(diagnosis) if diagnosis else "no analysis yet\n"
        report = diagnosis.to_json() if diagnosis else {}
        bundle = Bundle(reason, text, report, p.dumps, raw, stacks, live.stall_after_s if live else 30.0, logs=logs)
        draft = self.writer.begin(bundle)
        if draft is None:
            return None
        return self.writer.finish(draft, *report_of(self.reporter, draft.path, bundle))

    def _native(self, ranks: list[int]) -> dict[int, str]:
        """Native stacks of the first `native_max` of `ranks` (culprits first) whose pid we can see, all
        at once: each tool stops only its own rank, for as long as it reads it (evidence/native.py)."""
        lookup = getattr(self.fetcher, "pid", None)
        if lookup is None or self.native_max <= 0:
            return {}
        found = native.tool()
        pids = [(r, pid) for r in ranks if (pid := lookup(r)) is not None][:self.native_max]
        if not pids:
            return {}
        with ThreadPoolExecutor(max_workers=len(pids), thread_name_prefix="frexport-native") as pool:
            texts = pool.map(lambda rp: native.capture(rp[0], rp[1], found), pids)
            return {r: text for (r, _), text in zip(pids, texts)}

    def _logs(self, ranks: list[int]) -> dict[int, str]:
        """The last lines of the first `max_logs` of `ranks` (culprits first) that kept a log."""
        if not self.logs_dir:
            return {}
        out: dict[int, str] = {}
        for r in ranks[:self.max_logs]:
            text = ring_tail(self.logs_dir, r)
            if text:
                out[r] = text
        return out

    def _fetch(self, dumps: dict[int, RankDump], focus: set[int]) -> tuple[Raw, Stacks]:
        if self.fetcher is None:
            return {}, {}
        wanted = pod_wanted(self.fetcher, dumps, focus, self.pyspy, self.max_stacks)
        return split(self.fetcher.fetch_all(wanted, self.deadline_s))


def _bundles_family() -> CounterMetricFamily:
    return CounterMetricFamily("frexport_evidence_bundles", "Evidence bundles written or failed", labels=["result"])
