"""The analysis on NCCL-shaped synthetic dumps: faults a CPU machine cannot produce for real."""

import itertools
import json
import os
import random
import shutil

import pytest

from frexport.analysis.engine import analyze
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, traces, write


def _one(d, kind):
    found = [f for f in d.findings if f.kind == kind]
    assert len(found) == 1, [(f.kind, f.message) for f in d.findings]
    return found[0]


def test_healthy(tmp_path, diagnose):
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in healthy_job().items()}))
    assert d.verdict == "healthy" and d.findings == [] and d.matched == 10 and d.ranks == [0, 1, 2, 3]


def test_ring_buffers_starting_at_different_points_are_not_missing(tmp_path, diagnose):
    job = healthy_job(steps=12)
    job[1] = job[1][5:]  # rank 1's oldest entries wrapped away
    job[3] = job[3][2:]
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    assert d.verdict == "healthy", [f.message for f in d.findings]


def _stuck(job, ranks, seq, **kw):
    for r in ranks:
        job[r].append(entry(len(job[r]), seq, state="started", **kw))


def test_missing_rank(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0, 1, 3], 11, line=10)
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "missing_rank")
    assert (f.culprit_ranks, f.blocked_ranks, f.collective_seq_id, f.op) == ((2,), (0, 1, 3), 11, "all_reduce")
    assert f.call_site == "/job/train.py:10 step" and len(d.findings) == 1
    # the file times do not say how long ranks 0, 1, 3 waited: rank 2 is the suspect of a possible hang
    assert d.verdict == "inconclusive" and not f.certain and "do not say" in f.reason
    # a clock (the sidecar's poll times) proves it
    proven = diagnose(tmp_path, clock=True)
    assert proven.verdict == "unhealthy" and _one(proven, "missing_rank").culprit_ranks == (2,)


def test_extra_collective_blames_the_odd_rank(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0], 11, line=20)
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "desync")
    assert f.culprit_ranks == (0,) and f.collective_seq_id == 11 and f.call_site == "/job/train.py:20 step"


def test_silent_size_and_dtype_mismatch(tmp_path, diagnose):
    job = healthy_job()
    job[3][4] = entry(4, 5, sizes=((8, 4),), created=job[3][4]["time_created_ns"])
    job[1][6] = entry(6, 7, dtype="BFloat16", created=job[1][6]["time_created_ns"])
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    size, dtype = _one(d, "size_mismatch"), _one(d, "dtype_mismatch")
    assert size.culprit_ranks == (3,) and size.collective_seq_id == 5 and "[[8, 4]]" in size.message
    assert dtype.culprit_ranks == (1,) and dtype.collective_seq_id == 7 and "BFloat16" in dtype.message


def test_type_mismatch_that_hangs_everyone(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0, 2, 3], 11)
    _stuck(job, [1], 11, op="broadcast", line=30)
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    assert len(d.findings) == 1
    f = d.findings[0]
    assert f.kind == "desync" and f.culprit_ranks == (1,) and f.blocked_ranks == (0, 2, 3)
    assert f.op == "broadcast" and f.call_site == "/job/train.py:30 step"


def test_root_cause_through_other_groups(tmp_path, diagnose):
    # tp = {0,1}, {2,3}; dp = {0,2}, {1,3}. Rank 3 never issues its tp op; rank 2 waits for it in tp,
    # rank 1 waits for rank 3 in dp, rank 0 waits for rank 2 (blocked in tp) in dp.
    groups = {"1": ("tp", [0, 1]), "2": ("tp", [2, 3]), "3": ("dp", [0, 2]), "4": ("dp", [1, 3])}
    tp = {0: "1", 1: "1", 2: "2", 3: "2"}
    dp = {0: "3", 2: "3", 1: "4", 3: "4"}
    job = {}
    for r in range(4):
        es = []
        for step in range(5):
            es.append(entry(len(es), step + 1, pg=(tp[r], "tp"), pg_id=1, created=T0 + len(es) * STEP_NS))
            es.append(entry(len(es), step + 1, pg=(dp[r], "dp"), pg_id=2, created=T0 + len(es) * STEP_NS))
        job[r] = es
    job[2].append(entry(10, 6, pg=("2", "tp"), pg_id=1, state="started", line=50))
    job[0].append(entry(10, 6, pg=("1", "tp"), pg_id=1))
    job[1].append(entry(10, 6, pg=("1", "tp"), pg_id=1))
    job[0].append(entry(11, 6, pg=("3", "dp"), pg_id=2, state="started", line=60))
    job[1].append(entry(11, 6, pg=("4", "dp"), pg_id=2, state="started", line=60))
    out = {r: dump(es, world=4, groups={k: v for k, v in groups.items() if r in v[1]}) for r, es in job.items()}
    d = diagnose(write(tmp_path, out))
    assert len(d.findings) == 1, [f.message for f in d.findings]
    f = d.findings[0]
    assert f.kind == "missing_rank" and f.culprit_ranks == (3,) and f.blocked_ranks == (0, 1, 2)
    assert f.pg_desc == "tp" and f.collective_seq_id == 6 and f.call_site == "/job/train.py:50 step"


