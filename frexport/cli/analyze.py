"""`frexport analyze`: load, diagnose, print."""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from frexport.analysis import report
from frexport.analysis.engine import Options, format_ranks
from frexport.analysis.findings import Diagnosis, Finding
from frexport.analysis.looks import decide, gap_seconds, look_dirs, progress
from frexport.analysis.whereabouts import places
from frexport.cli.analyze_jobs import load_jobs
from frexport.decode import scanned
from frexport.decode.discover import default_locations
from frexport.decode.errors import DecodeError
from frexport.decode.load import Loaded, load
from frexport.decode.read import DEFAULT_MAX_BYTES, decode_file
from frexport.decode.sandbox import Limits, SandboxPool, SandboxUnavailable
from frexport.decode.stacks import callee, read_stack_dir
from frexport.model.call_site import site_text


def run_analyze(args: argparse.Namespace) -> int:
    with _no_cyclic_collection():
        return _analyze(args)


@contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """The command holds the loaded traces until it prints: acyclic data, which the cyclic collector's
    full passes walk again and again as it grows (4096 ranks: 7 passes, 0.63 s of the process's
    2.4 s of CPU, most of it while the decoders still run). What it would find in a whole run is the
    same ~1,000 objects of start-up at any job size, so it stays off until the command ends (and is
    turned back on for a caller in the same process: the tests)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _analyze(args: argparse.Namespace) -> int:
    paths = list(args.paths)
    if not paths:
        paths = [p for p in default_locations() if _has_files(p)]
        if not paths:
            print("frexport analyze: no DIR given and no dumps in PyTorch's default locations "
                  f"({', '.join(default_locations())})", file=sys.stderr)
            return 2
        print(f"frexport analyze: reading {', '.join(paths)}", file=sys.stderr)
    missing = [p for p in paths if not os.path.exists(p) and not _has_files(p)]
    if missing:  # a typo must not read as "no dumps" or, with other paths, as a smaller job
        for p in missing:
            print(f"frexport analyze: {p}: no such file or directory (nor files starting with that prefix)",
                  file=sys.stderr)
        return 2
    if (pure := scanned.pure_path_warning()) is not None:
        print(f"frexport analyze: warning: {pure}", file=sys.stderr)
    limits = Limits(require_memory_limit=not getattr(args, "allow_no_memory_limit", False))
    looks = look_dirs(paths[0]) if len(paths) == 1 else []
    try:
        # two looks of one job (`frexport snapshot --rounds 2`) are one job: the last look is analysed
        jobs = [(paths[0], looks[-1:], _load(looks[-1:], args, limits))] if looks else load_jobs(paths, args, limits)
        if isinstance(jobs, str):
            print(f"frexport analyze: {jobs}", file=sys.stderr)
            return 2
        if len(jobs) > 1 and (args.raw or args.timeline):
            print(f"frexport analyze: {len(jobs)} jobs in these dumps ({'; '.join(label for label, _, _ in jobs)}):"
                  " --raw and --timeline take one job's dumps", file=sys.stderr)
            return 2
        for _, _, loaded in jobs:
            problem = _filter_problem(loaded, args.selected_ranks, args.pg_filters)
            if problem and len(jobs) == 1:
                print(f"frexport analyze: {problem}", file=sys.stderr)
                return 2
        if args.raw:
            return _raw(jobs[0][2], args, limits)
    except SandboxUnavailable as exc:
        print(f"frexport analyze: cannot bound the decoders' memory: {exc}; refusing to decode untrusted files "
              "without it (--allow-no-memory-limit to go on)", file=sys.stderr)
        return 2
    results = [_one_job(loaded, job_paths, args, limits, looks) for _, job_paths, loaded in jobs]
    if args.format == "json":
        docs = [report.report_json(d, where) | ({"paths": job_paths} if len(jobs) > 1 else {})
                for (d, where), (_, job_paths, _) in zip(results, jobs)]
        print(json.dumps(docs[0] if len(docs) == 1 else {"jobs": docs}, indent=2))
    for i, ((diagnosis, _), (label, _, loaded)) in enumerate(zip(results, jobs)):
        if args.format == "text":
            if len(jobs) > 1:
                sys.stdout.write(f"{'' if i == 0 else chr(10)}job {i + 1} of {len(jobs)}: {label}\n")
            sys.stdout.write(report.render_text(diagnosis, loaded.discovery.skipped, verbose=args.verbose))
    codes = []
    for (diagnosis, _), (label, _, _) in zip(results, jobs):
        if not diagnosis.ranks:
            if args.format == "text":
                print("frexport analyze: no readable dump in " + label, file=sys.stderr)
            codes.append(2)
        else:
            codes.append(0 if diagnosis.verdict == "healthy" else 1)
    return max(codes)


def _one_job(loaded: Loaded, paths: list[str], args: argparse.Namespace, limits: Limits,
             looks: list[str]) -> tuple[Diagnosis, dict[int, str]]:
    options = Options(stall_after_s=args.stall_after, straggler_lateness_s=args.straggler_ms / 1000)
    if looks:  # `frexport snapshot --rounds 2`: the last look, decided by what moved since the one before
        first = _load(looks[-2:-1], args, limits)
        diagnosis, where = diagnose(loaded, looks[-1:], options)
        before = places(read_stack_dir(looks[-2])[0])
        still = frozenset(r for r, p in where.items() if before.get(r) == p)  # stacks that did not move
        diagnosis = decide(diagnosis, progress(first.traces, loaded.traces), gap_seconds(args.paths[0]),
                           options.stall_after_s, still)
    else:
        diagnosis, where = diagnose(loaded, paths, options)
    diagnosis = _filtered(diagnosis, args.selected_ranks, args.pg_filters)
    if args.timeline:
        from frexport.export.timeline import write_timeline

        write_timeline(args.timeline, loaded.traces, diagnosis, args.selected_ranks)
    return diagnosis, where


def _load(paths: list[str], args: argparse.Namespace, limits: Limits) -> Loaded:
    return load(paths, prefix=args.prefix, workers=args.workers, limits=limits,
                max_bytes=args.max_file_bytes or DEFAULT_MAX_BYTES, follow_symlinks=args.follow_symlinks)


def diagnose(loaded: Loaded, paths: list[str], options: Options) -> tuple[Diagnosis, dict[int, str]]:
    """The analysis of what was loaded, with the stacks the directories hold (analysis/report.py: the
    same for `analyze` and evidence bundles)."""
    found = loaded.stacks_beside(paths)
    return report.diagnose(loaded.traces, loaded.errors, loaded.discovery.notes + loaded.notes, found.threads,
                           found.calls, options, callee, loaded.logs_beside(paths))


def _has_files(prefix: str) -> bool:
    d, base = os.path.split(prefix)
    try:
        return any(n.startswith(base) for n in os.listdir(d or "."))
    except OSError:
        return False


def _pg_names(pgs: str | None) -> set[str]:
    return {p.strip() for p in (pgs or "").split(",") if p.strip()}


def _filter_problem(loaded: Loaded, ranks: set[int] | None, pgs: str | None) -> str | None:
    """A filter that matches nothing is a usage error naming what exists: an empty report under a
    mistyped filter reads as a healthy job."""
    known_ranks = set(loaded.discovery.by_rank) | {t.rank for t in loaded.traces}
    if ranks and known_ranks and not ranks & known_ranks:
        return (f"--selected-ranks {format_ranks(ranks)}: no such rank in the dumps "
                f"(ranks: {format_ranks(known_ranks)})")
    wanted = _pg_names(pgs)
    groups = {(g.pg_name, g.pg_desc) for t in loaded.traces for g in t.groups.values()}
    if wanted and groups and not any(name in wanted or desc in wanted for name, desc in groups):
        shown = ", ".join(f"{n} ({d})" if d else n for n, d in sorted(groups))
        return f"--pg-filters {pgs}: no such process group in the dumps (groups: {shown})"
    return None


def _filtered(d: Diagnosis, ranks: set[int] | None, pgs: str | None) -> Diagnosis:
    """Findings outside the filter are hidden from the list, not from the verdict."""
    wanted = _pg_names(pgs)

    def shown(f: Finding) -> bool:
        if ranks and not ranks & set(f.culprit_ranks + f.blocked_ranks):
            return False
        return not wanted or f.pg_name in wanted or f.pg_desc in wanted

    if not ranks and not wanted:
        return d
    return replace(d, findings=[f for f in d.findings if shown(f)],
                   hidden=[f for f in d.findings if not shown(f)])


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
    wanted_pgs = frozenset(_pg_names(args.pg_filters))
    ranks = sorted(loaded.discovery.by_rank)
    if args.selected_ranks:
        ranks = [r for r in ranks if r in args.selected_ranks]
    jobs = [_RawJob(r, loaded.discovery.by_rank[r][0].path, args.max_file_bytes or DEFAULT_MAX_BYTES,
                    args.follow_symlinks, wanted_pgs, args.verbose) for r in ranks]
    pool: SandboxPool[_RawJob, str] = SandboxPool(args.workers, limits)
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


