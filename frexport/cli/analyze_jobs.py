"""`frexport analyze` given several paths: which dumps are one job (frexport/analysis/jobs.py decides)."""

from __future__ import annotations

import argparse
import os
import sys

from frexport.analysis.jobs import Ambiguous, Source
from frexport.analysis.jobs import describe as describe_job
from frexport.analysis.jobs import split as split_jobs
from frexport.decode.discover import RECORDER_DIR, Discovery
from frexport.decode.load import Loaded, load_sources
from frexport.decode.read import DEFAULT_MAX_BYTES
from frexport.decode.sandbox import Limits
from frexport.model.recorders import merge_traces, other_recorder


def load_jobs(paths: list[str], args: argparse.Namespace, limits: Limits) -> list[tuple[str, list[str], Loaded]] | str:
    """(label, paths, what was loaded) per job, or why the dumps cannot be told apart into jobs.
    One path: one job, as it always was. Several: each directory (or one directory's files, as a
    shell glob gives them) loaded on its own, then grouped by what the dumps say (analysis/jobs.py).
    A directory's `recorder-<name>/` subdirectories (`frexport snapshot`, evidence bundles: the ranks'
    other recorders) are read with it, each rank one trace of all its recorders."""
    load_args = dict(prefix=args.prefix, workers=args.workers, limits=limits,
                     max_bytes=args.max_file_bytes or DEFAULT_MAX_BYTES, follow_symlinks=args.follow_symlinks)
    groups = _source_paths(paths)
    recorder_dirs = [_recorder_dirs(g) for g in groups]
    loaded_all = load_sources(groups + [[d] for ds in recorder_dirs for d in ds], **load_args)
    loaded, extra = loaded_all[:len(groups)], iter(loaded_all[len(groups):])
    loaded = [with_recorders(ld, [next(extra) for _ in ds]) for ld, ds in zip(loaded, recorder_dirs)]
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
        merged = Loaded([t for s in job.sources for t in s.traces], [e for p in parts for e in p.errors],
                        _merged_discovery([p.discovery for p in parts]), [n for p in parts for n in p.notes])
        out.append((describe_job(job), [p for s in job.sources for p in groups[s.key]], merged))
    if len(out) > 1:
        print(f"frexport analyze: {len(out)} jobs in these dumps, each analysed on its own", file=sys.stderr)
    return out


def _recorder_dirs(group: list[str]) -> list[str]:
    """A directory's `recorder-<name>/` subdirectories (decode/discover.py RECORDER_DIR)."""
    if len(group) != 1 or not os.path.isdir(group[0]):
        return []
    try:
        names = sorted(n for n in os.listdir(group[0]) if n.startswith(RECORDER_DIR))
    except OSError:
        return []
    return [os.path.join(group[0], n) for n in names if os.path.isdir(os.path.join(group[0], n))]


def with_recorders(main: Loaded, others: list[Loaded]) -> Loaded:
    """`main` with its ranks' other recorders read in: each rank one trace of all its recorders (a rank
    only one of them holds, as it is). A trace that shares a group with the rank's own is not another
    recorder: it is left out, and said so."""
    if not others:
        return main
    by_rank = {t.rank: i for i, t in enumerate(main.traces)}
    traces, notes = list(main.traces), list(main.notes)
    for other in others:
        for t in other.traces:
            i = by_rank.get(t.rank)
            if i is None:
                by_rank[t.rank] = len(traces)
                traces.append(t)
            elif other_recorder(traces[i], t):
                traces[i] = merge_traces(traces[i], t)
            else:
                notes.append(f"rank {t.rank}: {t.source} left out: it records groups {traces[i].source} records too")
    discovery = _merged_discovery([main.discovery] + [o.discovery for o in others])
    discovery.notes = [n for n in discovery.notes if not n.startswith(RECORDER_DIR)]  # they were read
    return Loaded(traces, main.errors + [e for o in others for e in o.errors], discovery,
                  notes + [n for o in others for n in o.notes])


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


def _merged_discovery(parts: list[Discovery]) -> Discovery:
    d = Discovery()
    for p in parts:
        for rank, files in p.by_rank.items():
            d.by_rank.setdefault(rank, files)
        d.skipped += p.skipped
        d.notes += p.notes
    return d
