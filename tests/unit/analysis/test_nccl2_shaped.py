"""torch 2.15's nccl2 (the default `nccl` there), as its FlightRecorderHook records it. NCCL-SHAPED
DATA, built from PyTorch's source (FlightRecorderHook.hpp, distributed_c10d.py, types.py of the 2.15
wheel): no GPU ran it here. The hook writes `nccl2:<op>` names, retires an op from the backend's
completion hook as `completed` with its duration, files a group's ops under its real name and lists
its ranks in pg_config; all_gather outputs one shard-shaped buffer per rank; a receive from any
source is `recv <dst><-?`."""

from frexport.analysis.engine import analyze
from frexport.decode.fields import parse_profiling_name
from tests.support.synth import dump, entry, hook_entry, traces


def _job(stuck: int | None = None, steps: int = 6) -> dict[int, dict]:
    out = {}
    for r in range(4):
        es = [hook_entry(i, i + 1, push=True, duration_ms=2.5) for i in range(steps - 1)]
        if r != stuck:  # the last all_reduce: issued, in flight (not retired), by every rank but `stuck`
            es.append(hook_entry(steps - 1, steps, push=True, done=False))
        out[r] = dump(es, world=4)
    return out


def test_a_rank_that_never_issues_the_collective_its_peers_wait_in_is_named():
    d = analyze(list(traces(_job(stuck=2), seen_at_ns=None).values()))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.pg_name, f.collective_seq_id) == \
        ("missing_rank", (2,), (0, 1, 3), "nccl2:0", 6), f.message


def test_an_op_every_rank_issued_that_never_completes_is_below_pytorch_and_durations_are_kept():
    t = traces(_job())
    d = analyze(list(t.values()))
    assert [(f.kind, f.culprit_ranks, f.collective_seq_id) for f in d.findings] == [("not_completed", (), 6)]
    assert list(t[0].groups["nccl2:0"].duration_us)[:5] == [2500] * 5


def test_all_gather_outputs_one_buffer_per_rank_and_matches():
    out = {r: dump([entry(0, 1, op="all_gather", backend="nccl2", sizes=((4,),), out_sizes=((4,),) * 4)],
                   world=4) for r in range(4)}
    assert analyze(list(traces(out).values())).findings == []


def test_a_receive_from_any_source():
    assert parse_profiling_name("nccl2:recv 3<-?") == ("nccl2", "recv", None, 3)
    assert parse_profiling_name("nccl2:send 1->3") == ("nccl2", "send", 1, 3)