def test_timeout_is_reported_with_its_root_cause(tmp_path, diagnose):
    job = healthy_job()
    for r in (0, 1, 3):
        job[r].append(entry(10, 11, state="started", retired=True))  # the watchdog gave up on it
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "missing_rank")
    assert f.culprit_ranks == (2,) and f.blocked_ranks == (0, 1, 3)


def test_timeout_with_everyone_joined(tmp_path, diagnose):
    job = healthy_job()
    for r in range(4):
        job[r].append(entry(10, 11, state="started", retired=True))
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "timeout")
    assert f.culprit_ranks == () and f.blocked_ranks == (0, 1, 2, 3) and f.collective_seq_id == 11


def test_not_completed_with_everyone_joined(tmp_path, diagnose):
    job = healthy_job()
    for r in range(4):
        job[r].append(entry(10, 11, state="started"))
    f = _one(diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()})), "not_completed")
    assert f.blocked_ranks == (0, 1, 2, 3)


def test_fresh_snapshot_of_a_running_job_is_not_a_hang(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0, 1], 11)  # ranks 0 and 1 just issued seq 11; 2 and 3 are about to
    directory = write(tmp_path, {r: dump(es, world=4) for r, es in job.items()})
    newest = T0 + 11 * STEP_NS
    for p in directory.iterdir():  # every rank was dumped 100 ms after the newest op
        os.utime(p, ns=(newest + STEP_NS, newest + STEP_NS))
    # a post-mortem's file times are no clock (issue 27): they cannot show the snapshot was fresh
    # either, so ranks 2 and 3 are suspects, never culprits
    d = diagnose(directory)
    assert d.verdict == "inconclusive" and not any(f.certain for f in d.findings)
    # where the dump times are when the ranks were seen (the sidecar's polls), they are: not a hang
    assert diagnose(directory, clock=True).verdict == "healthy"


def test_straggler_from_durations(tmp_path, diagnose):
    job = {r: [entry(i, i + 1, duration_ms=(5.0 if r == 2 else 205.0)) for i in range(20)] for r in range(4)}
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "straggler")
    assert f.culprit_ranks == (2,) and f.blocked_ranks == (0, 1, 3)


def test_straggler_from_enqueue_times_and_slow_is_not_stuck(tmp_path, diagnose):
    job = {r: [entry(i, i + 1, backend="gloo", state="scheduled", retired=True, duration_ms=None,
                     created=T0 + i * STEP_NS + (300_000_000 if r == 1 else r * 1000)) for i in range(20)]
           for r in range(4)}
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    assert [f.kind for f in d.findings] == ["straggler"] and d.findings[0].culprit_ranks == (1,)


def test_unmatched_p2p(tmp_path, diagnose):
    pp = {"5": ("pp", [0, 1])}
    send = entry(10, 0, op="send 0->1", pg=("5", "pp"), pg_id=1, state="started", is_p2p=True, p2p_seq=3,
                 line=70)
    job = healthy_job(world=2)
    job[0].append(send)
    d = diagnose(write(tmp_path, {r: dump(es, world=2, groups=pp) for r, es in job.items()}))
    f = _one(d, "unmatched_p2p")
    assert f.culprit_ranks == (1,) and f.blocked_ranks == (0,) and f.call_site == "/job/train.py:70 step"


