"""Live-state events and sidecar passes from synthetic snapshots, for the exporters' tests."""

from __future__ import annotations

import pickle

from frexport.analysis.engine import Options, analyze
from frexport.decode.read import decode_bytes
from frexport.live.diagnosis import LiveResult
from frexport.live.sink import Pass
from frexport.live.state import EntryEvent, LiveState
from frexport.model.dump import RankDump
from frexport.model.rank_trace import build_rank_trace
from tests.support.synth import STEP_NS, T0, dump, entry


def snapshot(rank: int, lo: int, hi: int, at: int, stuck_at: int | None = None, world: int | None = 2,
             **kw) -> RankDump:
    """Rank `rank`'s recorder holding collectives lo..hi-1 (all completed), and one more stuck in
    progress when `stuck_at` is given (its collective seq id)."""
    es = [entry(i, i + 1, created=T0 + i * STEP_NS + rank * 1000, **kw) for i in range(lo, hi)]
    if stuck_at is not None:
        es.append(entry(hi, stuck_at, state="started", created=T0 + hi * STEP_NS, **kw))
    return decode_bytes(pickle.dumps(dump(es, world=world), protocol=2), "x", rank=rank, dumped_at_ns=at)


def polls(state: LiveState, n: int = 20, ranks=(0, 1)) -> list[list[EntryEvent]]:
    """`n` overlapping polls of each rank: each sees a 10-entry window moving by 2 entries; each
    poll's events (every entry once in all, 2 * (n - 1) + 10 per rank)."""
    out = []
    for p in range(n):
        events = []
        for r in ranks:
            events.extend(state.ingest(snapshot(r, 2 * p, 2 * p + 10, T0 + p), "s", T0 + p))
        out.append(events)
    return out


def result_of(dumps: dict[int, RankDump], stuck_after_s: float = 1.0) -> LiveResult:
    diagnosis = analyze([build_rank_trace(d) for d in dumps.values()], options=Options(stall_after_s=stuck_after_s))
    return LiveResult(diagnosis, {}, stuck_after_s, [f for f in diagnosis.findings if f.root_cause])


def a_pass(events: list[EntryEvent], latest: LiveResult | None = None, now_ns: int = T0) -> Pass:
    return Pass(now_ns, events, latest, latest)
