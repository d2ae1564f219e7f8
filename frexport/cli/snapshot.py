"""`frexport snapshot`: fetch every rank's recorder now into a directory `frexport analyze` reads."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from frexport.analysis.looks import LOOKS_FILE
from frexport.cli.serve import parse_urls
from frexport.config import ConfigError, WorkerServers
from frexport.files import atomic_write
from frexport.sources.handlers import TRACEBACK_HANDLER
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
    rounds = max(1, getattr(args, "rounds", 1) or 1)
    f: list[str] | str  # (for mypy) one look's failures, then each line of them
    if rounds == 1:
        saved, failed, _ = _look(source, targets, args.output, args.stacks)
    else:
        # Two looks some seconds apart: `analyze` says per group whether any rank moved between them
        # (analysis/looks.py). When each rank was seen is measured here, on this process's monotonic
        # clock, and written down: file times are no clock.
        saved, failed, seen = [], [], []
        start = time.monotonic()
        for i in range(rounds):
            if i:
                time.sleep(max(0.0, start + i * args.gap - time.monotonic()))
            s, f, when = _look(source, targets, os.path.join(args.output, f"look_{i + 1}"), args.stacks, start)
            saved, failed = s, failed + [f"look {i + 1}: {x}" for x in f]
            seen.append({str(r): t for r, t in when.items()})
        atomic_write(os.path.join(args.output, LOOKS_FILE),
                     json.dumps({"rounds": rounds, "gap_s": args.gap, "seen_s": seen}, indent=2).encode())
    print(f"frexport snapshot: saved {len(saved)} of {len(targets)} ranks into {args.output}"
          + (f" ({rounds} looks {args.gap:g} s apart)" if rounds > 1 else ""))
    for f in failed:
        print(f"  failed: {f}", file=sys.stderr)
    return 0 if saved else 1


def _look(source: WorkerServerSource, targets, output: str, stacks: bool,
          start: float | None = None) -> tuple[list[str], list[str], dict[int, float]]:
    """One round over every rank: (files saved, failures, when each rank answered, seconds since `start`)."""
    saved, failed, when = [], [], {}
    for t in targets:
        try:
            recorders = source.recorders(t)
        except PeerError as exc:
            failed.append(f"rank {t.rank}: {exc.detail}")
            continue
        if start is not None:
            when[t.rank] = round(time.monotonic() - start, 3)
        # A rank is every recorder that holds a group (model/recorders.py): the first at the top, each
        # other one a dump directory of its own (recorder-<name>/), as `frexport analyze` reads one
        # recorder per rank.
        for n, recorder in enumerate(recorders):
            where = output if n == 0 else os.path.join(output, f"recorder-{recorder}")
            name = _fetch_one(source, t, recorder, where, failed)
            if name is not None:
                saved.append(os.path.relpath(os.path.join(where, name), output))
        if stacks:
            try:
                atomic_write(os.path.join(output, "stacks", f"rank_{t.rank}.traceback.txt"),
                             source.fetch(t, TRACEBACK_HANDLER), make_dirs=True)
            except PeerError as exc:
                failed.append(f"rank {t.rank} stacks: {exc.detail}")
    return saved, failed, when


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
