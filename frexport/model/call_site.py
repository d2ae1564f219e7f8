"""Stack frames and call sites: where in the user's code an op was issued, and its one text form.

Every report line, timeline event, raw listing and log that names a call site writes it with
`site_text`, so a user can search the text of one in the output of another. (Spans carry the same
frame as OpenTelemetry's code.filepath / code.lineno / code.function attributes.)
"""

from __future__ import annotations

from typing import NamedTuple


class Frame(NamedTuple):
    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        return frame_text(self)


def frame_text(frame: Frame) -> str:
    """`file:line function`: editors and terminals open `file:line`; the function names it for people."""
    return f"{frame.filename}:{frame.line} {frame.name}"


def site_text(frame: Frame | None) -> str | None:
    """A call site as text, None where the dump has none (JSON dumps carry no stacks)."""
    return None if frame is None else frame_text(frame)


def is_library_frame(frame: Frame) -> bool:
    """Frames of torch itself (and C++ frames): the user's call site is the first frame that is not one."""
    f = frame.filename
    return not f.endswith(".py") or "/torch/" in f or "\\torch\\" in f
