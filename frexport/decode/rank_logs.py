"""Read the last lines a rank printed: the agent's ring files (`<sockets dir>/logs/rank-<R>.log` and
its predecessor `.log.1`, written by frexport/agent/logtee.py) for a live bundle, and a bundle's
`logs/rank_<r>.log` for `frexport analyze`.

Both sit on volumes others write to, so they are read as hostile: every name opened without following
links (O_NOFOLLOW, under a directory opened the same way), only regular files, only the last
TAIL_BYTES of each (a file of any size costs one seek), bytes that are not UTF-8 replaced, and at most
TAIL_LINES lines kept.
"""

from __future__ import annotations

import os
import re
import stat
from typing import NamedTuple

TAIL_BYTES = 64 << 10
TAIL_LINES = 300
MAX_RANKS = 4096  # log files read per bundle directory
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_BUNDLE_NAME = re.compile(r"^rank_(\d{1,7})\.log$")


def ring_name(rank: int) -> str:
    return f"rank-{rank}.log"


def ring_tail(logs_dir: str, rank: int) -> str | None:
    """The last lines of rank `rank`'s ring in `logs_dir` (the current file, and the rotated one
    before it where the current one holds less than TAIL_BYTES), or None where there is none."""
    try:
        dfd = os.open(logs_dir, _DIR)
    except OSError:
        return None
    try:
        newest = _tail(dfd, ring_name(rank), TAIL_BYTES)
        if newest is None:
            return None
        room = TAIL_BYTES - len(newest[0])
        older = _tail(dfd, ring_name(rank) + ".1", room) if room > 0 and not newest[1] else None
        data, cut = (older[0] + newest[0], older[1]) if older is not None else newest
        return _lines(data, cut)
    finally:
        os.close(dfd)


class LogFiles(NamedTuple):
    tails: dict[int, str]  # rank -> its last lines
    read: set[str]  # the paths read


def read_log_dirs(paths: list[str]) -> LogFiles:
    """The ranks' last lines a bundle kept (`<dir>/logs/rank_<r>.log`) in each directory among
    `paths` (files are skipped), later ones winning."""
    out = LogFiles({}, set())
    for p in paths:
        folder = os.path.join(p, "logs")
        if not os.path.isdir(p):
            continue
        try:
            dfd = os.open(folder, _DIR)
        except OSError:
            continue
        try:
            for name in sorted(os.listdir(dfd))[:MAX_RANKS]:
                m = _BUNDLE_NAME.match(name)
                got = _tail(dfd, name, TAIL_BYTES) if m else None
                if m and got is not None:
                    out.tails[int(m[1])] = _lines(*got)
                    out.read.add(os.path.normpath(os.path.join(folder, name)))
        finally:
            os.close(dfd)
    return out


def _tail(dfd: int, name: str, limit: int) -> tuple[bytes, bool] | None:
    """(the last `limit` bytes of a regular file, whether it holds more before them), or None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(0, st.st_size - limit)
        chunks, want = [], st.st_size - start
        while want > 0:
            data = os.pread(fd, want, start)
            if not data:
                break
            chunks.append(data)
            start += len(data)
            want -= len(data)
        data = b"".join(chunks)
        return data, len(data) < st.st_size
    except OSError:
        return None
    finally:
        os.close(fd)


def _lines(data: bytes, cut: bool) -> str:
    """The last TAIL_LINES lines, starting at a line's beginning where the read began mid-file."""
    if cut:
        data = data[data.find(b"\n") + 1:]
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")  # only newlines: a progress bar's carriage returns stay in their line
    if lines and not lines[-1]:
        lines.pop()
    return "".join(line + "\n" for line in lines[-TAIL_LINES:])
