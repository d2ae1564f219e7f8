"""A sidecar blames only ranks it watches: 8 pods' worth of live analysis on one 64-rank Megatron-like hang."""

import time

import pytest

from frexport.analysis import findings as F
from frexport.config import Analysis
from frexport.export.prometheus.waits import WaitsCollector
from frexport.live.diagnosis import BLOCKED, STALLED, LiveAnalysis
from frexport.live.state import LiveState
from tests.support import megatron


@pytest.fixture(scope="module")
def stuck_in_tp(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp")
    meta = megatron.generate(out, "missing_rank", "tp_mid", culprit=45)
    return meta, megatron.load(out)


@pytest.fixture(scope="module")
def stuck_in_dp(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp")
    meta = megatron.generate(out, "missing_rank", "dp", culprit=45)
    return meta, megatron.load(out)


def _pods(dumps, **kw):
    """Each pod's live analysis, on its own ranks' dumps only."""
    out = {}
    for pod in range(megatron.PODS):
        local = {r: dumps[r] for r in megatron.pod_ranks(pod)}
        out[pod] = LiveAnalysis(Analysis(stall_after=30.0)).run(local, **kw)
    return out


def _blamed(result) -> set[int]:
    ranks = {r for f in result.diagnosis.findings for r in f.culprit_ranks}
    ranks |= {r for f in result.diagnosis.findings if f.root_cause and f.kind in (F.NOT_COMPLETED, F.TIMEOUT)
              for r in f.blocked_ranks}
    return ranks | {r for r, s in result.statuses.items() if s == STALLED}


def test_only_the_pod_holding_the_culprit_names_it(stuck_in_tp):
    meta, dumps = stuck_in_tp
    assert meta["culprit"] == 45 and meta["pg_desc"] == "tp"
    results = _pods(dumps)
    home = megatron.pod_of(45)
    assert _blamed(results[home]) == {45}
    roots = [f for f in results[home].diagnosis.findings if f.root_cause and f.culprit_ranks]
    assert [(f.kind, f.culprit_ranks, f.pg_desc) for f in roots] == [(F.MISSING_RANK, (45,), "tp")]
    for pod, result in results.items():
        local = set(megatron.pod_ranks(pod))
        assert set(result.statuses) == local, pod  # statuses only for the ranks it watches
        if pod == home:
            continue
        assert _blamed(result) == set(), (pod, [f.message for f in result.diagnosis.findings])
        assert not [f for f in result.diagnosis.findings if f.kind == F.MISSING_DUMP], pod
        assert set(result.statuses.values()) == {BLOCKED}, (pod, result.statuses)


def test_a_culprit_missing_from_a_group_across_pods(stuck_in_dp):
    """Rank 45 never issued a data-parallel collective; its peer there (rank 37) is in another pod. That
    pod cannot tell who is at fault: its ranks are blocked. Rank 45's own pod names it, because its
    tensor-parallel peers then wait for it in their next collective."""
    meta, dumps = stuck_in_dp
    assert meta["pg_desc"] == "dp" and meta["group_ranks"] == [37, 45]
    results = _pods(dumps)
    for pod, result in results.items():
        assert _blamed(result) == ({45} if pod == megatron.pod_of(45) else set()), \
            (pod, [f.message for f in result.diagnosis.findings])
        assert not [f for f in result.diagnosis.findings if f.kind == F.MISSING_DUMP], pod
    peer_pod = results[megatron.pod_of(37)]
    assert peer_pod.statuses[37] == BLOCKED
    waits = [f for f in peer_pod.diagnosis.findings if f.kind == F.REMOTE_WAIT and 37 in f.blocked_ranks]
    assert waits and waits[0].pg_desc == "dp" and waits[0].culprit_ranks == ()
    assert "rank 45 of other pods" in waits[0].message


def test_one_sidecar_that_sees_the_whole_job_still_names_the_culprit(stuck_in_dp):
    _, dumps = stuck_in_dp
    result = LiveAnalysis(Analysis(stall_after=30.0)).run(dumps)
    assert _blamed(result) == {45}
    assert sum(1 for s in result.statuses.values() if s == BLOCKED) == 63


def _wait_samples(dumps, pod: int, read_ns: int) -> list:
    state = LiveState()
    for r in megatron.pod_ranks(pod):
        state.ingest(dumps[r], "dumps:x", read_ns)
    analysis = LiveAnalysis(Analysis(stall_after=30.0))
    analysis.run(state.latest_dumps())
    return [s for m in WaitsCollector(state, analysis).collect() for s in m.samples]


def test_wait_series_say_where_each_local_rank_waits_and_since_when(stuck_in_dp):
    """The series the job-wide rules join: rank 37 (another pod than the culprit) waits in the dp
    collective rank 45 never issued; its age is the dump's, however late the file is read."""
    meta, dumps = stuck_in_dp
    pod = megatron.pod_of(37)
    read_ns = time.time_ns()
    samples = _wait_samples(dumps, pod, read_ns)
    coll = [s for s in samples if s.name == "frexport_rank_waiting_collective"]
    assert {s.labels["rank"] for s in coll} == {str(r) for r in megatron.pod_ranks(pod)}
    mine = [s for s in coll if s.labels["rank"] == "37" and s.labels["pg_desc"] == "dp"]
    assert [(s.labels["op"], s.value) for s in mine] == [("_reduce_scatter_base", meta["collective_seq_id"])]
    since = [s for s in samples if s.name == "frexport_rank_waiting_since_timestamp_seconds"
             and s.labels["rank"] == "37" and s.labels["pg_desc"] == "dp"]
    age = read_ns / 1e9 - since[0].value
    assert 590 < age < 620  # gen_dumps writes a hang's dumps when the 600 s watchdog fires


def test_a_pipeline_neighbour_waits_in_recv_from_the_culprit(stuck_in_tp):
    """Rank 45 (stage 2) stopped mid-forward: rank 61 (stage 3, another pod) waits in the batched p2p with it."""
    _, dumps = stuck_in_tp
    samples = _wait_samples(dumps, megatron.pod_of(61), time.time_ns())
    p2p = [s for s in samples if s.name == "frexport_rank_waiting_p2p"]
    assert all(s.labels["op"] in ("send", "recv") and s.labels["pg_desc"] == "pp" for s in p2p)
    assert [s.labels["peer"] for s in p2p if s.labels["rank"] == "61"] == ["45"]


def test_a_wait_in_a_file_from_before_the_sidecar_started_is_as_long_as_the_recorder_proves(stuck_in_dp):
    """The same dumps, there before the sidecar started (a checkout: no file time is a clock): the age
    is the wait the analysis proved from the recorder and the watchdog, never the file's time."""
    from dataclasses import replace

    _, dumps = stuck_in_dp
    unclocked = {r: replace(d, dumped_at_is_clock=False) for r, d in dumps.items()}
    pod = megatron.pod_of(37)
    read_ns = time.time_ns()
    since = [s for s in _wait_samples(unclocked, pod, read_ns)
             if s.name == "frexport_rank_waiting_since_timestamp_seconds" and s.labels["rank"] == "37"
             and s.labels["pg_desc"] == "dp"]
    analysis = LiveAnalysis(Analysis(stall_after=30.0))
    analysis.run({r: unclocked[r] for r in megatron.pod_ranks(pod)})
    [w] = [w for w in analysis.latest.diagnosis.waits if w.rank == 37 and w.group.desc == "dp"]
    assert w.waited is not None and w.waited.clock != "dump_time"
    assert read_ns / 1e9 - since[0].value == pytest.approx(w.waited.ns / 1e9, abs=1e-3)
    assert read_ns / 1e9 - since[0].value < 590
