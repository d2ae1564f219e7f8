"""`frexport jobview`: the job-level view (docs/multi-node.md). A sidecar loop whose only source is
every peer sidecar, with the analysis unscoped (it sees the whole job) and the job's evidence sink."""

from __future__ import annotations

import argparse
import sys

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from frexport import logs
from frexport.cli.serve import start_web
from frexport.config import Config, ConfigError, effective_yaml, load_config, validate
from frexport.decode import scanned
from frexport.decode.sandbox import DecoderPool, Limits, SandboxUnavailable
from frexport.evidence.job import JobEvidenceSink
from frexport.export.evidence import EvidenceWriter
from frexport.export.prometheus import BuildInfoCollector, ScrapeCollector, SourcesCollector
from frexport.export.prometheus.peers import PeersCollector
from frexport.live.sidecar import Sidecar
from frexport.live.sink import Sink
from frexport.live.state import LiveState
from frexport.model.world import MAX_WORLD
from frexport.sources.health import HealthRegistry
from frexport.sources.peers import PeersSource


def run_jobview(args: argparse.Namespace) -> int:
    try:
        overrides = {
            "web.listen": args.listen, "web.config_file": args.web_config_file,
            "peers.urls": args.peer or None, "peers.service": args.peers_service,
            "peers.poll_interval": args.poll_interval, "analysis.stall_after": args.stall_after,
            "evidence.dir": args.evidence_dir, "log.format": args.log_format, "job_id": args.job_id,
            "decode.allow_no_memory_limit": args.allow_no_memory_limit,
            "peers.allow_basic_auth_over_http": getattr(args, "peers_basic_auth_over_http", None),
        }
        cfg = load_config(args.config, overrides=overrides)
        problems = validate(cfg, job_view=True)
        if cfg.web.config_file:
            from frexport.web.web_config import load_web_config

            load_web_config(cfg.web.config_file)
    except ConfigError as exc:
        print(f"frexport jobview: config error: {exc}", file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(f"frexport jobview: config error: {p}", file=sys.stderr)
        return 2
    if getattr(args, "check_config", False):
        sys.stdout.write(effective_yaml(cfg))
        print("frexport jobview: configuration is valid", file=sys.stderr)
        return 0
    log = logs.setup(cfg.log.format, cfg.log.level)
    if (pure := scanned.pure_path_warning()) is not None:  # it decodes peers' pickles (call sites)
        log.warning("%s", pure)
    try:
        sidecar, registry = build_jobview(cfg)
        sidecar.decoder.start()
    except (OSError, ConfigError) as exc:
        print(f"frexport jobview: {exc}", file=sys.stderr)
        return 2
    except SandboxUnavailable as exc:
        print(f"frexport jobview: cannot bound the decoders' memory: {exc} (see --allow-no-memory-limit)",
              file=sys.stderr)
        return 2
    try:
        web = start_web(cfg, registry, sidecar.ready_event.is_set)
    except (ConfigError, OSError) as exc:
        print(f"frexport jobview: cannot serve on {cfg.web.listen}: {exc}", file=sys.stderr)
        return 2
    log.info("job-level view: peers %s; serving /metrics on %s (port %d)",
             ", ".join(cfg.peers.urls + ([cfg.peers.service] if cfg.peers.service else [])), cfg.web.listen, web.port)
    try:
        sidecar.run()
    finally:
        web.stop()
    return 0


def build_jobview(cfg: Config) -> tuple[Sidecar, CollectorRegistry]:
    health = HealthRegistry()
    dc = cfg.decode
    decoder = DecoderPool(dc.workers, Limits(dc.memory_limit, dc.timeout, not dc.allow_no_memory_limit))
    peers = PeersSource(health, cfg.peers, cfg.analysis.window, decoder, max_ranks=cfg.max_ranks,
                        world_size=cfg.world_size)
    sinks: list[Sink] = []
    if cfg.evidence.dir:
        ev = cfg.evidence
        sinks.append(JobEvidenceSink(EvidenceWriter(cfg.evidence.dir, ev.max_bundles, ev.max_bytes), peers,
                                     cfg.analysis.window, ev.pyspy, ev.deadline, cfg.peers.stacks))
    # only the latest snapshots (see the note below), of the ranks the peers source took: it sizes the view
    state = LiveState(max_ranks=MAX_WORLD, count=False)
    sidecar = Sidecar(cfg.analysis, state, health, [peers], sinks, None, decoder, scoped=False)
    # Only the view's own health: the ranks' series come from their pods' sidecars, and exporting
    # them twice would double every job-wide rule's input.
    named = {"sources": SourcesCollector(health, state), "build_info": BuildInfoCollector(),
             "peers": PeersCollector(peers)}
    named.update({s.name: s for s in sinks})
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ScrapeCollector(named))  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return sidecar, registry
