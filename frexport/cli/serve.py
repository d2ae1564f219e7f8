"""`frexport serve`: build the configuration, validate it, run the sidecar."""

from __future__ import annotations

import argparse
import functools
import os
import sys

from prometheus_client import CollectorRegistry

from frexport import logs
from frexport.config import Config, ConfigError, effective_yaml, load_config, validate
from frexport.decode import scanned
from frexport.decode.sandbox import DecoderPool, Limits, SandboxUnavailable
from frexport.evidence.sink import EvidenceSink
from frexport.export.evidence import EvidenceWriter
from frexport.export.prometheus import Bounds, sidecar_registry
from frexport.live.sidecar import Sidecar
from frexport.live.sink import Sink
from frexport.live.state import LiveState
from frexport.sources.base import Source
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from frexport.web.server import WebServer


def parse_urls(items: list[str]) -> dict[int, str]:
    out = {}
    for item in items:
        rank, sep, url = item.partition("=")
        if not sep or not rank.strip().isdecimal():
            raise ConfigError(f"--url: expected RANK=URL, got {item!r}")
        out[int(rank)] = url.strip()
    return out


def run_serve(args: argparse.Namespace) -> int:
    # The daemon's every stderr line is a log line in the asked-for format, config errors included; the
    # format is known before the config loads only from the flag or the environment (a person reads
    # --check-config's answer: plain text).
    early = args.log_format or os.environ.get("FREXPORT_LOG__FORMAT", "text")
    log = logs.get() if args.check_config else logs.setup(early if early in ("text", "json") else "text")

    def fail(message: str) -> int:
        if args.check_config:
            print(f"frexport serve: {message}", file=sys.stderr)
        else:
            log.error("frexport serve: %s", message)
        return 2

    try:
        overrides = {
            "web.listen": args.listen,
            "web.config_file": args.web_config_file,
            "sources.worker_servers.sockets_dir": args.sockets_dir,
            "sources.worker_servers.recorders": args.recorder or None,
            "sources.worker_servers.poll_interval": args.poll_interval,
            "sources.worker_servers.status_interval": args.status_interval,
            "sources.worker_servers.entries_interval": args.entries_interval,
            "sources.worker_servers.entries_via": args.entries_via,
            "analysis.stall_after": args.stall_after,
            "evidence.dir": args.evidence_dir,
            "log.format": args.log_format,
            "log.level": args.log_level,
            "job_id": args.job_id,
            "decode.allow_no_memory_limit": getattr(args, "allow_no_memory_limit", None),
            "peers.serve": args.peers_api or None,
            "peers.allow_unauthenticated": args.peers_api_unauthenticated or None,
        }
        if args.url:
            overrides["sources.worker_servers.urls"] = parse_urls(args.url)
        if args.dump_dir:
            overrides["sources.dump_dirs"] = [{"path": d, "polling": args.polling} for d in args.dump_dir]
        cfg = load_config(args.config, overrides=overrides)
        problems = validate(cfg) + otlp_problems(cfg)
        if cfg.web.config_file:
            from frexport.web.web_config import load_web_config

            load_web_config(cfg.web.config_file)
    except ConfigError as exc:
        return fail(f"config error: {exc}")
    if problems:
        for p in problems[:-1]:
            fail(f"config error: {p}")
        return fail(f"config error: {problems[-1]}")
    if args.check_config:
        sys.stdout.write(effective_yaml(cfg))
        print("frexport serve: configuration is valid", file=sys.stderr)
        return 0
    log = logs.setup(cfg.log.format, cfg.log.level)
    if (pure := scanned.pure_path_warning()) is not None:
        log.warning("%s", pure)
    sidecar, registry = build_sidecar(cfg)
    try:
        sidecar.decoder.start()  # says now, not at the first hostile file, whether memory is bounded
    except SandboxUnavailable as exc:
        return fail(f"cannot bound the decoders' memory: {exc}; refusing to decode untrusted input without it "
                    "(set decode.allow_no_memory_limit or pass --allow-no-memory-limit to go on)")
    if sidecar.decoder.limit_problem:
        log.warning("decoding WITHOUT a memory limit (allowed by decode.allow_no_memory_limit): %s",
                    sidecar.decoder.limit_problem)
    try:
        web = start_web(cfg, registry, sidecar.ready_event.is_set, peer_api(cfg, sidecar))
    except ConfigError as exc:
        return fail(f"config error: {exc}")
    except OSError as exc:
        return fail(f"cannot listen on {cfg.web.listen}: {exc.strerror or exc}")
    log.info("serving /metrics, /healthz, /readyz%s on %s (port %d)", ", /api/v1/ranks" if cfg.peers.serve else "",
             cfg.web.listen, web.port)
    try:
        sidecar.run()
    finally:
        web.stop()
    log.info("stopped")
    return 0


def otlp_problems(cfg: Config) -> list[str]:
    """What the OTEL_* settings would refuse where spans are on (the exporter's protocol, the sampler, the
    batch delay): said at start-up and by --check-config, not as a traceback when the sink is built."""
    if not cfg.traces.enabled:
        return []
    from frexport.export.otlp.exporter import protocol_of, schedule_delay_s
    from frexport.export.otlp.sampling import TraceSampling

    problems = []
    for check in (protocol_of, TraceSampling.from_env, schedule_delay_s):
        try:
            check(os.environ)
        except ValueError as exc:
            problems.append(f"traces: {exc}")
    return problems


