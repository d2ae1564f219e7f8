"""`frexport serve`: the sidecar daemon.

One loop drives the pipeline (sources -> state -> live analysis -> evidence);
the web server answers scrapes from its own threads, reading the state. On
SIGTERM the loop stops, exporters flush, and the process exits within seconds.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from frexport import logs
from frexport.config import Config
from frexport.export.evidence import Bundle, EvidenceWriter
from frexport.export.prometheus import FrexportCollector
from frexport.export.report import render_text
from frexport.live.diagnosis import LiveAnalysis, LiveResult
from frexport.live.state import LiveState
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError
from frexport.sources.worker_server import WorkerServerSource
from frexport.web.server import WebServer


@dataclass
class Sidecar:
    cfg: Config
    state: LiveState = field(init=False)
    health: HealthRegistry = field(default_factory=HealthRegistry)
    stop_event: threading.Event = field(default_factory=threading.Event)
    ready_event: threading.Event = field(default_factory=threading.Event)
    last_result: LiveResult | None = None

    def __post_init__(self) -> None:
        self.state = LiveState(max_ranks=self.cfg.max_ranks)
        ws = self.cfg.sources.worker_servers
        self.poller = WorkerServerSource(self.state, self.health, ws.sockets_dir, dict(ws.urls), ws.timeout,
                                         ws.concurrency, ws.backoff_max, ws.max_body_bytes, ws.max_entries) \
            if ws.sockets_dir or ws.urls else None
        self.dump_dirs = [DumpDirSource(self.state, self.health, d.path, d.prefix, d.polling, d.poll_interval,
                                        d.settle, timeout_dumps=d.timeout_dumps) for d in self.cfg.sources.dump_dirs]
        self.analysis = LiveAnalysis(self.state, self.cfg.analysis)
        ev = self.cfg.evidence
        self.evidence = EvidenceWriter(ev.dir, ev.max_bundles, ev.max_bytes) if ev.dir else None
        self.traces = None
        if self.cfg.traces.enabled:
            from frexport.export.otlp import TraceExporter, make_exporter

            self.traces = TraceExporter(make_exporter(), self.cfg.job_id or "", self.cfg.traces.queue_size,
                                        self.cfg.traces.checkpoint_file,
                                        world_size=self.cfg.world_size)
            self.state.subscribe(self.traces.on_events)
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = FrexportCollector(self.state, self.health, self._extra_metrics)
        self.registry.register(self.collector)
        self.web: WebServer | None = None
        self._was_up: set[int] = set()

    # --- lifecycle -----------------------------------------------------------------------------

    def start_web(self) -> WebServer:
        wrap = authorize = None
        if self.cfg.web.config_file:
            from frexport.web.web_config import load_web_config

            wc = load_web_config(self.cfg.web.config_file)
            wrap, authorize = wc.wrap_socket, wc.authorize
        self.web = WebServer(self.cfg.web.listen, self.registry, self.ready_event.is_set, wrap, authorize)
        self.web.start()
        return self.web

    def run(self, install_signals: bool = True) -> None:
        log = logs.get()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop_event.set())
        for d in self.dump_dirs:
            d.start()
        if self.traces is not None:
            self.traces.start()
        poll_every = self.cfg.sources.worker_servers.poll_interval
        next_poll = next_analysis = 0.0
        log.info("frexport serve: watching %d dump dirs, worker servers: %s", len(self.dump_dirs),
                 "yes" if self.poller else "no")
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                # Each stage on its own: a failure (a bug, a full disk) is logged and the loop goes on.
                for d in self.dump_dirs:
                    self._guarded(d.process, f"dump dir {d.path}")
                if self.poller is not None and now >= next_poll:
                    self._guarded(self.poller.poll, "polling")
                    next_poll = now + poll_every
                if now >= next_analysis:
                    self._guarded(self._analyze, "analysis")
                    next_analysis = now + self.cfg.analysis.interval
                    self.ready_event.set()
                self._guarded(lambda: self.state.expire(time.time_ns(), int(self.cfg.analysis.rank_expiry * 1e9)),
                              "expiry")
                self.stop_event.wait(0.2)
        finally:
            self.shutdown()

    @staticmethod
    def _guarded(step, what: str) -> None:
        try:
            step()
        except Exception:  # noqa: BLE001 - the daemon outlives any one failure
            logs.get().exception("%s failed", what)

    def shutdown(self) -> None:
        if self.traces is not None:
            self.traces.pump(self.state.view().findings)
            self.traces.flush(2.0)
            self.traces.shutdown(1.0)
        for d in self.dump_dirs:
            d.stop()
        if self.poller is not None:
            self.poller.close()
        if self.web is not None:
            self.web.stop()
            self.web = None

    # --- one analysis pass ---------------------------------------------------------------------

    def _analyze(self) -> None:
        log = logs.get()
        result = self.analysis.run()
        self.last_result = result
        if self.traces is not None:
            self.traces.pump(result.diagnosis.findings)
        for f in result.new_root_causes:
            for rank in f.culprit_ranks or f.blocked_ranks:
                log.warning("%s: %s", f.kind, f.message, extra={"rank": rank, "kind": f.kind})
        down = self._ranks_gone_down()
        if self.evidence is not None and (result.new_root_causes or down):
            reason = result.new_root_causes[0].kind if result.new_root_causes else "ranks-down"
            focus = {r for f in result.new_root_causes for r in f.culprit_ranks + f.blocked_ranks} or down
            self._write_bundle(reason, focus)

    def _ranks_gone_down(self) -> set[int]:
        """Ranks that answered before and now refuse: a killed or crashed job. A rank whose socket
        file disappeared exited cleanly (the agent removes it) and is not counted."""
        if self.poller is None:
            return set()
        health = {h.name: h for h in self.health.view()}
        targets = [t for t in self.poller.targets() if t.name in health]
        up = {t.rank for t in targets if health[t.name].up}
        down = {t.rank for t in targets if not health[t.name].up}
        gone, self._was_up = self._was_up & down, up
        return gone

    def _write_bundle(self, reason: str, focus: set[int]) -> str | None:
        dumps = self.state.latest_dumps()
        raw, stacks = {}, {}
        if self.poller is not None:
            targets = {t.rank: t for t in self.poller.targets()}
            for rank in sorted(dumps):
                t = targets.get(rank)
                if t is None:
                    continue
                try:
                    raw[rank] = self.poller.fetch(t, "frexport_fr_pickle")
                except PeerError:
                    pass  # down, or no agent: the last snapshot is re-encoded instead
                if rank in focus:
                    stacks[rank] = {}
                    handlers = ["dump_traceback"] + (["pyspy_dump"] if self.cfg.evidence.pyspy else [])
                    for h in handlers:
                        try:
                            stacks[rank][h.replace("dump_", "")] = self.poller.fetch(t, h, 30.0).decode(
                                errors="replace")
                        except PeerError as exc:
                            stacks[rank][h.replace("dump_", "")] = f"unavailable: {exc.detail}\n"
        diagnosis = self.last_result.diagnosis if self.last_result else None
        text = render_text(diagnosis) if diagnosis else "no analysis yet\n"
        report = diagnosis.to_json() if diagnosis else {}
        return self.evidence.write(Bundle(reason, text, report, dumps, raw, stacks))

    def _extra_metrics(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.evidence is not None:
            c = CounterMetricFamily("frexport_evidence_bundles", "Evidence bundles written or failed",
                                    labels=["result"])
            c.add_metric(["written"], self.evidence.written)
            c.add_metric(["failed"], self.evidence.failed)
            yield c
        if self.traces is not None:
            c = CounterMetricFamily("frexport_otlp_spans", "Spans exported over OTLP, failed to export, or dropped "
                                    "from the full queue", labels=["result"])
            c.add_metric(["exported"], self.traces.exported)
            c.add_metric(["failed"], self.traces.failed)
            c.add_metric(["dropped"], self.traces.dropped)
            yield c
            q = GaugeMetricFamily("frexport_otlp_queue_spans", "Spans waiting for export")
            q.add_metric([], self.traces.queued())
            yield q
        if self.last_result is not None:
            g = GaugeMetricFamily("frexport_stall_threshold_seconds",
                                  "How long a wait must last before the live analysis calls it a stall")
            g.add_metric([], self.last_result.stall_after_s)
            yield g

