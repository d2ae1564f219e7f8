"""Atomic file writes: a reader (PyTorch's analyzer, the sidecar, a person) never sees half a file.

The data goes to a hidden temporary file in the same directory, named after the process and the
target (so concurrent writers of different files never collide), and is renamed over the target.
Used by the agent's snapshots, `frexport snapshot`, evidence bundles and the trace checkpoint.
"""

from __future__ import annotations

import os


def atomic_write(path: str, data: bytes, make_dirs: bool = False) -> None:
    directory = os.path.dirname(path) or "."
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
