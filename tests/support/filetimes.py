"""A dump directory with other file times: a post-mortem's file times are no clock (cp, git clone
and touch set them), so every diagnosis must come out the same on all three copies."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

Y2020_NS = 1_577_836_800 * 10**9
VARIANTS = ("captured", "fresh", "backdated")


def _stamp(d: Path, ns: int) -> None:
    for p in d.rglob("*"):
        os.utime(p, ns=(ns, ns))


def _as_captured(d: Path) -> None:
    """Each rank's files stamped a moment after its own newest recorded event, as the capture wrote
    them (it polls every 0.5 s; a git checkout loses those times, so they are put back)."""
    from frexport.decode.load import load

    loaded = load([str(d)], workers=1)
    newest = {t.rank: t.last_event_ns for t in loaded.traces if t.last_event_ns}
    for rank, files in loaded.discovery.by_rank.items():
        if rank in newest:
            ns = newest[rank] + 300_000_000
            for f in files:
                os.utime(f.path, ns=(ns, ns))


def copies(src: Path, tmp: Path) -> Iterator[tuple[str, Path]]:
    """(variant, directory): the times the capture gave the files (a moment after each rank's newest
    event), now (a plain copy, `touch`), and back-dated to 2020 (an archive restored, a wrong clock)."""
    for variant in VARIANTS:
        dst = tmp / variant
        shutil.copytree(src, dst, copy_function=shutil.copy2)
        if variant == "captured":
            _as_captured(dst)
        elif variant == "fresh":
            _stamp(dst, time.time_ns())
        elif variant == "backdated":
            _stamp(dst, Y2020_NS)
        yield variant, dst
