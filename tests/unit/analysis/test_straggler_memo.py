"""A live analysis judges stragglers again only when what they are judged from moved: while a job is
hung its traces stay as they are, pass after pass, and so do its stragglers. Every pass must still say
what an analysis from scratch says."""

from dataclasses import replace

from frexport.analysis.engine import Options, analyze
from frexport.analysis.findings import STRAGGLER
from frexport.config import Analysis
from frexport.decode.normalize import normalize
from frexport.live.diagnosis import LiveAnalysis
from frexport.model.rank_trace import build_rank_trace
from tests.support.synth import STEP_NS, T0, dump, entry

MS = 1_000_000
WORLD = 4


def _dumps(steps: int, late, at: int) -> dict:
    """gloo ranks whose enqueue times say who is late: late(step, rank) -> ms."""
    out = {}
    for r in range(WORLD):
        entries = [entry(i, i + 1, created=T0 + i * STEP_NS + int(late(i, r) * MS), backend="gloo",
                         state="scheduled", retired=True) for i in range(steps)]
        out[r] = normalize(dump(entries, world=WORLD), f"rank {r}", "pickle", rank=r, dumped_at_ns=at,
                           keep_frames=False)
    return out


def _late(live: LiveAnalysis, dumps: dict) -> list:
    result = live.run(dumps)
    scratch = analyze([build_rank_trace(d, tail=live.cfg.window) for d in dumps.values()],
                      options=Options(stall_after_s=live.cfg.stall_after, clock=True,
                                      straggler_lateness_s=live.cfg.straggler_lateness))
    assert repr(result.diagnosis) == repr(scratch)
    return [f.culprit_ranks for f in result.diagnosis.findings if f.kind == STRAGGLER]


def test_stragglers_are_judged_again_when_a_trace_moves_and_only_then():
    live = LiveAnalysis(Analysis(stall_after=3600.0), scoped=False)
    first = _dumps(20, lambda i, r: 80 if r == 3 else 0, T0 + 60 * 10**9)
    assert _late(live, first) == [(3,)]
    judged = live._memo.stragglers.found
    # the same entries, polled again (a hung job): nothing to judge again
    again = {r: replace(d, dumped_at_ns=d.dumped_at_ns + 10**9) for r, d in first.items()}
    assert _late(live, again) == [(3,)]
    assert live._memo.stragglers.found is judged
    # then rank 3 catches up for 14 steps: the traces follow their windows in place (the same objects),
    # the stragglers are judged again, and rank 3, last in 18 of the 32 judged, is no longer one
    later = _dumps(34, lambda i, r: 80 if r == 3 and i < 20 else 0, T0 + 70 * 10**9)
    moved = {r: replace(later[r], entries=first[r].entries + later[r].entries[20:]) for r in first}
    traces = {r: follower.trace for r, (_, follower) in live._traces.items()}
    assert _late(live, moved) == []
    assert all(follower.trace is traces[r] for r, (_, follower) in live._traces.items())  # followed, not rebuilt
