"""`frexport snapshot`: fetch every rank's recorder now into a directory `frexport analyze` reads."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from frexport.analysis.engine import Options
from frexport.analysis.looks import LOOKS_FILE, gap_seconds
from frexport.cli.serve import parse_urls
from frexport.config import ConfigError, WorkerServers
from frexport.files import atomic_write
from frexport.sources.handlers import TRACEBACK_HANDLER
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError
from frexport.sources.worker_server import RankTarget, WorkerServerSource

# the threshold `frexport analyze` decides a hang by, unless told otherwise: two looks closer than it
# cannot show one
STALL_AFTER_DEFAULT = Options().stall_after_s


# Looks one snapshot takes at most: each holds every rank's recorders, and two decide (analysis/looks.py).
MAX_ROUNDS = 10


def run_snapshot(args: argparse.Namespace) -> int:
    if not 1 <= (getattr(args, "rounds", 1) or 1) <= MAX_ROUNDS:
        print(f"frexport snapshot: --rounds {args.rounds}: from 1 to {MAX_ROUNDS} looks (two decide whether a "
              "group moves; each look keeps every rank's recorders)", file=sys.stderr)
        return 2
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
    gap = args.gap if args.gap is not None else STALL_AFTER_DEFAULT
    if rounds > 1 and gap < STALL_AFTER_DEFAULT:
        print(f"frexport snapshot: note: looks {gap:g} s apart cannot show a hang to `frexport analyze` at its "
              f"default stall threshold ({STALL_AFTER_DEFAULT:g} s): analyze it with --stall-after {gap:g}, or "
              f"take the looks with --gap {STALL_AFTER_DEFAULT:g} or more", file=sys.stderr)
    f: list[str] | str  # (for mypy) one look's failures, then each line of them
    if rounds == 1:
        saved, failed, _ = _look(source, targets, args.output, args.stacks, args.output)
        apart = ""
    else:
        # Looks some seconds apart: `analyze` says per group whether any rank moved between them
        # (analysis/looks.py). When each rank was seen is measured here, on this process's monotonic
        # clock, and written down: file times are no clock. Each rank is looked at again no sooner
        # than `gap` after it answered the look before (a look of many ranks takes seconds: spacing
        # the looks' starts alone left the last rank of a slow look 3.1 s apart when 6 were asked).
        saved, failed, seen = [], [], []
        start = time.monotonic()
        answered: dict[int, float] = {}
        for i in range(rounds):
            not_before = {r: start + t + gap for r, t in answered.items()}
            s, f, answered = _look(source, targets, os.path.join(args.output, f"look_{i + 1}"), args.stacks,
                                   args.output, start, not_before)
            saved, failed = s, failed + [f"look {i + 1}: {x}" for x in f]
            seen.append({str(r): round(t, 6) for r, t in answered.items()})
            # the looks' record as they go: a snapshot stopped half way still tells what it saw
            atomic_write(os.path.join(args.output, LOOKS_FILE),
                         json.dumps({"rounds": rounds, "gap_s": gap, "seen_s": seen}, indent=2).encode())
        measured = gap_seconds(args.output)
        apart = f" ({rounds} looks, each rank seen {measured:.1f} s or more apart)" if measured is not None else \
            f" ({rounds} looks; no rank answered two of them)"
    print(f"frexport snapshot: saved {len(saved)} of {len(targets)} ranks into {args.output}{apart}")
    for f in failed:
        print(f"  failed: {f}", file=sys.stderr)
    return 0 if saved else 1


def _look(source: WorkerServerSource, targets, output: str, stacks: bool, top: str, start: float | None = None,
          not_before: dict[int, float] | None = None) -> tuple[list[str], list[str], dict[int, float]]:
    """One round over every rank: (files saved, failures, when each rank answered, seconds since `start`).
    `not_before`: per rank, the monotonic time before which it is not asked. `top`: the snapshot's
    directory, below which nothing is written through a link (files.py)."""
    saved, failed, when = [], [], {}
    for t in targets:
        wait = (not_before or {}).get(t.rank, 0.0) - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            recorders = source.recorders(t)
        except PeerError as exc:
            failed.append(f"rank {t.rank}: {exc.detail}")
            continue
        if start is not None:
            when[t.rank] = time.monotonic() - start
        # A rank is every recorder that holds a group (model/recorders.py): the first at the top, each
        # other one a dump directory of its own (recorder-<name>/), as `frexport analyze` reads one
        # recorder per rank.
        for n, recorder in enumerate(recorders):
            where = output if n == 0 else os.path.join(output, f"recorder-{recorder}")
            name = _fetch_one(source, t, recorder, where, failed, top)
            if name is not None:
                saved.append(os.path.relpath(os.path.join(where, name), output))
        if stacks:
            try:
                atomic_write(os.path.join(output, "stacks", f"rank_{t.rank}.traceback.txt"),
                             source.fetch(t, TRACEBACK_HANDLER), make_dirs=True, within=top)
            except PeerError as exc:
                failed.append(f"rank {t.rank} stacks: {exc.detail}")
            except OSError as exc:
                failed.append(f"rank {t.rank} stacks: not written: {exc}")
    return saved, failed, when


def _fetch_one(source: WorkerServerSource, t: RankTarget, recorder: str, where: str,
               failed: list[str], top: str) -> str | None:
    """One recorder's dump of one rank into `where`: the agent's pickle (it carries stack frames), else
    PyTorch's JSON handler. The file name, or None (said in `failed`)."""
    why = "no handler"  # the last failure's words: the exception itself would hold this frame in a cycle
    pickle_handler, json_handler = source.dump_handlers(t, recorder)
    for handler, filename in ((pickle_handler, f"trace_{t.rank}"), (json_handler, f"trace_{t.rank}.json")):
        try:
            body = source.fetch(t, handler)
        except PeerError as exc:
            why = exc.detail
            if exc.down:
                break
            continue
        try:
            atomic_write(os.path.join(where, filename), body, make_dirs=True, within=top)
        except OSError as exc:  # a link planted in the output directory: never written through
            failed.append(f"rank {t.rank} ({recorder} recorder): not written: {exc}")
            return None
        return filename
    failed.append(f"rank {t.rank} ({recorder} recorder): {why}")
    return None


def _holds_files(path: str) -> bool:
    try:
        return any(True for _ in os.scandir(path))
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True
