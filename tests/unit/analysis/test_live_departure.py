"""Live, a rank that raised and exited is named as having left, however soon after its peers' collective
its last poll came: it is never polled again, so that poll stays 'fresh' for good (issue 40: every rank
read `ok` while one waited past the threshold). The dumps are the real crashed_rank job's (rank 3 raised
between collectives 25 and 26; 0 and 2 failed out of 26, 1 waits in it), with live poll times."""

import dataclasses

from frexport.analysis.engine import Options, analyze
from frexport.decode.read import decode_file
from frexport.model.rank_trace import build_rank_trace
from tests.support import paths

S = 10**9
FIXTURE = paths.ROOT / "tests" / "fixtures" / "real" / "crashed_rank"


def _polled(peers_after_s: float, failed_out: bool = True):
    dumps = {r: decode_file(str(FIXTURE / f"trace_{r}"), rank=r) for r in range(4)}
    issued = max(e.time_created_ns for d in dumps.values() for e in d.entries if e.collective_seq_id == 26)
    if not failed_out:  # ranks 0 and 2 still in it, as rank 1
        for r in (0, 2):
            entries = list(dumps[r].entries)
            entries[-1] = entries[-1]._replace(retired=False, state="started")
            dumps[r] = dataclasses.replace(dumps[r], entries=type(dumps[r].entries)(entries))
    # rank 3 last polled 1 s after its peers issued collective 26, then gone; the others polled on
    times = {0: peers_after_s, 1: peers_after_s, 2: peers_after_s, 3: 1.0}
    return [build_rank_trace(dataclasses.replace(d, dumped_at_ns=issued + int(times[r] * S))) for r, d in dumps.items()]


def test_a_rank_last_seen_fresh_whose_peers_failed_out_left_the_job_once_others_waited_past_the_threshold():
    [f] = analyze(_polled(10.0), options=Options(stall_after_s=6.0, clock=True)).findings
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.root_cause) == ("missing_rank", (3,), (0, 1, 2), True)
    assert f.message.startswith("rank 3 left the job after collective 25"), f.message


def test_before_the_threshold_it_may_still_be_computing():
    assert analyze(_polled(3.0), options=Options(stall_after_s=6.0, clock=True)).findings == []


def test_without_members_that_failed_out_a_fresh_rank_is_still_given_time():
    d = analyze(_polled(10.0, failed_out=False), options=Options(stall_after_s=6.0, clock=True))
    assert all(3 not in f.culprit_ranks or not f.certain for f in d.findings), [f.message for f in d.findings]
