"""Stack frames and call sites: where in the user's code an op was issued, and its one text form.

Every report line, timeline event, raw listing and log that names a call site writes it with
`site_text`, so a user can search the text of one in the output of another. (Spans carry the same
frame as OpenTelemetry's code.filepath / code.lineno / code.function attributes.)
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Frame(NamedTuple):
    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        return frame_text(self)


Threads = list[tuple[Frame, ...]]  # a rank's Python threads, each innermost frame first


def frame_text(frame: Frame) -> str:
    """`file:line function`: editors and terminals open `file:line`; the function names it for people."""
    return f"{frame.filename}:{frame.line} {frame.name}"


def site_text(frame: Frame | None) -> str | None:
    """A call site as text, None where the dump has none (JSON dumps carry no stacks)."""
    return None if frame is None else frame_text(frame)


# The Python standard library, wherever the interpreter lives (/usr/lib/python3.11/contextlib.py,
# ~/.pyenv/versions/3.11.7/lib/python3.11/functools.py, C:\\Python311\\Lib\\contextlib.py), but not the
# packages installed under it (site-packages, dist-packages): those are third-party code.
_STDLIB = re.compile(r"[/\\](?:lib[/\\]python3\.\d+|Lib)[/\\](?!(?:site|dist)-packages[/\\])")


def is_library_frame(frame: Frame) -> bool:
    """Frames that are never the user's call site: C++ and frozen frames (no .py file), torch itself
    (its distributed modules, the coalescing manager), the standard library (contextlib's `__exit__`
    that closes a `with` block, functools' wrappers, threading). The call
    site of an op is its innermost frame that is not one (decode's field rules), and where a rank
    is now is its innermost such frame of the training thread (analysis/whereabouts.py): one rule."""
    f = frame.filename
    # (py-spy names files relative to their sys.path entry: torch/distributed/distributed_c10d.py)
    return (not f.endswith(".py") or "/torch/" in f or "\\torch\\" in f or f.startswith("torch/")
            or _STDLIB.search(f) is not None)
