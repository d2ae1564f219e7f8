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
from frexport.sources.worker_server import RankTarget, WorkerServerSource


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
        try:
            recorders = source.recorders(t)
        except PeerError as exc:
            failed.append(f"rank {t.rank}: {exc.detail}")
            continue
        # A rank is every recorder that holds a group (model/recorders.py): the first at the top, each
        # other one a dump directory of its own (recorder-<name>/), as `frexport analyze` reads one
        # recorder per rank.
        for n, recorder in enumerate(recorders):
            where = args.output if n == 0 else os.path.join(args.output, f"recorder-{recorder}")
            name = _fetch_one(source, t, recorder, where, failed)
            if name is not None:
                saved.append(os.path.relpath(os.path.join(where, name), args.output))
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


def _fetch_one(source: WorkerServerSource, t: RankTarget, recorder: str, where: str,
               failed: list[str]) -> str | None:
    """One recorder's dump of one rank into `where`: the agent's pickle (it carries stack frames), else
    PyTorch's JSON handler. The file name, or None (said in `failed`)."""
    last: PeerError | None = None
    pickle_handler, json_handler = source.dump_handlers(t, recorder)
    for handler, filename in ((pickle_handler, f"trace_{t.rank}"), (json_handler, f"trace_{t.rank}.json")):
        try:
            atomic_write(os.path.join(where, filename), source.fetch(t, handler), make_dirs=True)
            return filename
        except PeerError as exc:
            last = exc
            if exc.down:
                break
    failed.append(f"rank {t.rank} ({recorder} recorder): {last.detail if last else 'no handler'}")
    return None


def _holds_files(path: str) -> bool:
    try:
        return any(True for _ in os.scandir(path))
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True
