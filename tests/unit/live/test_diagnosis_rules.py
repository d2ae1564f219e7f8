"""The sidecar reaches the same conclusions as `frexport analyze` (issue 19), with its poll times as
the clock: a cross-group deadlock or a member that left a collective is one culprit, everyone else
waits (blocked) - never every rank of the cycle 'desynced'."""

import pytest

from frexport.config import Analysis
from frexport.decode.read import decode_bytes
from frexport.live.diagnosis import BLOCKED, DESYNCED, LiveAnalysis
from tests.support import paths


def _polled(scenario: str, world: int, age_s: float = 120.0) -> dict:
    """Every rank's JSON as the worker server answered it, polled `age_s` after its newest entry
    (the hang has lasted that long when the sidecar looks)."""
    out = {}
    for r in range(world):
        body = (paths.REAL_FIXTURES / scenario / "json" / f"trace_{r}.json").read_bytes()
        d = decode_bytes(body, f"rank-{r}", rank=r)
        newest = max(e.time_created_ns for e in d.entries)
        out[r] = decode_bytes(body, f"rank-{r}", rank=r, dumped_at_ns=newest + int(age_s * 1e9))
    return out


@pytest.mark.parametrize("scenario, world, culprit, status", [
    ("cross_group_order", 8, 6, DESYNCED),
    ("all_to_all_split_mismatch", 4, 1, DESYNCED),
])
def test_live_statuses_blame_the_culprit_only(scenario, world, culprit, status):
    result = LiveAnalysis(Analysis(stall_after=30.0)).run(_polled(scenario, world))
    assert result.statuses == {r: (status if r == culprit else BLOCKED) for r in range(world)}
    assert [f.culprit_ranks for f in result.new_root_causes] == [(culprit,)]



def test_live_waits_are_timed_by_the_polls_and_never_by_a_time_that_contradicts_the_recorder():
    """Polled 120 s after the newest entry: the wait is 120 s by the poll time. The same dumps with
    a dump time before their own entries (a file touched to 2020): no clock, the recorder's own
    times instead, for the finding and for the stall series."""
    from dataclasses import replace

    from frexport.export.prometheus.findings import _stalled_s

    polled = LiveAnalysis(Analysis(stall_after=5.0)).run(_polled("stuck_before_collective", 4))
    [f] = polled.diagnosis.findings
    assert f.certain and f.culprit_ranks == (2,) and f.waited.clock == "dump_time"
    assert f.waited.text() == "120.0 s (from issue to rank 3's dump time)", f.waited.text()
    touched = {r: replace(d, dumped_at_ns=1_577_836_800 * 10**9)
               for r, d in _polled("stuck_before_collective", 4).items()}
    result = LiveAnalysis(Analysis(stall_after=5.0)).run(touched)
    [f] = result.diagnosis.findings
    assert (f.culprit_ranks, f.certain, f.waited.clock) == ((2,), False, "recorder")
    assert _stalled_s(f, now=f.time_ns / 1e9 + 86_400) < 1.0


def test_a_hang_whose_culprit_is_first_seen_without_data_is_still_one_incident():
    """The job-level view may hear of a hang before the culprit's pod has sent its rank: first 'rank 2
    left no dump', a pass later 'rank 2 never issued it'. The same hang: one incident (one bundle)."""
    polled = _polled("stuck_before_collective", 4)
    live = LiveAnalysis(Analysis(stall_after=5.0), scoped=False)
    first = live.run({r: d for r, d in polled.items() if r != 2})
    assert [(f.kind, f.culprit_ranks) for f in first.new_root_causes] == [("missing_dump", (2,))]
    second = live.run(polled)
    assert [(f.kind, f.culprit_ranks) for f in second.diagnosis.findings if f.root_cause] == [("missing_rank", (2,))]
    assert second.new_root_causes == []
