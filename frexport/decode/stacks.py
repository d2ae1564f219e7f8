"""Read the Python stacks a bundle or `frexport snapshot --stacks` saved: faulthandler's
`dump_traceback` text (`stacks/rank_<r>.traceback.txt`), one block per thread, innermost frame first:

    Thread 0x00007fe87afbdb80 (most recent call first):
      File "/job/train.py", line 8 in load_batch
      File "/job/train.py", line 17 in train_step

The text comes from the ranks, so it is parsed, never evaluated; files and lines are bounded.
"""

from __future__ import annotations

import os
import re

from frexport.model.call_site import Frame

_MAX_BYTES = 4 << 20
_MAX_FRAMES = 512  # per thread
_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")
# faulthandler writes `line 8 in f`; traceback-style text has `line 8, in f`
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]{1,1024})", line (?P<line>\d{1,9}),? in (?P<name>\S{1,256})')
_NAME = re.compile(r"^rank_(\d{1,7})(\.traceback)?\.txt$")  # bundles, snapshot --stacks; captured fixtures
_CALL = re.compile(r"([A-Za-z_][\w.]{0,120})\s*\(")


def parse_traceback(text: str) -> list[tuple[Frame, ...]]:
    """Each thread's frames, innermost first; threads without a Python frame are left out."""
    threads: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in text.splitlines():
        if _HEADER.match(line):
            current = []
            threads.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None and len(current) < _MAX_FRAMES:
            current.append(Frame(m["name"], m["file"], int(m["line"])))
    return [tuple(t) for t in threads if t]


def read_stacks(directory: str) -> dict[int, list[tuple[Frame, ...]]]:
    """rank -> threads, from `<directory>/stacks/rank_<r>.traceback.txt` (none when there are none).
    py-spy's `rank_<r>.pyspy_dump.txt` is for people: another format, not read here."""
    out: dict[int, list[tuple[Frame, ...]]] = {}
    folder = os.path.join(directory, "stacks")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        m = _NAME.search(name)
        path = os.path.join(folder, name)
        if not m or os.path.islink(path):
            continue
        try:
            with open(path, "rb") as f:
                text = f.read(_MAX_BYTES).decode(errors="replace")
        except OSError:
            continue
        threads = parse_traceback(text)
        if threads:
            out[int(m.group(1))] = threads
    return out


def callee(frame: Frame) -> str | None:
    """What the line calls (`time.sleep` for `time.sleep(0.5)`), when its source file is readable
    here (analyzed on the training host, or the same image): the stack names no C function."""
    if not frame.filename.endswith(".py") or frame.line < 1:
        return None
    try:
        if os.path.getsize(frame.filename) > _MAX_BYTES:
            return None
        with open(frame.filename, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == frame.line:
                    calls = _CALL.findall(text.split("#", 1)[0])
                    return calls[0] if calls else None
    except OSError:
        return None
    return None