def build_sidecar(cfg: Config) -> tuple[Sidecar, CollectorRegistry]:
    """Wire the sidecar from its configuration: sources, state, analysis, sinks, and the metrics
    registry that reads them."""
    health = HealthRegistry()
    state = LiveState(max_ranks=cfg.max_ranks, max_label_sets=cfg.metrics.max_label_sets,
                      events=cfg.traces.enabled)  # (only the spans sink takes the entries' events)
    dc = cfg.decode
    decoder = DecoderPool(dc.workers, Limits(dc.memory_limit, dc.timeout, not dc.allow_no_memory_limit))
    ws = cfg.sources.worker_servers
    poller = WorkerServerSource(health, ws, decoder, dc.in_process_max_bytes, cfg.max_ranks) \
        if ws.sockets_dir or ws.urls else None
    sources: list[Source] = [DumpDirSource(health, d, pool=decoder) for d in cfg.sources.dump_dirs]
    if poller is not None:
        sources.append(poller)
    sinks: list[Sink] = []
    if cfg.evidence.dir:
        ev = cfg.evidence
        from frexport.evidence.report import bundle_report

        limits = Limits(dc.memory_limit, dc.timeout, not dc.allow_no_memory_limit)  # the bundle is decoded too
        reporter = functools.partial(bundle_report, limits=limits)
        uploader = make_uploader(cfg)
        writer = EvidenceWriter(cfg.evidence.dir, ev.max_bundles, ev.max_bytes)
        sinks.append(EvidenceSink(writer, poller,
                                  ev.pyspy, deadline_s=ev.deadline, after_write=uploader.upload if uploader else None,
                                  reporter=reporter, native_max=ev.native_stacks,
                                  logs_dir=os.path.join(ws.sockets_dir, "logs") if ws.sockets_dir else None))
        if ev.profile.enabled and poller is not None:
            from frexport.evidence.profiles import ProfileSink

            sinks.append(ProfileSink(writer, poller, ev.profile.duration, ev.profile.interval, reporter=reporter,
                                     after_write=uploader.upload if uploader else None))
        if uploader is not None:
            sinks.append(uploader)  # for its self-metric; the evidence sink's thread calls it
    if cfg.traces.enabled:
        from frexport.export.otlp import OtlpSink, make_exporter
        from frexport.export.otlp.exporter import schedule_delay_s
        from frexport.export.otlp.sampling import TraceSampling

        sinks.append(OtlpSink(make_exporter(), cfg.job_id or "", cfg.traces.queue_size, cfg.traces.checkpoint_file,
                              world_size=cfg.world_size, sampling=TraceSampling.from_env(os.environ),
                              schedule_delay_s=schedule_delay_s(os.environ)))
    sidecar = Sidecar(cfg.analysis, state, health, sources, sinks, poller.down_ranks if poller else None,
                      decoder)
    # the sinks' own self-metrics (bundles written, spans exported) are scraped beside ours
    m = cfg.metrics
    return sidecar, sidecar_registry(state, health, sidecar.analysis, sinks,
                                     bounds=Bounds(m.max_series_per_family, m.max_label_chars))


def make_uploader(cfg: Config):
    """The evidence upload of evidence.upload, or None; credentials default to the AWS_* environment."""
    up = cfg.evidence.upload
    if not up.endpoint:
        return None
    from frexport.export.upload import BundleUploader, Target

    env = os.environ
    target = Target(endpoint=up.endpoint, bucket=up.bucket or "", region=up.region, prefix=up.prefix,
                    path_style=up.path_style,
                    access_key_id=up.access_key_id or env.get("AWS_ACCESS_KEY_ID", ""),
                    secret_access_key=up.secret_access_key or env.get("AWS_SECRET_ACCESS_KEY", ""),
                    session_token=up.session_token or env.get("AWS_SESSION_TOKEN", ""))
    return BundleUploader(target, job_id=cfg.job_id or "", retries=up.retries, timeout_s=up.timeout)


def peer_api(cfg: Config, sidecar: Sidecar):
    """The peers endpoint's handler when `peers.serve` is set (validate() made sure it is protected or
    knowingly open), else None: nothing under /api/ is served."""
    if not cfg.peers.serve:
        return None
    from frexport.evidence.proxy import HandlerProxy
    from frexport.export.peer_api import PeerApi

    poller = next((s for s in sidecar.sources if isinstance(s, WorkerServerSource)), None)
    proxy = HandlerProxy(poller, cfg.evidence.deadline, pyspy=cfg.evidence.pyspy)
    return PeerApi(sidecar.state, cfg.analysis.window, proxy,
                   poller.stall_suspected if poller is not None else None).handle


def start_web(cfg: Config, registry: CollectorRegistry, ready, api=None) -> WebServer:
    wrap = authorize = None
    headers: dict[str, str] = {}
    if cfg.web.config_file:
        from frexport.web.web_config import load_web_config

        wc = load_web_config(cfg.web.config_file)
        wrap, authorize, headers = wc.wrap_socket, wc.authorize, wc.headers
    web = WebServer(cfg.web.listen, registry, ready, wrap, authorize, api=api, headers=headers)
    registry.register(web)  # its dropped connections
    web.start()
    return web
