"""Stack frames and call sites: where in the user's code an op was issued, and its one text form.

Every report line, timeline event and span that names a call site uses `site_text`, so a user can
search the text of one in the output of another.
"""

from __future__ import annotations

from typing import NamedTuple


class Frame(NamedTuple):
    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        return site_text(self)


def site_text(frame: Frame) -> str:
    """`file:line function`, the form tracebacks and editors' "go to" understand up to the space."""
    return f"{frame.filename}:{frame.line} {frame.name}"


def optional_site_text(frame: Frame | None) -> str | None:
    return None if frame is None else site_text(frame)


def is_library_frame(frame: Frame) -> bool:
    """Frames of torch itself (and C++ frames): the user's call site is the first frame that is not one."""
    f = frame.filename
    return not f.endswith(".py") or "/torch/" in f or "\\torch\\" in f
