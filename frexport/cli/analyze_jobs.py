"""`frexport analyze` given several paths: which dumps are one job (frexport/analysis/jobs.py decides)."""

from __future__ import annotations

import argparse
import os
import sys

from frexport.analysis.jobs import Ambiguous, Source
from frexport.analysis.jobs import describe as describe_job
from frexport.analysis.jobs import split as split_jobs
from frexport.decode.load import Loaded, load_sources, merged_discovery
from frexport.decode.read import DEFAULT_MAX_BYTES
from frexport.decode.sandbox import Limits
from frexport.model.dump import InputError


def load_jobs(paths: list[str], args: argparse.Namespace, limits: Limits) -> list[tuple[str, list[str], Loaded]] | str:
    """(label, paths, what was loaded) per job, or why the dumps cannot be told apart into jobs.
    One path: one job, as it always was. Several: each directory (or one directory's files, as a
    shell glob gives them) loaded on its own (with its `recorder-<name>/` subdirectories: decode/load.py),
    then grouped by what the dumps say (analysis/jobs.py)."""
    load_args = dict(prefix=args.prefix, workers=args.workers, limits=limits,
                     max_bytes=args.max_file_bytes or DEFAULT_MAX_BYTES, follow_symlinks=args.follow_symlinks)
    groups = _source_paths(paths)
    loaded = load_sources(groups, **load_args)
    if len(groups) == 1:
        return [(", ".join(paths), paths, loaded[0])]
    labels = [", ".join(g) if len(g) == 1 else os.path.join(os.path.dirname(g[0]) or ".", "*") for g in groups]
    try:
        found = split_jobs([Source(label, ld.traces, i) for i, (label, ld) in enumerate(zip(labels, loaded))])
    except Ambiguous as exc:
        return str(exc)
    out = []
    for job in found:
        parts = [loaded[s.key] for s in job.sources]
        # the sources' traces as the split left them: a twin of another source's rank dropped, a rank's
        # other recorder merged into its trace
        twice = [InputError(dropped.source, f"claims rank {dropped.rank}, which {kept.source} (from a larger "
                            "source) holds with other records: not read, the analysis rests on the other", dropped.rank)
                 for kept, dropped in job.claimed_twice]
        merged = Loaded([t for s in job.sources for t in s.traces], [e for p in parts for e in p.errors] + twice,
                        merged_discovery([p.discovery for p in parts]), [n for p in parts for n in p.notes])
        out.append((describe_job(job), [p for s in job.sources for p in groups[s.key]], merged))
    if len(out) > 1:
        print(f"frexport analyze: {len(out)} jobs in these dumps, each analysed on its own", file=sys.stderr)
    return out


def _source_paths(paths: list[str]) -> list[list[str]]:
    """Directories and prefixes one source each; files grouped by their directory (a glob's expansion)."""
    out: list[list[str]] = []
    by_dir: dict[str, list[str]] = {}
    for p in paths:
        if os.path.isfile(p):
            d = os.path.dirname(os.path.abspath(p))
            if d not in by_dir:
                by_dir[d] = []
                out.append(by_dir[d])
            by_dir[d].append(p)
        else:
            out.append([p])
    return out
