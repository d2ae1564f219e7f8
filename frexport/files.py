"""Atomic file writes: a reader (PyTorch's analyzer, the sidecar, a person) never sees half a file.

The data goes to a hidden temporary file in the same directory, made fresh under an unpredictable name
(O_EXCL: a symbolic link planted under a guessable temp name is never written through), and is renamed
over the target (a rename replaces a link at the target, never follows it). Directories made `within` a
trusted one are made one by one, and one that is a link is refused: a directory other writers share
cannot redirect the writes elsewhere. Used by `frexport snapshot`, evidence bundles and the trace
checkpoint (the agent keeps its own copy: it imports nothing of the sidecar).
"""

from __future__ import annotations

import os
import stat


def atomic_write(path: str, data: bytes, make_dirs: bool = False, within: str | None = None) -> None:
    """`within`: with `make_dirs`, the directory below which no component may be a link."""
    directory = os.path.dirname(path) or "."
    if make_dirs:
        if within is None:
            os.makedirs(directory, exist_ok=True)
        else:
            make_dirs_within(within, directory)
    import tempfile  # here: every Python process of a job imports the agent, which imports this module

    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o644)  # readable as a file opened for writing was (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def make_dirs_within(base: str, directory: str) -> None:
    """`directory` and the directories between `base` and it, none of them a symbolic link (an error
    names the one that is)."""
    rel = os.path.relpath(directory, base)
    if rel == ".":
        return
    if rel.startswith(".."):
        raise ValueError(f"{directory} is not within {base}")
    current = base
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            os.mkdir(current)
            continue
        except FileExistsError:
            pass
        st = os.lstat(current)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{current} is {'a symbolic link' if stat.S_ISLNK(st.st_mode) else 'not a directory'}: "
                          "not written through")
