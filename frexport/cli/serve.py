"""`frexport serve`: build the configuration, validate it, run the sidecar."""

from __future__ import annotations

import argparse
import sys

from frexport import logs
from frexport.config import ConfigError, load_config, validate
from frexport.live.sidecar import Sidecar


def parse_urls(items: list[str]) -> dict[int, str]:
    out = {}
    for item in items:
        rank, sep, url = item.partition("=")
        if not sep or not rank.strip().isdecimal():
            raise ConfigError(f"--url: expected RANK=URL, got {item!r}")
        out[int(rank)] = url.strip()
    return out


def run_serve(args: argparse.Namespace) -> int:
    try:
        overrides = {
            "web.listen": args.listen,
            "web.config_file": args.web_config_file,
            "sources.worker_servers.sockets_dir": args.sockets_dir,
            "sources.worker_servers.poll_interval": args.poll_interval,
            "analysis.stall_after": args.stall_after,
            "evidence.dir": args.evidence_dir,
            "log.format": args.log_format,
            "job_id": args.job_id,
        }
        if args.url:
            overrides["sources.worker_servers.urls"] = parse_urls(args.url)
        if args.dump_dir:
            overrides["sources.dump_dirs"] = [{"path": d, "polling": args.polling} for d in args.dump_dir]
        cfg = load_config(args.config, overrides=overrides)
        problems = validate(cfg)
        if cfg.web.config_file:
            from frexport.web.web_config import load_web_config

            load_web_config(cfg.web.config_file)
    except ConfigError as exc:
        print(f"frexport serve: config error: {exc}", file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(f"frexport serve: config error: {p}", file=sys.stderr)
        return 2
    if args.check_config:
        print("frexport serve: configuration is valid")
        return 0
    log = logs.setup(cfg.log.format, cfg.log.level)
    sidecar = Sidecar(cfg)
    try:
        web = sidecar.start_web()
    except ConfigError as exc:
        print(f"frexport serve: config error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"frexport serve: cannot listen on {cfg.web.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    log.info("serving /metrics, /healthz, /readyz on %s (port %d)", cfg.web.listen, web.port)
    sidecar.run()
    log.info("stopped")
    return 0
