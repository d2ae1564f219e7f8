"""Two looks decide (issue 27, deliverable 6), on real torch 2.13 gloo jobs seen by `frexport snapshot
--rounds 2 --gap 6` (tests/realjobs: two_looks_hung is stuck_before_collective, two_looks_running is
straggler_2d mid-run): per group `progressing` or `hung`, with the ranks that moved; a suspect of a
hung group is certain, whatever the file times."""

import json

from frexport.analysis.looks import HUNG, PROGRESSING, GroupProgress, decide, gap_seconds, look_dirs, progress
from frexport.decode.load import load
from tests.support import paths
from tests.support.filetimes import copies

FIXTURES = paths.REAL_FIXTURES


def _two_looks(diagnose, d, stall_after_s=5.0):
    first, second = look_dirs(str(d))
    before, after = load([first], workers=1), load([second], workers=1)
    groups = progress(before.traces, after.traces)
    return decide(diagnose(second, stall_after_s=stall_after_s), groups, gap_seconds(str(d)), stall_after_s)


def _same(diagnose, src, tmp_path, **kw):
    out = [_two_looks(diagnose, d, **kw) for _, d in copies(src, tmp_path)]
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out}) == 1
    return out[0]


def test_a_group_no_rank_moved_in_is_hung_and_its_suspect_certain(diagnose, tmp_path):
    d = _same(diagnose, FIXTURES / "two_looks_hung", tmp_path)
    assert d.verdict == "unhealthy" and len(d.findings) == 1
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("missing_rank", (2,), (0, 1, 3), True)
    assert "no rank of group 0 (default_pg) moved between two looks 6.0 s apart" in f.reason
    [g] = d.progress
    assert (g.state, g.moved, g.waiting) == (HUNG, (), (0, 1, 3))
    assert d.to_json()["looks"]["groups"][0]["state"] == "hung"


def test_looks_closer_than_the_stall_threshold_decide_nothing(diagnose, tmp_path):
    d = _same(diagnose, FIXTURES / "two_looks_hung", tmp_path, stall_after_s=60.0)
    assert d.verdict == "inconclusive" and "under the stall threshold" in d.findings[0].reason


def test_every_group_of_a_running_job_progresses(diagnose, tmp_path):
    d = _same(diagnose, FIXTURES / "two_looks_running", tmp_path)
    assert {g.state for g in d.progress} == {PROGRESSING}
    assert sorted(g.moved for g in d.progress) == [(0, 1), (0, 2), (1, 3), (2, 3)]  # every tp and dp pair
    assert not any(f.kind == "missing_rank" for f in d.findings)  # a straggler, never a hang


def test_a_suspect_whose_group_moved_is_cleared(diagnose):
    """A look whose suspect (rank 2 has not issued all_reduce 4) sits in a group that moved since the
    look before: the ranks were computing, not hung."""
    later = diagnose(paths.REAL_FIXTURES / "stuck_before_collective")
    assert later.verdict == "inconclusive"
    out = decide(later, [GroupProgress("0", "default_pg", PROGRESSING, (0, 1, 2, 3), (0, 1, 3))], 6.0, 5.0)
    assert out.findings == [] and out.verdict == "healthy"
    assert any(n.startswith("cleared by the second look: rank 2 has not issued") for n in out.notes)


def test_a_send_recv_hang_the_recorder_cannot_see_is_certain_after_two_looks(diagnose, tmp_path):
    """p2p_wrong_peer seen by `frexport snapshot --rounds 2 --gap 6 --stacks`: faulthandler stacks name
    no peer, so no culprit; but every rank sat in the same send/recv in both looks while no recorded
    op moved: a certain hang, every rank's wait listed (the CLI passes the ranks whose stacks stayed)."""
    from frexport.analysis.whereabouts import places
    from frexport.decode.stacks import read_stack_dir

    for _, d in copies(FIXTURES / "two_looks_p2p", tmp_path):
        first, second = look_dirs(str(d))
        before, after = places(read_stack_dir(first)[0]), places(read_stack_dir(second)[0])
        still = frozenset(r for r, p in after.items() if before.get(r) == p)
        assert still == {0, 1, 2, 3}
        groups = progress(load([first], workers=1).traces, load([second], workers=1).traces)
        out = decide(diagnose(second), groups, gap_seconds(str(d)), 5.0, still)
        assert out.verdict == "unhealthy" and len(out.findings) == 1
        f = out.findings[0]
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("unmatched_p2p", (), (0, 1, 2, 3), True)
        assert "the same calls in two looks 6.0 s apart" in f.message
        # one look of it alone: inconclusive
        assert diagnose(second).verdict == "inconclusive"
