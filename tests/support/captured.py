"""A real job's captured dumps (tests/fixtures/real) read as the sidecar reads its polls: every rank seen
`after_s` past the job's newest recorded event, the dump times a clock (`Options(clock=True)`)."""

from __future__ import annotations

import pickle
from pathlib import Path

from frexport.analysis.engine import Options, analyze
from frexport.analysis.findings import Diagnosis
from frexport.live.diagnosis import statuses_of
from tests.support.synth import traces

STALL_AFTER_S = 5


def live_pass(src: Path, after_s: float = 60.0) -> tuple[Diagnosis, dict[int, str]]:
    """(diagnosis, rank statuses) of one live pass over the pickle dumps in `src`."""
    dumps = {int(p.name.rsplit("_", 1)[1]): pickle.loads(p.read_bytes()) for p in src.glob("trace_*")}
    newest = max(e["time_created_ns"] for d in dumps.values() for e in d.get("entries", ()))
    tr = list(traces(dumps, seen_at_ns=newest + int(after_s * 1e9)).values())
    d = analyze(tr, options=Options(stall_after_s=STALL_AFTER_S, clock=True))
    return d, statuses_of(d, tr, STALL_AFTER_S * 10**9)