def test_a_rank_waits_in_its_oldest_unfinished_op(tmp_path, diagnose):
    """Ops of a group (and sends to one peer) complete in order: where a rank has several unfinished, it
    waits in the oldest. Here every member is in collective 11 (or send/recv 3), which never finished; the
    rank that went on to issue 12 (or send 4) alone is not waiting for the others to issue those."""
    job = healthy_job()
    for r in range(4):
        job[r].append(entry(10, 11, state="started"))
    job[0].append(entry(11, 12, state="started"))
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "not_completed")
    assert f.collective_seq_id == 11 and f.blocked_ranks == (0, 1, 2, 3)
    assert sorted((w.rank, w.seq) for w in d.waits) == [(0, 11), (1, 11), (2, 11), (3, 11)]

    pp = {"5": ("pp", [0, 1])}
    job = healthy_job(world=2)
    job[0] += [entry(10, 0, op="send 0->1", pg=("5", "pp"), state="started", is_p2p=True, p2p_seq=3),
               entry(11, 0, op="send 0->1", pg=("5", "pp"), state="started", is_p2p=True, p2p_seq=4)]
    job[1].append(entry(10, 0, op="recv 1<-0", pg=("5", "pp"), state="started", is_p2p=True, p2p_seq=3))
    d = diagnose(write(tmp_path / "p2p", {r: dump(es, world=2, groups=pp) for r, es in job.items()}))
    assert sorted((w.rank, w.seq, w.p2p) for w in d.waits) == [(0, 3, True), (1, 3, True)]
    assert _one(d, "not_completed").blocked_ranks == (0, 1)


def test_matched_p2p_is_fine(tmp_path, diagnose):
    pp = {"5": ("pp", [0, 1])}
    job = healthy_job(world=2)
    job[0].append(entry(10, 0, op="send 0->1", pg=("5", "pp"), state="started", is_p2p=True, p2p_seq=3))
    job[1].append(entry(10, 0, op="recv 1<-0", pg=("5", "pp"), state="started", is_p2p=True, p2p_seq=3))
    d = diagnose(write(tmp_path, {r: dump(es, world=2, groups=pp) for r, es in job.items()}),
                 stall_after_s=10**9, clock=True)
    assert d.verdict == "healthy", [f.message for f in d.findings]


def test_coalesced_group_is_one_collective(tmp_path, diagnose):
    job = {}
    for r in range(2):
        es = [entry(i, i + 1) for i in range(3)]
        es += [entry(3, 4, op="all_reduce", sizes=((2,),)), entry(4, 4, op="all_reduce", sizes=((3,),)),
               entry(5, 4, op="allreduce_coalesced", sizes=((2,), (3,)))]
        job[r] = es
    job[1][4] = entry(4, 4, op="all_reduce", sizes=((5,),))
    d = diagnose(write(tmp_path, {r: dump(es, world=2) for r, es in job.items()}))
    f = _one(d, "size_mismatch")
    assert f.collective_seq_id == 4 and d.matched == 3


def test_missing_dump_is_inconclusive_culprit(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0, 1, 3], 11)
    del job[2]
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    f = _one(d, "missing_dump")
    assert f.culprit_ranks == (2,) and f.blocked_ranks == (0, 1, 3) and d.verdict == "inconclusive"


def test_missing_dump_without_hang(tmp_path, diagnose):
    job = healthy_job()
    del job[3]
    d = diagnose(write(tmp_path, {r: dump(es, world=4) for r, es in job.items()}))
    assert _one(d, "missing_dump").culprit_ranks == (3,)


def test_tie_between_two_ranks_uses_history(tmp_path, diagnose):
    job = healthy_job(world=2)
    job[1][6] = entry(6, 7, sizes=((9, 9),), created=job[1][6]["time_created_ns"])
    f = _one(diagnose(write(tmp_path, {r: dump(es, world=2) for r, es in job.items()})), "size_mismatch")
    assert f.culprit_ranks == (1,)


def test_verdict_does_not_depend_on_file_names_or_order(tmp_path, diagnose):
    job = healthy_job()
    _stuck(job, [0, 2, 3], 11)
    _stuck(job, [1], 11, op="broadcast")
    job[3][4] = entry(4, 5, sizes=((8, 4),), created=job[3][4]["time_created_ns"])
    dumps = {r: dump(es, world=4) for r, es in job.items()}
    results = set()
    for i, (prefix, order) in enumerate(itertools.product(["nccl_trace_rank_", "a_", "zz-"],
                                                          [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])):
        directory = tmp_path / f"run{i}"
        directory.mkdir()
        for r in order:  # creation order differs, and so does directory listing order
            sub = write(directory / f"sub{random.Random(i * 4 + r).randint(0, 3)}", {r: dumps[r]}, prefix=prefix)
            for p in sub.iterdir():
                os.utime(p, ns=(T0 + 10**12, T0 + 10**12))  # one dump time: messages quote wait ages
        out = diagnose(directory).to_json()
        results.add(json.dumps(out, sort_keys=True))
        shutil.rmtree(directory)
    assert len(results) == 1, "\n".join(results)


