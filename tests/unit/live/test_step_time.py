"""The stall threshold follows the job's observed step time (analysis.stall_after unset, the default).
Each rank's period is followed from pass to pass (live/step_time.py): the step time must be the one a
fresh reading of the same snapshots gives, whatever the snapshots do between passes."""

import random
from dataclasses import replace
from statistics import median

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frexport.config import Analysis
from frexport.decode.normalize import normalize
from frexport.live import step_time
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.step_time import StepTime
from tests.support.synth import T0, dump, entry

MS = 1_000_000


# The plain reading the followed one must equal: each rank's newest entries read afresh.
def _reference(dumps, window: int) -> float | None:
    periods = []
    for d in dumps.values():
        times: dict[tuple, list[int]] = {}
        for e in d.entries[-window:]:
            times.setdefault((e.pg_name, e.profiling_name, e.input_sizes), []).append(e.time_created_ns)
        if not times:
            continue
        ts = max(times.values(), key=len)
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
        if gaps:
            periods.append(median(gaps) / 1e9)
    return median(periods) if periods else None


class Rank:
    """A rank's recorder: entries of a few ops at a pace with jitter (enqueue times that tie or go back
    now and then), snapshots of its newest `size`."""

    def __init__(self, rng: random.Random, rank: int) -> None:
        self.rng, self.rank, self.next_id = rng, rank, 0
        self.entries: list = []
        self.pace = rng.choice([20, 100, 700])

    def issue(self, n: int) -> None:
        for _ in range(n):
            i, rng = self.next_id, self.rng
            created = T0 + i * self.pace * MS + rng.choice([0, 0, 1, -self.pace]) * MS
            op = rng.choice(["all_reduce", "all_reduce", "broadcast"])
            sizes = rng.choice([((4, 4),), ((4, 4),), ((8,),)])
            self.entries.append(entry(i, i + 1, created=created, op=op, sizes=sizes,
                                      pg=rng.choice([("0", "a"), ("1", "b")])))
            self.next_id += 1

    def snapshot(self, size: int):
        return normalize(dump(self.entries[-size:], world=4), f"rank {self.rank}", "pickle", rank=self.rank,
                         dumped_at_ns=T0, keep_frames=False)


@pytest.mark.parametrize("window", [512, 6])  # (6: windows shorter than the snapshots, as in a 2000-entry dump)
@given(st.integers(0, 2**32), st.integers(2, 10))
def test_the_followed_step_time_is_the_one_read_afresh(window, seed, passes):
    rng = random.Random(seed)
    ranks = {r: Rank(rng, r) for r in range(4)}
    size = rng.choice([4, 10, 40])
    snaps = {}
    for r, rank in ranks.items():
        rank.issue(rng.randrange(0, 15))
        snaps[r] = rank.snapshot(size)
    followed = StepTime(window)
    for _ in range(passes):
        assert followed.step_s(snaps) == _reference(snaps, window)
        for r, rank in ranks.items():
            move = rng.random()
            if move < 0.3:  # nothing new: a fresher poll of the same entries (a hung rank)
                snaps[r] = replace(snaps[r], dumped_at_ns=snaps[r].dumped_at_ns + 5 * 10**9)
            elif move < 0.7:  # new entries: the window moves on, the kept ones the same objects
                rank.issue(rng.randrange(0, 2 * size))
                new = rank.snapshot(size)
                kept = [e for e in snaps[r].entries if e.record_id >= new.entries[0].record_id] if new.entries else []
                snaps[r] = replace(new, entries=tuple(kept) + new.entries[len(kept):])
            elif move < 0.73 and snaps[r].entries:  # the newest entry sent again, another object with
                last = snaps[r].entries[-1]         # another enqueue time: its kept values are stale
                snaps[r] = replace(snaps[r], entries=snaps[r].entries[:-1] + (
                    last._replace(time_created_ns=last.time_created_ns + 7 * MS),))
            elif move < 0.76:  # decoded again: equal entries, other objects
                snaps[r] = rank.snapshot(size)
            elif move < 0.8:  # cut short (a half-written dump): the same entries, the newest missing
                snaps[r] = replace(snaps[r], entries=snaps[r].entries[:-rng.randrange(1, 4)])
            elif move < 0.9:  # restarted: another recorder from record 0
                ranks[r] = Rank(rng, r)
                ranks[r].issue(rng.randrange(0, 15))
                snaps[r] = ranks[r].snapshot(size)
            elif len(snaps) > 1:
                del snaps[r]  # the rank left the view
        ranks = {r: ranks[r] for r in snaps}
    assert followed.step_s(snaps) == _reference(snaps, window)
    assert followed._ranks.keys() == snaps.keys()  # a rank gone keeps no entries alive


def test_a_hung_ranks_entries_are_not_read_again(monkeypatch):
    rng = random.Random(1)
    ranks = {r: Rank(rng, r) for r in range(4)}
    for rank in ranks.values():
        rank.pace = 100
        rank.issue(30)
    snaps = {r: rank.snapshot(20) for r, rank in ranks.items()}
    live = LiveAnalysis(Analysis(min_stall_after=0.001))  # so that 5 steps, not the floor, is the threshold
    first = live.stall_after(snaps)
    assert first == 5 * _reference(snaps, 512)
    read = []
    real = step_time.runs  # (what the followed window reads of its entries: their ops, run by run)
    monkeypatch.setattr(step_time, "runs", lambda es, at: read.extend(es) or real(es, at))
    for _ in range(3):  # polled again and again, nothing new
        snaps = {r: replace(d, dumped_at_ns=d.dumped_at_ns + 10**9) for r, d in snaps.items()}
        assert live.stall_after(snaps) == first
    assert read == []
    ranks[2].issue(3)  # one rank moved on by 3 entries: only the 3 that arrived are read
    new = ranks[2].snapshot(20)
    snaps[2] = replace(new, entries=snaps[2].entries[3:] + new.entries[-3:])
    assert live.stall_after(snaps) == 5 * _reference(snaps, 512)
    assert read == list(snaps[2].entries[-3:])
