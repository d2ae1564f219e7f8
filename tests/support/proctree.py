"""Kill a process and every descendant. torchrun starts each worker in a session of its own, so
killing torchrun's process group would leave the workers running."""

from __future__ import annotations

import os
import signal


def descendants(pid: int) -> list[int]:
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
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