def test_batched_p2p_completes_with_its_coalesced_entry(tmp_path, diagnose):
    """batch_isend_irecv: NCCL leaves each send/recv 'scheduled', only nccl:coalesced completes."""
    pp = {"5": ("pp", [0, 1])}
    job = healthy_job(world=2)
    for r, ops in ((0, ["send 0->1", "recv 0<-1"]), (1, ["recv 1<-0", "send 1->0"])):
        for k, op in enumerate(ops):
            job[r].append(entry(10 + k, 10, op=op, pg=("5", "pp"), pg_id=1, state="scheduled", retired=False,
                                is_p2p=True, p2p_seq=7, duration_ms=None))
        job[r].append(entry(12, 10, op="coalesced", pg=("5", "pp"), pg_id=1, is_p2p=True, p2p_seq=7, sizes=()))
    d = diagnose(write(tmp_path, {r: dump(es, world=2, groups=pp) for r, es in job.items()}))
    assert d.verdict == "healthy", [f.message for f in d.findings]


def test_coalesced_members_take_the_closing_entrys_state():
    import pickle as _p

    from frexport.decode.read import decode_bytes

    es = [entry(0, 1, op="send 0->1", pg=("5", "pp"), is_p2p=True, p2p_seq=3, state="scheduled", retired=False),
          entry(1, 1, op="all_reduce"),
          entry(2, 1, op="coalesced", pg=("5", "pp"), is_p2p=True, p2p_seq=3)]
    d = decode_bytes(_p.dumps(dump(es, world=2), protocol=2), "c", rank=0)
    assert d.entries[0].finished and d.entries[0].state == "completed" and d.entries[0].op == "send"
    es[2] = entry(2, 1, op="coalesced", pg=("5", "pp"), is_p2p=True, p2p_seq=3, state="started")
    d = decode_bytes(_p.dumps(dump(es, world=2), protocol=2), "c", rank=0)
    assert not d.entries[0].finished  # the batch itself is still in flight


def test_the_highest_ranks_unreadable_dump_is_its_missing_dump(tmp_path, diagnose):
    """Issue 18 point 12: gloo dumps do not list the world, so with the highest rank's file truncated
    the world looked like 3 ranks and the verdict was healthy. A file whose name carries a rank speaks
    for that rank even when it cannot be read."""
    import shutil

    from tests.support import paths

    real = paths.ROOT / "tests" / "fixtures" / "real" / "healthy"
    for r in range(4):
        shutil.copy(real / f"trace_{r}", tmp_path / f"trace_{r}")
    (tmp_path / "trace_3").write_bytes((real / "trace_3").read_bytes()[:100])
    d = diagnose(tmp_path)
    f = _one(d, "missing_dump")
    assert f.culprit_ranks == (3,) and d.verdict != "healthy"
    assert "trace_3" in f.message  # which file, so the user knows where to look


@pytest.mark.parametrize("ops", [200, 300])
def test_a_size_mismatch_is_named_alike_with_more_distinct_ops_than_a_byte_holds(ops):
    """Each step a collective of its own size: 200 distinct ops (ids a byte holds, translated by table)
    or 300 (one by one); rank 2 goes wrong at step 150, and rank 3 first ran an extra op of its own so
    that its signatures are numbered differently from its peers'."""
    job = {r: [entry(i, i + 1, sizes=((i + 1, 4),), created=T0 + i * STEP_NS + r * 1000) for i in range(ops)]
           for r in range(4)}
    job[2][150] = entry(150, 151, sizes=((9999, 4),), created=job[2][150]["time_created_ns"])
    job[3] = [entry(0, 0, op="broadcast", pg=("1", "side"), pg_id=1, created=T0 - STEP_NS)] + \
        [{**e, "record_id": e["record_id"] + 1} for e in job[3]]
    d = analyze(list(traces({r: dump(es, world=4, groups={"1": ("side", [3])}) for r, es in job.items()}).values()))
    [f] = [f for f in d.findings if f.kind == "size_mismatch"]
    assert (f.culprit_ranks, f.collective_seq_id) == ((2,), 151) and "9999" in " ".join(f.details), f.details
