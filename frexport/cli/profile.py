"""`frexport profile`: a short PyTorch profiler trace of chosen ranks now, into a directory Perfetto opens.

    frexport profile --sockets-dir /shared/frexport --rank 12 --duration 5s OUTDIR
    frexport profile --sockets-dir /shared/frexport --rank 12 --peer 13 OUTDIR   # and the comparison

Every rank named is profiled at the same time (evidence/profiles.py: the agent's `frexport_profile`,
else torch 2.15's `torch_profile`); the agent refuses a rank profiled less than its interval ago
(FREXPORT_AGENT_PROFILE_INTERVAL, 600 s by default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from frexport.analysis.profile_compare import compare, summarize
from frexport.cli.serve import parse_urls
from frexport.config import ConfigError, WorkerServers, _duration
from frexport.decode.profile_trace import TraceError, read_trace
from frexport.evidence.profiles import PROFILES_META, profile_file, profile_meta, take
from frexport.files import atomic_write
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource

MAX_DURATION_S = 30.0


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="take a short PyTorch profiler trace of ranks now (Perfetto opens it)",
                       description="Profile ranks' training threads for a few seconds through their worker servers "
                                   "(frexport.agent's frexport_profile, else PyTorch's torch_profile) and write "
                                   "OUTDIR/profiles/rank_<r>.pt.trace.json(.gz).")
    p.add_argument("output", metavar="OUTDIR")
    p.add_argument("--sockets-dir", help="directory of rank-<N>.sock worker-server sockets")
    p.add_argument("--url", action="append", default=[], metavar="RANK=URL")
    p.add_argument("--rank", type=int, action="append", required=True, help="a rank to profile (repeatable)")
    p.add_argument("--peer", type=int, default=None,
                   help="also profile this rank and compare the first --rank with it (time a step per function)")
    p.add_argument("--duration", default="5s", help="how long to profile: 500ms, 5s (at most 30 s; default 5s)")


def run_profile(args: argparse.Namespace) -> int:
    try:
        duration = _duration(args.duration, "--duration")
        urls = parse_urls(args.url)
    except ConfigError as exc:
        print(f"frexport profile: {exc}", file=sys.stderr)
        return 2
    if not 0 < duration <= MAX_DURATION_S:
        print(f"frexport profile: --duration must be above 0 and at most {MAX_DURATION_S:g} s", file=sys.stderr)
        return 2
    if not args.sockets_dir and not urls:
        print("frexport profile: give --sockets-dir or --url", file=sys.stderr)
        return 2
    ranks = list(dict.fromkeys(args.rank + ([args.peer] if args.peer is not None else [])))
    source = WorkerServerSource(HealthRegistry(), WorkerServers(sockets_dir=args.sockets_dir, urls=urls))
    known = {t.rank for t in source.targets()}
    missing = [r for r in ranks if r not in known]
    if missing:
        print(f"frexport profile: no worker server of rank {', '.join(map(str, missing))} "
              f"(found: {', '.join(map(str, sorted(known))) or 'none'})", file=sys.stderr)
        return 2
    source.collect()  # lists each rank's handlers: which profile handler it has
    got = take(source, ranks, duration)
    source.stop()
    os.makedirs(os.path.join(args.output, "profiles"), exist_ok=True)
    status = 0
    summaries = {}
    for rank, (handler, body) in sorted(got.items()):
        if not isinstance(body, bytes):
            print(f"rank {rank}: no profile: {body}", file=sys.stderr)
            status = 1
            continue
        rel = profile_file(rank, handler)
        atomic_write(os.path.join(args.output, rel), body)
        try:
            summaries[rank] = summarize(rank, read_trace(body))
        except TraceError as exc:
            print(f"rank {rank}: {rel} written, but it is not a readable trace: {exc}", file=sys.stderr)
            status = 1
            continue
        top = sorted(summaries[rank].seconds.items(), key=lambda kv: -kv[1])[:5]
        print(f"rank {rank}: {os.path.join(args.output, rel)} ({handler}; {summaries[rank].steps:g} "
              f"{summaries[rank].unit}); " + ", ".join(f"{n} {t:.3f} s" for n, t in top))
    slow = args.rank[0]
    meta = profile_meta(slow, args.peer, duration, got)
    if args.peer is not None and slow in summaries and args.peer in summaries:
        c = compare(summaries[slow], summaries[args.peer])
        print(c.text())
        meta["comparison"] = c.to_json()
    atomic_write(os.path.join(args.output, PROFILES_META), json.dumps(meta, indent=2).encode())
    return status
