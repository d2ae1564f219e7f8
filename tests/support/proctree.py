"""Kill a process and every descendant. torchrun starts each worker in a session of its own, so
killing torchrun's process group would leave the workers running. Benchmarks use the same walk
to sum a process tree's memory."""

from __future__ import annotations

import os
import signal

# /proc/<pid>/task/<tid>/children is cheap where the kernel has it; else one scan of /proc.
_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def _children_by_scan() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    table = None if _HAVE_CHILDREN_FILE else _children_by_scan()
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()) if table is None else table.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
