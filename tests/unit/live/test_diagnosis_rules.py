"""The sidecar reaches the same conclusions as `frexport analyze` (issue 19), with its poll times as
the clock: a cross-group deadlock or a member that left a collective is one culprit, everyone else
waits (blocked) - never every rank of the cycle 'desynced'."""

import pytest

from frexport.config import Analysis
from frexport.decode.normalize import normalize
from frexport.decode.read import decode_bytes
from frexport.live.diagnosis import BLOCKED, DESYNCED, LiveAnalysis
from tests.support import paths
from tests.support.synth import STEP_NS, T0, dump, entry


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


def test_a_rank_the_job_level_view_has_not_been_sent_yet_is_no_hang_until_the_wait_is_a_stall():
    """At the start of a multi-node job the view hears of one pod's ranks before the other's: they
    wait in a collective a moment for ranks that no pod has sent yet. Not a hang (a bundle was written
    for one, CI); the same absence once the wait lasts past the threshold is."""
    live = LiveAnalysis(Analysis(stall_after=5.0), scoped=False)
    moment = live.run({r: d for r, d in _polled("stuck_before_collective", 4, age_s=0.01).items() if r != 2})
    assert moment.new_root_causes == [] and set(moment.statuses.values()) == {"ok"}
    later = live.run({r: d for r, d in _polled("stuck_before_collective", 4).items() if r != 2})
    assert [(f.kind, f.culprit_ranks) for f in later.new_root_causes] == [("missing_dump", (2,))]


def _gloo(seqs_done: int, in_flight: int | None, created: dict[int, int], rank: int) -> list[dict]:
    """A gloo rank's records: collectives 1..seqs_done finished (retired), then `in_flight` issued at
    created[in_flight] and not finished (gloo marks neither start nor completion, only retirement)."""
    es = [entry(i - 1, i, backend="gloo", state="scheduled", retired=True, created=T0 + i * STEP_NS + rank * 1000,
                duration_ms=None) for i in range(1, seqs_done + 1)]
    if in_flight is not None:
        es.append(entry(in_flight - 1, in_flight, backend="gloo", state="scheduled", retired=False,
                        created=created[in_flight], duration_ms=None))
    return es


def _seen(records: dict[int, list[dict]], seen_at: dict[int, int]) -> dict:
    return {r: normalize(dump(es, world=len(records)), f"rank-{r}", "pickle", rank=r, dumped_at_ns=seen_at[r])
            for r, es in records.items()}


def test_ranks_polled_either_side_of_a_late_members_arrival_are_not_stuck_inside():
    """Ranks are polled one by one. Rank 3 issues collective 6 four seconds after its peers (a slow
    start on a loaded machine). Rank 0 is polled just before rank 3 arrives (in collective 6 for 3.9 s),
    ranks 1-3 just after (all in it, the collective in flight). Every member issued it and rank 0 waited
    past the threshold, but not in a collective every member had joined: no hang, nobody stalled."""
    issue, late = T0 + 6 * STEP_NS, T0 + 6 * STEP_NS + 4 * 10**9
    records = {r: _gloo(5, 6, {6: late if r == 3 else issue + r * 1000}, r) for r in range(4)}
    seen = {0: issue + int(3.9e9), 1: late + 10**7, 2: late + 2 * 10**7, 3: late + 3 * 10**7}
    result = LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen))
    assert [f.kind for f in result.diagnosis.findings if f.root_cause] == []
    assert set(result.statuses.values()) == {"ok"}
    # the same collective still unfinished 3 s after its last member joined, rank 0 seen then: a hang
    seen[0] = late + int(3.1e9)
    result = LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen))
    [f] = [f for f in result.diagnosis.findings if f.root_cause]
    assert f.kind == "not_completed" and f.waited.ns == int(3.1e9), f


