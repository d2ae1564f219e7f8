"""The one parser of native stack dumps: py-spy's `dump --native` and gdb's `thread apply all bt`.

Their text comes from a tool run on a rank's process; it is bounded (MAX_CHARS, frames and threads
per dump) and every line that fits neither layout is skipped, never an error.
"""

from __future__ import annotations

import re

from frexport.model.native_stack import NativeFrame, NativeStacks, NativeThread

MAX_CHARS = 4 << 20
MAX_THREADS = 1024
MAX_FRAMES = 512

_PYSPY_THREAD = re.compile(r'^Thread (?:0x)?([0-9a-fA-F]+)(?: \([^)]*\))?: "([^"]*)"', re.M)
_PYSPY_FRAME = re.compile(r"^\s{2,}(.+?) \(([^()]*)\)\s*$")
_PYSPY_PY_WHERE = re.compile(r"^(.+\.py[a-z]?):(\d+)$")
_GDB_THREAD = re.compile(r'^Thread \d+ \(.*?LWP (\d+)\)(?: "([^"]*)")?\):', re.M)
_HEAD_PID = re.compile(r"^# native stacks of rank \d+ \(pid (\d+)\)")
_GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(.*)$")


def parse(text: str, pid: int | None = None) -> NativeStacks:
    """`text` as one of the two tools wrote it; `pid` tells the main thread where the tool does not."""
    text = text[:MAX_CHARS]
    head = _HEAD_PID.match(text)  # the sidecar's first line (evidence/native.py) names the pid
    if pid is None and head:
        pid = int(head.group(1))
    if _GDB_THREAD.search(text):
        return NativeStacks("gdb", tuple(_gdb(text, pid)))
    return NativeStacks("py-spy", tuple(_pyspy(text, pid)))


def _pyspy(text: str, pid: int | None) -> list[NativeThread]:
    threads: list[NativeThread] = []
    head: tuple[int | None, str] | None = None
    frames: list[NativeFrame] = []

    def close() -> None:
        if head is not None and len(threads) < MAX_THREADS:
            tid, name = head
            threads.append(NativeThread(tid, name, name == "MainThread" or (pid is not None and tid == pid),
                                        tuple(frames)))

    for line in text.splitlines():
        m = _PYSPY_THREAD.match(line)
        if m:
            close()
            head, frames = (_int(m.group(1)), m.group(2)), []
            continue
        f = _PYSPY_FRAME.match(line)
        if head is None or not f or len(frames) >= MAX_FRAMES:
            continue
        function, inner = f.group(1).strip(), f.group(2).strip()
        py = _PYSPY_PY_WHERE.match(inner)
        if py:
            frames.append(NativeFrame(function, py.group(1).rsplit("/", 1)[-1], True, inner))
        else:
            frames.append(NativeFrame("" if function.startswith("0x") else function, inner.rsplit("/", 1)[-1]))
    close()
    return threads


def _int(text: str) -> int | None:
    try:
        return int(text) if text.isdecimal() else int(text, 16)
    except ValueError:
        return None


def _gdb(text: str, pid: int | None) -> list[NativeThread]:
    threads: list[NativeThread] = []
    head: tuple[int | None, str, bool] | None = None
    frames: list[NativeFrame] = []

    def close() -> None:
        if head is not None and len(threads) < MAX_THREADS:
            threads.append(NativeThread(head[0], head[1], head[2], tuple(frames)))

    for line in text.splitlines():
        m = _GDB_THREAD.match(line)
        if m:
            close()
            tid = int(m.group(1))
            head, frames = (tid, m.group(2) or "", tid == pid or line.startswith("Thread 1 (")), []
            continue
        f = _GDB_FRAME.match(line)
        if head is None or not f or len(frames) >= MAX_FRAMES:
            continue
        frames.append(_gdb_frame(f.group(1)))
    close()
    return threads


def _gdb_frame(rest: str) -> NativeFrame:
    """`name(signature) (args) from /lib/x.so` or `name (args) at file.c:57` -> its name and library."""
    library = ""
    if " from " in rest:
        rest, library = rest.rsplit(" from ", 1)
    elif " at " in rest:
        rest, where = rest.rsplit(" at ", 1)
        library = where.rsplit(":", 1)[0]
    return NativeFrame(_symbol(rest.strip()), library.strip().rsplit("/", 1)[-1])


def _symbol(text: str) -> str:
    """The symbol without its parameter list: the text up to the first '(' outside <>, {} and ()."""
    if text.startswith("??"):
        return ""
    depth = 0
    for i, c in enumerate(text):
        if c in "<{":
            depth += 1
        elif c in ">}":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0 and i > 0 and not text.startswith("operator", max(0, i - 8)):
            return text[:i].strip()
        elif c == " " and depth == 0 and text[i + 1:i + 2] == "(":
            return text[:i].strip()
    return text
