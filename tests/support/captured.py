"""A real job's captured dumps (tests/fixtures/real) read as the sidecar reads its polls: every rank seen
`after_s` past the job's newest recorded event, the dump times a clock, through the sidecar's own pass
(frexport/live/diagnosis.py LiveAnalysis: the same `analyze`, scoped to its ranks, with rank statuses)."""

from __future__ import annotations

import pickle
from pathlib import Path

from frexport.config import Analysis
from frexport.decode.normalize import normalize
from frexport.live.diagnosis import LiveAnalysis, LiveResult

STALL_AFTER_S = 5.0


def live_pass(src: Path, after_s: float = 60.0, down: frozenset[int] = frozenset(), scoped: bool = True) -> LiveResult:
    """One sidecar pass over the pickle dumps in `src`; `down`: ranks whose worker server refuses (gone);
    `scoped=False`: the job-level view, which gathers every pod's ranks."""
    raw = {int(p.name.rsplit("_", 1)[1]): pickle.loads(p.read_bytes()) for p in src.glob("trace_*")}
    newest = max(e["time_created_ns"] for d in raw.values() for e in d.get("entries", ()))
    seen = newest + int(after_s * 1e9)
    dumps = {r: normalize(d, f"rank {r}", "pickle", rank=r, dumped_at_ns=seen) for r, d in raw.items()}
    return LiveAnalysis(Analysis(stall_after=STALL_AFTER_S), scoped=scoped).run(dumps, down=down)
