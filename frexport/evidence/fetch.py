"""What the evidence stage asks of the ranks, and what their answers become.

Everything a bundle needs is asked at once through the source's `HandlerFetcher`
(sources/handlers.py) within one deadline, so an unresponsive handler costs at most that deadline.
The answers are split into raw pickles (rank -> bytes) and stacks (rank -> {kind: text}); a failed
answer leaves no file (the manifest lists what is missing), never a file of errors.
"""

from __future__ import annotations

from typing import Any

from frexport import logs
from frexport.model.dump import DEFAULT_RECORDER, RankDump
from frexport.sources.handlers import (
    DUMP_FILE_HANDLER,
    PICKLE_HANDLER,
    PYSPY_HANDLER,
    STACK_HANDLERS,
    TRACEBACK_HANDLER,
    Fetched,
    HandlerFetcher,
)

Raw = dict[int, bytes]  # rank -> its recorder's pickle, with frames
Stacks = dict[int, dict[str, str]]  # rank -> {"traceback": text, "pyspy_dump": text}


def pod_wanted(fetcher: HandlerFetcher[Any], dumps: dict[int, RankDump], focus: set[int], pyspy: bool,
               max_stacks: int) -> list[tuple[Any, str]]:
    """A pod's bundle: every rank's pickle, the stacks of the ranks in focus, and torch 2.15's dump file."""
    targets = {t.rank: t for t in fetcher.targets()}
    # A rank read from one recorder: that recorder's pickle (its stack frames). One read from several
    # (model/recorders.py) is written from its merged dump instead, without frames: one file per rank.
    recorders = {r: d.recorders or (DEFAULT_RECORDER,) for r, d in dumps.items()}
    wanted = [(targets[r], f"{PICKLE_HANDLER}?backend={recorders[r][0]}") for r in sorted(dumps)
              if r in targets and len(recorders[r]) == 1]
    # culprits first: their stacks matter most when only a few are fetched
    for r in sorted(focus & set(targets))[:max_stacks]:
        listed = fetcher.handlers(r)
        for handler in STACK_HANDLERS:
            if handler == PYSPY_HANDLER and not pyspy:
                continue
            if handler in listed or (not listed and handler == TRACEBACK_HANDLER):
                wanted.append((targets[r], handler))
    # torch 2.15 writes a rank's pickle where it dumps on a timeout (the dump directory frexport
    # watches): asked for the culprits and blocked ranks, for what the recorder holds on its side
    wanted += [(targets[r], f"{DUMP_FILE_HANDLER}?backend={rec}") for r in sorted(focus & set(targets))
               if DUMP_FILE_HANDLER in fetcher.handlers(r) for rec in recorders.get(r, ())]
    return wanted


def job_wanted(fetcher: HandlerFetcher[Any], focus: list[int], pyspy: bool) -> list[tuple[Any, str]]:
    """The job's bundle: the pickle and stacks of each rank in focus, where its server lists them."""
    targets = {t.rank: t for t in fetcher.targets()}
    wanted = []
    for r in focus:
        if r not in targets:
            continue
        listed = fetcher.handlers(r)
        if PICKLE_HANDLER in listed:
            wanted.append((targets[r], PICKLE_HANDLER))
        for handler in STACK_HANDLERS:
            if handler in listed and (handler != PYSPY_HANDLER or pyspy):
                wanted.append((targets[r], handler))
    return wanted


def split(got: Fetched, say_failures: str | None = None) -> tuple[Raw, Stacks]:
    """Answers -> (raw pickles, stacks); failures are said in the log under `say_failures` if given.
    (A dump file's answer is the file it wrote on the rank's side: nothing for the bundle.)"""
    raw: Raw = {}
    stacks: Stacks = {}
    for (rank, handler), body in got.items():
        if not isinstance(body, bytes):
            if say_failures:
                logs.get().warning("%s: rank %d's %s: %s", say_failures, rank, handler, getattr(body, "detail", body))
        elif handler.startswith(PICKLE_HANDLER):
            raw[rank] = body
        elif handler in STACK_HANDLERS:
            stacks.setdefault(rank, {})[STACK_HANDLERS[handler]] = body.decode(errors="replace")
    return raw, stacks
