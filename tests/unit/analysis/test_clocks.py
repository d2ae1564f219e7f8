"""Every duration a report gives comes from the best clock there is and says which (analysis/clock.py):
the recorder's own times, the watchdog's timeout where it fired, a dump time only where it is a clock.
File times of a post-mortem are none: the same dumps touched to 2020 or to 2030 read the same."""

import json
import os
import re

import pytest

from frexport.analysis.report import render_text
from tests.support import paths
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, write

Y2020 = 1_577_836_800 * 10**9
Y2030 = 1_893_456_000 * 10**9  # touch -d 2030-01-01: after every entry, so "trusted" by age alone
ISSUED = T0 + 10 * STEP_NS  # when ranks 0, 1, 3 issue collective 11 in the jobs below
S = 10**9


def _touched(d, stamp):
    for p in d.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(stamp, stamp))
    return d


def _both(diagnose, d, **options):
    """The diagnosis with every file time in 2020 and in 2030; they must be the same, text and JSON."""
    old = diagnose(_touched(d, Y2020), **options)
    new = diagnose(_touched(d, Y2030), **options)
    assert json.dumps(old.to_json(), sort_keys=True) == json.dumps(new.to_json(), sort_keys=True)
    assert render_text(old) == render_text(new)
    return new


def _durations(text):
    return [float(x) * (1e-3 if unit == "ms" else 1) for x, unit in re.findall(r"(\d+\.\d) (s|ms)\b", text)]


def _missing_rank_job(rank2_until_s, world=4):
    """Ranks 0, 1, 3 wait in collective 11 of the default group; rank 2 never issues it but goes on
    recording broadcasts in a group of its own (a data loader's) until `rank2_until_s` after."""
    job = healthy_job(world=world)
    for r in (0, 1, 3):
        job[r].append(entry(10, 11, state="started", retired=False, created=ISSUED + r * 1000))
    for k in range(4):
        job[2].append(entry(10 + k, k + 1, op="broadcast", pg=("2", "loader"), pg_id=1,
                            created=ISSUED + int(rank2_until_s * S * k / 3) - 3000))
    return {r: dump(es, world=world, groups={"2": ("loader", [2])}) for r, es in job.items()}


def test_a_missing_rank_whose_own_recorder_went_on_past_the_stall_threshold_is_the_culprit(tmp_path, diagnose):
    d = _both(diagnose, write(tmp_path / "d", _missing_rank_job(6.0)))
    assert d.verdict == "unhealthy"
    [f] = d.findings
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("missing_rank", (2,), (0, 1, 3), True)
    assert f.reason.startswith("rank 2 recorded events until 6.0 s after ranks 0, 1, 3 issued it, without "
                               "issuing it: its own recorder's clock"), f.reason
    assert f.waited.clock == "recorder" and f.waited.rank == 2
    assert "the oldest for at least 6.0 s (until rank 2's last recorded event)" in f.message, f.message
    assert f.to_json()["waited"] == {"seconds": pytest.approx(6.0, abs=1e-5), "clock": "recorder", "rank": 2,
                                     "since": "issue", "at_least": True, "text": f.waited.text()}


def test_a_missing_rank_seen_by_its_recorder_for_less_than_the_threshold_stays_a_suspect(tmp_path, diagnose):
    d = _both(diagnose, write(tmp_path / "d", _missing_rank_job(2.0)))
    [f] = d.findings
    assert d.verdict == "inconclusive" and not f.certain and f.culprit_ranks == (2,)
    assert f.waited.clock == "recorder"
    assert "rank 0 waited at least 2.0 s (until rank 2's last recorded event)" in f.details


def test_later_events_of_a_rank_outside_the_wait_prove_nothing_about_the_missing_one(tmp_path, diagnose):
    """Ranks 0 and 1 wait in a tp collective for rank 2; rank 3, not in tp, records for 60 s after.
    Dumps are not simultaneous: rank 2 may have been dumped a moment after its peers issued it, so
    rank 3's clock says nothing of how long rank 2 stayed away, and the wait is not timed by it."""
    tp = {"1": ("tp", [0, 1, 2])}
    job = healthy_job()
    for r in (0, 1):
        job[r].append(entry(10, 1, pg=("1", "tp"), pg_id=1, state="started", retired=False, created=ISSUED))
    for k in range(4):
        job[3].append(entry(10 + k, 11 + k, created=ISSUED + k * 20 * S))
    d = _both(diagnose, write(tmp_path / "d", {r: dump(es, world=4, groups=tp) for r, es in job.items()}))
    [f] = [f for f in d.findings if f.root_cause]
    assert (f.kind, f.culprit_ranks, f.certain) == ("missing_rank", (2,), False)
    assert f.waited.rank in (0, 1) and f.waited.ns < S