def test_the_last_collective_of_a_job_seen_unfinished_on_a_rank_polled_before_it_ended_is_no_failure():
    """A job ends: ranks 1-3 are polled after the last collective finished, rank 0 a moment before.
    Members that finished what another still waits in failed out of it only where that rank was seen
    waiting well after every member had issued it."""
    records = {r: _gloo(59, None, {}, r) for r in (1, 2, 3)}
    last = T0 + 59 * STEP_NS
    records[0] = _gloo(58, 59, {59: last}, 0)
    seen = {0: last + 10**7, 1: last + 5 * 10**8, 2: last + 5 * 10**8, 3: last + 5 * 10**8}
    result = LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen))
    assert [f.kind for f in result.diagnosis.findings if f.root_cause] == [], result.diagnosis.findings
    assert set(result.statuses.values()) == {"ok"}
    # rank 0 seen 10 s after every member issued it, still in it, the others done: they failed out
    seen[0] = last + 10 * 10**9
    result = LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen))
    [f] = [f for f in result.diagnosis.findings if f.root_cause]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("not_completed", (1, 2, 3), (0,))


def test_a_rank_polled_just_before_its_peers_completed_more_collectives_is_not_desynced():
    """Rank 0 is polled in collective 20; ranks 1-3 a moment later, when 20 and 21 have completed.
    Peers that completed collectives past a rank's last one say it skipped one only where that rank
    was seen the stall threshold after they issued them."""
    c20 = T0 + 20 * STEP_NS
    records = {r: _gloo(21, None, {}, r) for r in (1, 2, 3)}
    records[0] = _gloo(19, 20, {20: c20}, 0)
    seen = {0: c20 + 5 * 10**7, 1: c20 + 3 * 10**8, 2: c20 + 3 * 10**8, 3: c20 + 3 * 10**8}
    result = LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen))
    assert set(result.statuses.values()) == {"ok"}, result.statuses
    # rank 0 seen 10 s later, still with nothing past collective 20: its peers' 21 paired with something else
    seen[0] = c20 + 10 * 10**9
    assert LiveAnalysis(Analysis(stall_after=3.0)).run(_seen(records, seen)).statuses[0] == "desynced"


def _planted(world_dir, ranks=(7, 8, 9)) -> dict[int, bytes]:
    """One-entry JSON dumps claiming `ranks`, made of rank 0's first entry (a previous job's leftovers
    look alike): the real job's times, group 0, nothing after collective 1."""
    import json

    doc = json.loads((world_dir / "json" / "trace_0.json").read_bytes())
    doc["entries"] = doc["entries"][:1]
    return {r: json.dumps(doc).encode() for r in ranks}


def test_planted_ranks_in_a_hung_jobs_dump_directory_never_vote_live():
    """Issue 37 class 4, on the real hung 4-rank gloo job: three one-entry dumps claiming ranks 7-9 turned
    the live diagnosis around ("desync: ranks 0, 1, 3 issued all_reduce that ranks 2, 7-9 never issued",
    0, 1, 3 desynced, the culprit 2 ok). They are input errors; rank 2 is stalled, its peers blocked."""
    from frexport.live.diagnosis import STALLED

    polled = _polled("stuck_before_collective", 4)
    seen = max(d.dumped_at_ns for d in polled.values())
    for r, body in _planted(paths.REAL_FIXTURES / "stuck_before_collective").items():
        polled[r] = decode_bytes(body, f"planted-{r}", rank=r, dumped_at_ns=seen)
    result = LiveAnalysis(Analysis(stall_after=5.0), scoped=False).run(polled)
    assert {r: result.statuses[r] for r in range(4)} == {0: BLOCKED, 1: BLOCKED, 2: STALLED, 3: BLOCKED}
    assert [f.culprit_ranks for f in result.new_root_causes] == [(2,)]
    assert {e.rank for e in result.diagnosis.input_errors} == {7, 8, 9}


def test_planted_ranks_never_vote_post_mortem_whatever_the_file_times(diagnose, tmp_path):
    import shutil

    from tests.support.filetimes import copies

    src = tmp_path / "src"
    shutil.copytree(paths.REAL_FIXTURES / "stuck_before_collective", src)
    for r, body in _planted(src).items():
        (src / f"trace_{r}.json").write_bytes(body)
    for variant, d in copies(src, tmp_path / "v"):
        out = diagnose(d)
        assert out.findings[0].culprit_ranks == (2,), (variant, [f.message for f in out.findings])
        assert {e.rank for e in out.input_errors} == {7, 8, 9}, variant
