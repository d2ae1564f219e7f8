"""Load a dump directory for analysis: discover files, decode them in parallel, sandboxed.

Each rank is decoded in a limited worker process (see sandbox.py) straight into
its compact `RankTrace`, so the parent never holds millions of entry objects.
A rank with several files (a JSON twin, an older attempt) uses the newest dump by
its content, never by file time or name; every unreadable file is reported, none
stops the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from frexport.decode.discover import RECORDER_DIR, Discovery, discover
from frexport.decode.errors import DecodeError
from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.json_decode import trace as trace_from_json
from frexport.decode.normalize import normalize
from frexport.decode.rank_logs import read_log_dirs
from frexport.decode.read import DEFAULT_MAX_BYTES, decode_raw, read_checked, sniff_format
from frexport.decode.sandbox import Limits, SandboxPool
from frexport.decode.scanned import trace_from_pickle
from frexport.decode.stacks import StackFiles, read_stack_dirs
from frexport.model.dump import InputError
from frexport.model.rank_trace import RankTrace, build_rank_trace
from frexport.model.recorders import merge_traces, other_recorder


@dataclass
class Loaded:
    traces: list[RankTrace]
    errors: list[InputError]
    discovery: Discovery
    notes: list[str] = field(default_factory=list)

    def stacks_beside(self, paths: list[str]) -> StackFiles:
        """The Python stacks beside these dumps (decode/stacks.py finds them by content): what was read
        as a rank's stack leaves the list of files skipped as no dump, and what could not be placed is
        noted."""
        found = read_stack_dirs(paths)
        self.discovery.skipped = [(p, why) for p, why in self.discovery.skipped if p not in found.read]
        self.notes.extend(found.notes)
        return found

    def logs_beside(self, paths: list[str]) -> dict[int, str]:
        """rank -> the last lines it printed, where a bundle kept them beside these dumps
        (`logs/rank_<r>.log`, decode/rank_logs.py); those files leave the list of files skipped."""
        found = read_log_dirs(paths)
        self.discovery.skipped = [(p, why) for p, why in self.discovery.skipped
                                  if os.path.normpath(p) not in found.read]
        return found.tails


@dataclass(frozen=True)
class _Task:
    rank: int
    paths: tuple[str, ...]
    max_bytes: int
    follow_symlinks: bool

    @property
    def path(self) -> str:
        return self.paths[0]


_MAX_CANDIDATES = 8  # files decoded per rank to find its newest dump (attempts, twins, older copies)


def _load_rank(task: _Task) -> tuple[RankTrace | None, list[DecodeError]]:
    """The rank's newest dump by its content: the newest event its recorder wrote, then the pickle
    (richer: frames) over its JSON twin. Never by file time or name: copies, checkouts and `touch`
    set those (issue 27); discovery's order only says which to try first."""
    errors: list[DecodeError] = []
    best: RankTrace | None = None
    for path in task.paths[:_MAX_CANDIDATES]:
        trace, failed = _load_one(path, task)
        errors.extend(failed)
        if trace is not None and (best is None or _content_key(trace) > _content_key(best)):
            best = trace
    return best, errors


def _content_key(t: RankTrace) -> tuple:
    return (t.last_event_ns or t.last_created_ns or 0, t.format == "pickle")


def _load_one(path: str, task: _Task) -> tuple[RankTrace | None, list[DecodeError]]:
    try:
        data, st = read_checked(path, task.max_bytes, task.follow_symlinks)
        fmt = sniff_format(data[:64])
        # the compiled scanner (pickles, where it is built) or the JSON decoder's typed columns where the
        # dump has the common shape; else the plain data, through fast_trace or normalize
        scan = trace_from_pickle if fmt == "pickle" else trace_from_json
        trace = scan(data, path, task.rank, st.st_mtime_ns, st.st_size)
        if trace is not None:
            return trace, []
        raw = decode_raw(data, path, fmt)
        del data  # the bytes are not needed any more: the decoded dump is the bigger of the two
        trace = trace_from_raw(raw, path, fmt, task.rank, st.st_mtime_ns, st.st_size)
        if trace is None:  # not the common shape: the general path
            trace = build_rank_trace(normalize(raw, path, fmt, rank=task.rank, dumped_at_ns=st.st_mtime_ns,
                                               size_bytes=st.st_size, keep_frames=False))
    except DecodeError as exc:
        return None, [exc]
    return trace, []