def test_a_collective_every_member_issued_unfinished_long_after_by_a_members_recorder(tmp_path, diagnose):
    """NCCL: every member started collective 11 (discovered start times); rank 3 enqueued ops in
    another group for 8 s after it, and collective 11 is still unfinished in its dump."""
    job = healthy_job()
    for r in range(4):
        job[r].append(entry(10, 11, state="started", retired=False, created=ISSUED + r * 1000))
    for k, after_s in enumerate((2, 5, 8)):
        job[3].append(entry(11 + k, k + 1, pg=("3", "side"), pg_id=1, state="scheduled", retired=False,
                            created=ISSUED + after_s * S))
    d = _both(diagnose, write(tmp_path / "d", {r: dump(es, world=4, groups={"3": ("side", [3])})
                                               for r, es in job.items()}))
    [f] = [f for f in d.findings if f.collective_seq_id == 11]
    assert (f.kind, f.certain, d.verdict) == ("not_completed", True, "unhealthy")
    assert ("has not finished after at least 8.0 s (from its last member's issue until rank 3's last recorded "
            "event)") in f.message, f.message
    assert "the recorder's own clock" in f.reason


def test_the_watchdogs_timeout_times_the_wait_and_no_dump_time_contradicts_it(tmp_path, diagnose):
    """NCCL marked collective 11 retired without completing on ranks 0, 1, 3: the watchdog gave up
    on it after timeout_ms (600 s here). A dump time 20 s after the issue contradicts that."""
    job = healthy_job()
    for r in (0, 1, 3):
        job[r].append(entry(10, 11, state="scheduled", retired=True, created=ISSUED))
    d = write(tmp_path / "d", {r: dump(es, world=4) for r, es in job.items()})
    f = _both(diagnose, d).findings[0]
    assert (f.kind, f.culprit_ranks, f.certain) == ("missing_rank", (2,), True)
    assert f.waited.text() == "at least 600.0 s (rank 0's watchdog timeout, timeout_ms, expired)"
    _touched(d, ISSUED + 20 * S)
    for clock in (False, True):  # a post-mortem's file time, or a poll: either way the watchdog's is longer
        assert diagnose(d, clock=clock).findings[0].waited.clock == "timeout"


def test_a_dump_time_that_is_a_clock_times_the_wait_and_says_so(tmp_path, diagnose):
    job = healthy_job()
    for r in (0, 1, 3):
        job[r].append(entry(10, 11, state="started", retired=False, created=ISSUED))
    d = _touched(write(tmp_path / "d", {r: dump(es, world=4) for r, es in job.items()}), ISSUED + 20 * S)
    live = diagnose(d, clock=True)  # the sidecar's polls, a bundle it wrote
    [f] = live.findings
    assert f.certain and f.waited.text() == "20.0 s (from issue to rank 0's dump time)"
    assert "the oldest for 20.0 s (from issue to rank 0's dump time)" in f.message
    post = diagnose(d)  # the same file times after the fact: no clock, no duration from them
    assert not post.findings[0].certain and post.findings[0].waited.clock == "recorder"


def test_the_bundled_stuck_rank_reads_the_same_whatever_its_file_times(tmp_path, diagnose):
    src = paths.REAL_FIXTURES / "stuck_before_collective"
    d = tmp_path / "stuck"
    d.mkdir()
    for r in range(4):
        (d / f"trace_{r}").write_bytes((src / f"trace_{r}").read_bytes())
    out = _both(diagnose, d)
    [f] = out.findings
    assert (out.verdict, f.kind, f.culprit_ranks) == ("inconclusive", "missing_rank", (2,))
    text = render_text(out)
    assert all(x < 1.0 for x in _durations(text)), text  # the hang was dumped seconds in: no days, no years
    assert f.waited.clock == "recorder" and "rank 3 waited at least 0.2 ms (until rank 1's last recorded event)" \
        in f.details, f.details


def test_the_timeline_draws_unfinished_collectives_to_the_recorders_last_event_not_a_file_time(tmp_path):
    from frexport.analysis.engine import analyze
    from frexport.decode.load import load
    from frexport.export.timeline import write_timeline

    src = paths.REAL_FIXTURES / "stuck_before_collective"
    d = tmp_path / "stuck"
    d.mkdir()
    for r in range(4):
        (d / f"trace_{r}").write_bytes((src / f"trace_{r}").read_bytes())
    loaded = load([str(_touched(d, Y2030))], workers=1)
    write_timeline(str(tmp_path / "t.json"), loaded.traces, analyze(loaded.traces, loaded.errors), None)
    slices = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    stuck = [e for e in slices if e["args"].get("state") == "not finished when dumped"]
    assert sorted(e["pid"] for e in stuck) == [0, 1, 3]
    assert max(e["dur"] for e in slices) < 1e6  # microseconds: no bar to 2030
