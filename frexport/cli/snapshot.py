"""`frexport snapshot`: fetch every rank's recorder now into a directory `frexport analyze` reads."""

from __future__ import annotations

import argparse
import os
import sys

from frexport.cli.serve import parse_urls
from frexport.config import ConfigError, WorkerServers
from frexport.files import atomic_write
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError
from frexport.sources.worker_server import JSON_HANDLERS, WorkerServerSource


def run_snapshot(args: argparse.Namespace) -> int:
    try:
        urls = parse_urls(args.url)
    except ConfigError as exc:
        print(f"frexport snapshot: {exc}", file=sys.stderr)
        return 2
    if not args.sockets_dir and not urls:
        print("frexport snapshot: give --sockets-dir or --url", file=sys.stderr)
        return 2
    if _holds_files(args.output) and not args.force:
        print(f"frexport snapshot: {args.output} is not empty: an older snapshot's ranks would mix with this "
              "one's; give an empty or new OUTDIR, or --force", file=sys.stderr)
        return 2
    source = WorkerServerSource(HealthRegistry(), WorkerServers(sockets_dir=args.sockets_dir, urls=urls,
                                                              timeout=args.timeout))
    targets = source.targets()
    if not targets:
        print(f"frexport snapshot: no worker servers found in {args.sockets_dir}", file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    saved, failed = [], []
    for t in targets:
        body, name = None, None
        # The agent's pickle carries stack frames; the JSON handlers are what any worker server has.
        for handler, filename in [("frexport_fr_pickle", f"trace_{t.rank}")] + \
                                 [(h, f"trace_{t.rank}.json") for h in JSON_HANDLERS]:
            try:
                body, name = source.fetch(t, handler), filename
                break
            except PeerError as exc:
                last = exc
                if exc.down:
                    break
        if body is None:
            failed.append(f"rank {t.rank}: {last.detail}")
            continue
        atomic_write(os.path.join(args.output, name), body)
        saved.append(name)
        if args.stacks:
            try:
                atomic_write(os.path.join(args.output, "stacks", f"rank_{t.rank}.traceback.txt"),
                             source.fetch(t, "dump_traceback"), make_dirs=True)
            except PeerError as exc:
                failed.append(f"rank {t.rank} stacks: {exc.detail}")
    print(f"frexport snapshot: saved {len(saved)} of {len(targets)} ranks into {args.output}")
    for f in failed:
        print(f"  failed: {f}", file=sys.stderr)
    return 0 if saved else 1


def _holds_files(path: str) -> bool:
    try:
        return any(True for _ in os.scandir(path))
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True
