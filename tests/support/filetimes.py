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


def copies(src: Path, tmp: Path) -> Iterator[tuple[str, Path]]:
    """(variant, directory): the times as found (copy2), now (a plain copy, `touch`), and back-dated
    to 2020 (an archive restored, a clock that was wrong)."""
    for variant in VARIANTS:
        dst = tmp / variant
        shutil.copytree(src, dst, copy_function=shutil.copy2)
        if variant == "fresh":
            _stamp(dst, time.time_ns())
        elif variant == "backdated":
            _stamp(dst, Y2020_NS)
        yield variant, dst
