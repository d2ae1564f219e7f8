"""`frexport analyze`: load, diagnose, print."""

from __future__ import annotations

import argparse
import io
import os
import sys
from dataclasses import dataclass, replace

from frexport.analysis.engine import Options, analyze
from frexport.analysis.findings import Diagnosis
from frexport.decode.discover import default_locations
from frexport.decode.errors import DecodeError
from frexport.decode.load import load
from frexport.decode.read import DEFAULT_MAX_BYTES, decode_file
from frexport.decode.sandbox import Limits, SandboxPool, SandboxUnavailable
from frexport.export.report import render_json, render_text
from frexport.model.call_site import site_text


def run_analyze(args: argparse.Namespace) -> int:
    paths = list(args.paths)
    if not paths:
        paths = [p for p in default_locations() if _has_files(p)]
        if not paths:
            print("frexport analyze: no DIR given and no dumps in PyTorch's default locations "
                  f"({', '.join(default_locations())})", file=sys.stderr)
            return 2
        print(f"frexport analyze: reading {', '.join(paths)}", file=sys.stderr)
    limits = Limits(require_memory_limit=not getattr(args, "allow_no_memory_limit", False))
    try:
        loaded = load(paths, prefix=args.prefix, workers=args.workers, limits=limits,
                      max_bytes=args.max_file_bytes or DEFAULT_MAX_BYTES, follow_symlinks=args.follow_symlinks)
        if args.raw:
            return _raw(loaded, args, limits)
    except SandboxUnavailable as exc:
        print(f"frexport analyze: cannot bound the decoders' memory: {exc}; refusing to decode untrusted files "
              "without it (--allow-no-memory-limit to go on)", file=sys.stderr)
        return 2
    diagnosis = analyze(loaded.traces, loaded.errors, options=Options(
        stall_after_s=args.stall_after, straggler_lateness_s=args.straggler_ms / 1000))
    diagnosis.notes[:0] = loaded.discovery.notes + loaded.notes
    diagnosis = _filtered(diagnosis, args.selected_ranks, args.pg_filters)
    if args.timeline:
        from frexport.export.timeline import write_timeline

        write_timeline(args.timeline, loaded.traces, diagnosis, args.selected_ranks)
    if args.format == "json":
        print(render_json(diagnosis))
    else:
        sys.stdout.write(render_text(diagnosis, loaded.discovery.skipped, verbose=args.verbose))
    if not diagnosis.ranks:
        if args.format == "text":
            print("frexport analyze: no readable dump in " + ", ".join(paths), file=sys.stderr)
        return 2
    return 0 if diagnosis.verdict == "healthy" else 1


def _has_files(prefix: str) -> bool:
    d, base = os.path.split(prefix)
    try:
        return any(n.startswith(base) for n in os.listdir(d or "."))
    except OSError:
        return False


def _filtered(d: Diagnosis, ranks: set[int] | None, pgs: str | None) -> Diagnosis:
    findings = d.findings
    if ranks:
        findings = [f for f in findings if ranks & set(f.culprit_ranks + f.blocked_ranks)]
    if pgs:
        wanted = {p.strip() for p in pgs.split(",") if p.strip()}
        findings = [f for f in findings if f.pg_name in wanted or f.pg_desc in wanted]
    return replace(d, findings=findings) if findings is not d.findings else d


@dataclass(frozen=True)
class _RawJob:
    """One rank's --raw listing, decoded and rendered in a sandboxed worker (it unpickles)."""

    rank: int
    path: str
    max_bytes: int
    follow_symlinks: bool
    wanted_pgs: frozenset[str]
    verbose: bool


def _raw_rank(job: _RawJob) -> str:
    try:
        dump = decode_file(job.path, job.rank, max_bytes=job.max_bytes, follow_symlinks=job.follow_symlinks)
    except DecodeError as exc:
        return f"rank {job.rank}: {exc}\n"
    out = io.StringIO()
    _raw_lines(out, job, dump)
    return out.getvalue()


def _raw(loaded, args, limits: Limits) -> int:
    """Every selected rank's entries, one line each (torchfrtrace -j style)."""
    wanted_pgs = frozenset(p.strip() for p in (args.pg_filters or "").split(",") if p.strip())
    ranks = sorted(loaded.discovery.by_rank)
    if args.selected_ranks:
        ranks = [r for r in ranks if r in args.selected_ranks]
    jobs = [_RawJob(r, loaded.discovery.by_rank[r][0].path, args.max_file_bytes or DEFAULT_MAX_BYTES,
                    args.follow_symlinks, wanted_pgs, args.verbose) for r in ranks]
    pool = SandboxPool(args.workers, limits)
    out = sys.stdout
    step = max(1, pool.workers * 2)  # a few ranks at a time: output streams, memory stays small
    for i in range(0, len(jobs), step):
        for job, text in zip(jobs[i:i + step], pool.map(_raw_rank, jobs[i:i + step])):
            out.write(f"rank {job.rank}: {text}\n" if isinstance(text, DecodeError) else text)
    if pool.limit_problem:
        print(f"frexport analyze: warning: decoded without a memory limit: {pool.limit_problem}", file=sys.stderr)
    out.write("(* = retired)\n")
    if loaded.errors:
        out.write("unreadable: " + "; ".join(f"{e.file}: {e.error}" for e in loaded.errors) + "\n")
    return 0 if ranks else 2


def _raw_lines(out: io.StringIO, job: _RawJob, dump) -> None:
    wanted_pgs, path, rank = job.wanted_pgs, job.path, job.rank
    out.write(f"rank {rank}: {path} (version {dump.version_text or 'unversioned'}, {dump.format}, "
              f"{len(dump.entries)} entries)\n")
    out.write(f"  {'record':>7} {'group':<16} {'seq':>6} {'p2p':>5} {'op':<22} {'state':<10} "
              f"{'input sizes':<22} {'dtypes':<12} call site\n")
    for e in dump.entries:
        if wanted_pgs and e.pg_name not in wanted_pgs and e.pg_desc not in wanted_pgs:
            continue
        group = f"{e.pg_name}:{e.pg_desc}"[:16]
        state = e.state + ("*" if e.retired else "")
        sizes = str([list(s) for s in e.input_sizes])[:22]
        site = site_text(e.call_site) or ""
        out.write(f"  {e.record_id:>7} {group:<16} {e.collective_seq_id:>6} {e.p2p_seq_id:>5} "
                  f"{e.profiling_name[:22]:<22} {state:<10} {sizes:<22} {'/'.join(e.input_dtypes)[:12]:<12} "
                  f"{site}\n")
        if job.verbose:
            out.writelines(f"        {fr}\n" for fr in e.frames)


