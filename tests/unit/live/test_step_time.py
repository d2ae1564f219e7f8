"""The stall threshold follows the job's observed step time (analysis.stall_after unset, the default):
a live analysis reads each rank's period again only when the rank's entries changed, and its
threshold is the one a fresh analysis of the same snapshots derives."""

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from frexport.config import Analysis
from frexport.decode.normalize import normalize
from frexport.live import diagnosis
from frexport.live.diagnosis import LiveAnalysis
from tests.support.synth import T0, dump, entry

MS = 1_000_000
CFG = Analysis(min_stall_after=0.001)  # so that 5 steps, not the floor, is the threshold


def _snapshot(rank: int, step_ms: int, n: int, start: int, jitter: random.Random) -> object:
    es = [entry(start + i, start + i + 1, created=T0 + (start + i) * step_ms * MS + jitter.randrange(3) * MS,
                op=jitter.choice(["all_reduce", "all_reduce", "broadcast"])) for i in range(n)]
    return normalize(dump(es, world=4), f"rank {rank}", "pickle", rank=rank, dumped_at_ns=T0, keep_frames=False)


@given(st.integers(0, 2**32), st.integers(2, 8))
def test_a_memoized_threshold_is_the_one_derived_afresh_pass_after_pass(seed, passes):
    rng = random.Random(seed)
    live = LiveAnalysis(CFG)
    snaps = {r: _snapshot(r, rng.choice([20, 100, 700]), rng.randrange(0, 12), 0, rng) for r in range(4)}
    for _ in range(passes):
        for r in list(snaps):
            move = rng.random()
            if move < 0.4:  # nothing new: a fresher poll of the same entries (a hung rank)
                snaps[r] = replace(snaps[r], dumped_at_ns=snaps[r].dumped_at_ns + 5 * 10**9)
            elif move < 0.8:  # new entries, at another pace
                snaps[r] = _snapshot(r, rng.choice([20, 100, 700]), rng.randrange(0, 12), rng.randrange(50), rng)
            elif move < 0.9 and len(snaps) > 1:
                del snaps[r]  # the rank left the view
        assert live.stall_after(snaps) == LiveAnalysis(CFG).stall_after(snaps)
        assert live._periods.keys() == snaps.keys()  # a rank gone keeps no entries alive


def test_a_hung_ranks_entries_are_read_once(monkeypatch):
    rng = random.Random(1)
    snaps = {r: _snapshot(r, 100, 10, 0, rng) for r in range(4)}
    reads = []
    period_s = diagnosis.period_s
    monkeypatch.setattr(diagnosis, "period_s", lambda entries: reads.append(entries) or period_s(entries))
    live = LiveAnalysis(CFG)
    first = live.stall_after(snaps)
    assert len(reads) == 4 and 0.4 < first < 0.6  # 5 steps of ~100 ms
    for _ in range(3):  # polled again and again, nothing new
        snaps = {r: replace(d, dumped_at_ns=d.dumped_at_ns + 10**9) for r, d in snaps.items()}
        assert live.stall_after(snaps) == first
    assert len(reads) == 4
    snaps[2] = _snapshot(2, 100, 11, 0, rng)  # one rank moved on
    live.stall_after(snaps)
    assert len(reads) == 5 and reads[-1] is snaps[2].entries
