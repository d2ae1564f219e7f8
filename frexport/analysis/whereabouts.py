"""Where a rank is now, from its Python stack: the innermost frame of the user's code in the thread
that runs the training loop, and whether it is inside a torch.distributed call.

The recorder says which collective a rank last issued; only the stack says what it does instead
(a data loader, a sleep, a deadlock), which is the first thing an on-call engineer looks for.
`user_frame` is the one rule for where a rank is now: the analysis' "now:" lines, `frexport
analyze`'s `ranks_now`, the pod's and the job view's evidence bundles all take it from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from frexport.analysis.findings import Finding, format_ranks
from frexport.model.call_site import Frame, Threads, frame_text, is_library_frame

MAX_BLOCKED = 3  # blocked ranks described per finding: they mostly share one place
# frexport's agent runs in the trainer (copied in as <dir>/frexport/agent/ or installed): its threads
# poll and dump, they are never where training is, even where no thread runs `<module>` (python -m)
_AGENT = re.compile(r"[/\\]frexport[/\\]agent[/\\]")


def is_users(frame: Frame) -> bool:
    """A frame of the user's code: not a library's (model/call_site.py), not frexport's agent."""
    return not is_library_frame(frame) and _AGENT.search(frame.filename) is None


def training_thread(threads: Threads) -> tuple[Frame, ...] | None:
    """The main thread runs the script (`<module>` outermost); else the first with user code."""
    for t in threads:
        if t[-1].name == "<module>":
            return t
    return next((t for t in threads if any(map(is_users, t))), None)


def user_frame(threads: Threads) -> tuple[tuple[Frame, ...], int] | None:
    """Where a rank is now: its training thread and the index of that thread's innermost user frame
    (the frames inside it are the library calls it waits in); None without one."""
    frames = training_thread(threads)
    i = next((k for k, f in enumerate(frames or ()) if is_users(f)), None)
    return (frames, i) if frames is not None and i is not None else None


def now_frame(threads: Threads) -> Frame | None:
    """The user's frame a rank is on now (see `user_frame`)."""
    found = user_frame(threads)
    return found[0][found[1]] if found is not None else None


def distributed_call(frames: tuple[Frame, ...], user_index: int) -> str | None:
    """The torch.distributed function the user's frame called, if the thread is inside one."""
    inner = frames[:user_index]
    c10d = [f for f in inner if f.filename.endswith("distributed_c10d.py")]
    if c10d:
        return c10d[-1].name  # the outermost: the API the user called (all_reduce, barrier, ...)
    dist = [f for f in inner if "/torch/distributed/" in f.filename or f.filename.startswith("torch/distributed/")]
    return dist[-1].name if dist else None


def place(threads: Threads, callee: Callable[[Frame], str | None] = lambda f: None) -> str | None:
    """'train.py:8 load_batch (time.sleep), outside any collective', or None without a user frame."""
    found = user_frame(threads)
    if found is None:
        return None
    frames, i = found
    text = frame_text(frames[i])
    inside = distributed_call(frames, i)
    if inside:
        return f"{text}, inside torch.distributed {inside}"
    called = callee(frames[i])  # a C function (time.sleep) has no frame of its own: the line says it
    return f"{text}{f' ({called})' if called else ''}, outside any collective"


def places(stacks: dict[int, Threads], callee: Callable[[Frame], str | None] = lambda f: None) -> dict[int, str]:
    return {r: p for r, threads in stacks.items() if (p := place(threads, callee)) is not None}


def describe(ranks: list[int], where: dict[int, str]) -> list[str]:
    """One line per distinct place: 'rank 2 is in ...', 'ranks 0, 1, 3 are in ...'."""
    by_place: dict[str, list[int]] = {}
    for r in ranks:
        if r in where:
            by_place.setdefault(where[r], []).append(r)
    return [f"rank {rs[0]} is in {p}" if len(rs) == 1 else f"ranks {format_ranks(rs)} are in {p}"
            for p, rs in by_place.items()]


def with_whereabouts(findings: list[Finding], where: dict[int, str]) -> list[Finding]:
    """Each root cause with where its culprits, and a few of the ranks it blocks, are now."""
    if not where:
        return findings
    out = []
    for f in findings:
        if f.root_cause:
            lines = describe(list(f.culprit_ranks), where)
            lines += describe([r for r in f.blocked_ranks if r in where][:MAX_BLOCKED], where)
            if lines:
                f = replace(f, details=f.details + tuple(f"now: {line}" for line in lines))
        out.append(f)
    return out
