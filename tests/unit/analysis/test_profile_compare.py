"""The straggler's profile beside a peer's, on real traces: a gloo job (torch 2.13) whose rank 1 waits
in its DataLoader (tests/jobs/train_loader.py, LOADER_SLOW_RANK=1, 0.2 s a batch), both taken at once
through the agent's frexport_profile."""

import pytest

from frexport.analysis.profile_compare import compare, summarize
from frexport.decode.profile_trace import read_trace
from frexport.model.profile_trace import HostEvent, ProfileTrace
from tests.support.paths import REAL_FIXTURES

DIR = REAL_FIXTURES / "profile_loader_straggler"


def _profile(rank):
    return summarize(rank, read_trace((DIR / f"rank_{rank}.pt.trace.json.gz").read_bytes()))


def test_the_straggler_s_data_loader_is_named_with_time_a_step_on_both_ranks():
    slow, peer = _profile(1), _profile(0)
    assert slow.unit == "DataLoader batches" and 10 <= slow.steps <= 20
    c = compare(slow, peer)
    assert c.function == "DataLoader.__next__"
    assert 0.15 <= slow.seconds["DataLoader.__next__"] <= 0.25  # the job sleeps 0.2 s a batch
    assert peer.seconds["DataLoader.__next__"] < 0.01
    assert c.text().startswith("rank 1: 0.20 s a step in DataLoader.__next__, rank 0: 0.00 s")
    # and where in the job's own code: its Dataset's __getitem__
    assert c.deepest is not None and c.deepest.startswith("__getitem__ (train_loader.py:")
    assert c.to_json()["seconds_per_step"]["1"] == pytest.approx(slow.seconds["DataLoader.__next__"])


def test_the_peer_s_excess_is_the_wait_in_the_collective():
    # the other way round the rule names what the peer does instead: it waits in the all_reduce (gloo's
    # own label for it is on gloo's threads, not the training thread)
    c = compare(_profile(0), _profile(1))
    assert c.function == "all_reduce (distributed_c10d.py:3155)"
    assert c.deepest == "train_step (train_loader.py:45)"


def test_the_profiler_s_own_frames_and_other_threads_are_left_out():
    slow = _profile(1)
    assert not [n for n in slow.seconds if "frexport/agent" in n or "profile.py" in n]


def test_two_alike_ranks_have_no_cause():
    same = _profile(0)
    c = compare(same, same)
    assert c.function is None and "spent no more time" in c.text()


def test_a_trace_without_collectives_or_batches_counts_seconds():
    ev = (HostEvent(7, "cpu_op", "aten::mm", 0.0, 2e6), HostEvent(7, "cpu_op", "aten::mm", 1e6, 2e6))
    p = summarize(3, ProfileTrace(ev, 4e6))
    assert p.unit == "seconds" and p.seconds["aten::mm"] == pytest.approx(0.75)  # 3 s of union over 4 s