def load(paths: list[str], prefix: str | None = None, workers: int | None = None,
         max_bytes: int = DEFAULT_MAX_BYTES, limits: Limits | None = None, follow_symlinks: bool = False) -> Loaded:
    return load_sources([paths], prefix, workers, max_bytes, limits, follow_symlinks)[0]


def load_sources(sources: list[list[str]], prefix: str | None = None, workers: int | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, limits: Limits | None = None,
                 follow_symlinks: bool = False) -> list[Loaded]:
    """Each source (a list of paths) discovered on its own, so that one source's rank 0 never hides
    another's (`analyze dirA dirB` of two jobs); all decoded by one pool. A directory's `recorder-<name>/`
    subdirectories (`frexport snapshot`, evidence bundles: the ranks' other recorders) are read with it,
    each rank one trace of all its recorders."""
    extra = [_recorder_dirs(paths) for paths in sources]
    loaded = _load_each(sources + [[d] for ds in extra for d in ds], prefix, workers, max_bytes, limits,
                        follow_symlinks)
    rest = iter(loaded[len(sources):])
    return [with_recorders(one, [next(rest) for _ in ds]) for one, ds in zip(loaded, extra)]


def _recorder_dirs(paths: list[str]) -> list[str]:
    """A directory's `recorder-<name>/` subdirectories (discover.py RECORDER_DIR)."""
    if len(paths) != 1 or not os.path.isdir(paths[0]):
        return []
    try:
        names = sorted(n for n in os.listdir(paths[0]) if n.startswith(RECORDER_DIR))
    except OSError:
        return []
    return [os.path.join(paths[0], n) for n in names if os.path.isdir(os.path.join(paths[0], n))]


def with_recorders(main: Loaded, others: list[Loaded]) -> Loaded:
    """`main` with its ranks' other recorders read in: each rank one trace of all its recorders (a rank
    only one of them holds, as it is). Two copies of one recorder (torch's dump file beside a scrape):
    the one that carries stack frames, and a note."""
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
                kept, dropped = (t, traces[i]) if len(t.call_sites) > len(traces[i].call_sites) else (traces[i], t)
                traces[i] = kept
                notes.append(f"rank {t.rank}: {dropped.source} left out: it records the groups {kept.source} "
                             "records" + (", which carries stack frames" if kept.call_sites else ""))
    discovery = merged_discovery([main.discovery] + [o.discovery for o in others])
    discovery.notes = [n for n in discovery.notes if not n.startswith(RECORDER_DIR)]  # they were read
    return Loaded(traces, main.errors + [e for o in others for e in o.errors], discovery,
                  notes + [n for o in others for n in o.notes])


def merged_discovery(parts: list[Discovery]) -> Discovery:
    """What several sources' discovery found, as one (a rank's files: the first source's)."""
    d = Discovery()
    for p in parts:
        for rank, files in p.by_rank.items():
            d.by_rank.setdefault(rank, files)
        d.skipped += p.skipped
        d.notes += p.notes
    return d


def _load_each(sources: list[list[str]], prefix: str | None, workers: int | None, max_bytes: int,
               limits: Limits | None, follow_symlinks: bool) -> list[Loaded]:
    found = [discover(paths, prefix=prefix, follow_symlinks=follow_symlinks) for paths in sources]
    tasks = [(i, _Task(rank, tuple(f.path for f in files), max_bytes, follow_symlinks))
             for i, d in enumerate(found) for rank, files in d.by_rank.items()]
    out = [Loaded([], [], d) for d in found]
    pool: SandboxPool[_Task, tuple[RankTrace | None, list[DecodeError]]] = SandboxPool(workers, limits or Limits())
    for (i, task), result in zip(tasks, pool.map(_load_rank, [t for _, t in tasks])):
        loaded = out[i]
        if isinstance(result, DecodeError):
            loaded.errors.append(InputError(task.path, result.detail, task.rank))
            continue
        trace, failed = result
        # with the rank its name carries: gloo dumps do not list the world, so without it an unreadable
        # highest rank made the world look one smaller, and healthy
        loaded.errors.extend(InputError(e.source, e.detail, task.rank) for e in failed)
        if trace is not None:
            loaded.traces.append(trace)
            if failed:
                loaded.notes.append(f"rank {task.rank}: used {trace.source} because {failed[0].source} is unreadable")
    if pool.limit_problem:
        for loaded in out:
            loaded.notes.append(f"decoded WITHOUT a memory limit (--allow-no-memory-limit): {pool.limit_problem}")
    return out
