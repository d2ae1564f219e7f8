"""A fixed sidecar state for the collector tests and the golden exposition: 4 ranks of one job,
rank 2 missing from collective 11 of the default group, one clock. The entries are NCCL-shaped
(profiling names `nccl:...`), so their groups are filed as "nccl:0" and "nccl:1" (model.dump.group_name).

    ranks 0, 1, 3: collectives 1-10 of default_pg completed, 11 (all_reduce) started, not finished
    rank 2:        collectives 1-10 completed, never issued 11; its worker server timed out once
    ranks 0, 1:    one all_gather in tp (group "1", filed as "nccl:1"): completed on rank 0, timed out on rank 1
    rank 3:        first snapshot held collectives 1-5; the second, 40 s later, starts at 8 (2 dropped)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from frexport.analysis import findings as F
from frexport.analysis.findings import Diagnosis, Finding
from frexport.config import Analysis
from frexport.decode.read import decode_bytes
from frexport.evidence.sink import EvidenceSink
from frexport.export.evidence import EvidenceWriter
from frexport.export.prometheus import sidecar_registry
from frexport.live.diagnosis import BLOCKED, STALLED, LiveAnalysis, LiveResult
from frexport.live.sink import Sink
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from tests.support.synth import STEP_NS, T0, dump, entry

S = 10**9
FIRST, SECOND = T0 + 10 * S, T0 + 50 * S  # the two polls (sidecar clock, ns)
NOW_NS = T0 + 60 * S  # the scrape


def snapshot(entries: list[dict], rank: int, at: int, groups: dict | None = None):
    body = pickle.dumps(dump(entries, world=4, groups=groups), protocol=2)
    return decode_bytes(body, f"socket:rank-{rank}", rank=rank, dumped_at_ns=at)


def default_pg(rank: int, records: range) -> list[dict]:
    """Collective i+1 at record i; the 11th is still running."""
    return [entry(i, i + 1, created=T0 + i * STEP_NS + rank * 1000, state="started" if i == 10 else "completed")
            for i in records]


def tp(rank: int) -> list[dict]:
    timed_out = {"state": "scheduled", "retired": True} if rank == 1 else {}
    return [entry(11, 1, op="all_gather", pg=("1", "tp"), pg_id=1, duration_ms=5.0, **timed_out)]


STALL = Finding(F.MISSING_RANK, "nccl:0", "default_pg", 11, (2,), (0, 1, 3), "all_reduce", "/job/train.py:10 step",
                "rank 2 never issued all_reduce", root_cause=True, time_ns=T0 + 10 * STEP_NS)
STRAGGLER = Finding(F.STRAGGLER, "nccl:1", "tp", None, (1,), (), "all_gather", None, "rank 1 is late")


@dataclass
class Scenario:
    state: LiveState
    health: HealthRegistry
    analysis: LiveAnalysis
    sinks: list[Sink]
    clock: Callable[[], float]

    def registry(self, process: bool = False) -> CollectorRegistry:
        return sidecar_registry(self.state, self.health, self.analysis, self.sinks, self.clock, process=process)


def build(evidence_dir: str) -> Scenario:
    state, health = LiveState(), HealthRegistry()
    groups = {"1": ("tp", [0, 1])}
    for rank in (0, 1, 2):
        records = range(11) if rank != 2 else range(10)
        state.ingest(snapshot(default_pg(rank, records) + (tp(rank) if rank < 2 else []), rank, FIRST, groups),
                     f"socket:rank-{rank}", FIRST)
    state.ingest(snapshot(default_pg(3, range(5)), 3, FIRST, groups), "socket:rank-3", FIRST)
    state.ingest(snapshot(default_pg(3, range(7, 11)), 3, SECOND, groups), "socket:rank-3", SECOND)
    state.count_timeout_dump(2)
    for rank in range(4):
        health.record(f"socket:rank-{rank}", True, 0.002 * (rank + 1), FIRST)
    health.record("socket:rank-2", False, 5.0, SECOND, reason="timeout")
    health.count_decode_error("truncated")
    analysis = LiveAnalysis(Analysis())
    waits = LiveAnalysis(Analysis(stall_after=30.0)).run(state.latest_dumps()).diagnosis.waits  # where ranks wait
    analysis.latest = LiveResult(Diagnosis([0, 1, 2, 3], [STALL, STRAGGLER], waits=waits),
                                 {0: BLOCKED, 1: BLOCKED, 2: STALLED, 3: BLOCKED}, stall_after_s=30.0)
    evidence = EvidenceSink(EvidenceWriter(evidence_dir))
    return Scenario(state, health, analysis, [evidence], lambda: NOW_NS / S)
