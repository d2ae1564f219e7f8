"""One root cause per hang at scale (issue 37, class 2), on a real torch 2.13 gloo job
(tests/realjobs/scenarios/pp_dp_tp_stuck.py): 16 ranks, pp 2 x dp 2 x tp 4; stage 0's rank r sends its
activations to stage 1's rank r + 8 and receives its gradients back. Rank 9 sticks in host code before
its tp all_reduce: 8, 10, 11 wait for it in tp, stage 0's ranks 0-3 wait in recv (gloo records no
point-to-point op: their dumps show them waiting for nothing), 4-7 and 12-15 in their dp groups.

With the ranks' stacks, 0-3 are inside torch.distributed recv: blocked, folded under rank 9 as
consequences, with the peer each receives from where py-spy's arguments name it. Without stacks the
dumps cannot tell rank 9 from 0-3 (any of them may wait in a recv for another): one finding says so and
where each one's peers wait, instead of five equal root causes. Post-mortem on every file-time
variant; live, the candidates are stalled and the rest blocked."""

import json
import shutil

import pytest

from frexport.live.diagnosis import BLOCKED, STALLED
from tests.support import paths
from tests.support.captured import live_pass
from tests.support.filetimes import copies

SRC = paths.REAL_FIXTURES / "pp_dp_tp_stuck"
OTHERS = tuple(r for r in range(16) if r != 9)
FEEDS = {0: 8, 1: 9, 2: 10, 3: 11}  # stage 0's rank -> the stage 1 rank it receives its gradients from


def _diagnose(diagnose, tmp_path, stacks: str):
    """The job's dumps with py-spy's and faulthandler's stacks, faulthandler's alone, or none."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    for p in (src / "stacks").iterdir():
        if stacks == "none" or (stacks == "faulthandler" and p.name.endswith(".pyspy_dump.txt")):
            p.unlink()
    out = {v: diagnose(d) for v, d in copies(src, tmp_path / "v")}
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out.values()}) == 1  # file times change nothing
    d = out["captured"]
    assert [f for f in d.findings if f.root_cause] == d.findings[:1], [(f.kind, f.message) for f in d.findings]
    return d, d.findings[0]


@pytest.mark.parametrize("stacks", ["pyspy", "faulthandler"])
def test_ranks_inside_recv_are_blocked_behind_the_one_root_cause(diagnose, tmp_path, stacks):
    d, f = _diagnose(diagnose, tmp_path, stacks)
    assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("missing_rank", (9,), OTHERS), f.message
    assert len(d.findings) == 1, [(g.kind, g.message) for g in d.findings]
    assert [(c.culprit_ranks, c.blocked_ranks) for c in f.consequences] == [((), (r, r + 4)) for r in range(4)]
    for r, c in enumerate(f.consequences):
        assert c.message.startswith(f"rank {r} waits in torch.distributed recv (")
        assert "pp_dp_tp_stuck.py:26 stage0: blocked where the recorder does not show it, not a culprit" in c.message
        assert f"rank {r + 4} waits for it in all_reduce (collective 4 of group {r + 5} (dp))" in c.message
        peer = FEEDS[r]
        assert (f"(from rank {peer}, {'the culprit' if peer == 9 else 'blocked too'})" if stacks == "pyspy"
                else "(peer not known)") in c.message, c.message
        assert f"consequence: {c.message}" in f.details


def test_without_stacks_the_candidates_are_said_to_be_indistinguishable(diagnose, tmp_path):
    d, f = _diagnose(diagnose, tmp_path, "none")
    assert (f.kind, f.culprit_ranks, f.certain, d.verdict) == ("missing_rank", (0, 1, 2, 3, 9), False, "inconclusive")
    assert f.blocked_ranks == (4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15)
    assert f.message.startswith("ranks 0-3, 9 cannot be told apart by these dumps")
    assert "send or recv" in f.message and "gloo records no point-to-point op" in f.reason
    # where each candidate's peers wait for it, and where it was last
    rank9 = next(x for x in f.details if x.startswith("rank 9 "))
    assert "all_reduce (collective 4 of group 3 (tp)) that ranks 8, 10, 11 wait in" in rank9
    for r in range(4):
        line = next(x for x in f.details if x.startswith(f"rank {r} "))
        assert f"that rank {r + 4} waits in; it last recorded an op at" in line and "stage0" in line


def test_live_the_candidates_are_stalled_the_rest_blocked():
    d, statuses = live_pass(SRC)
    f = d.findings[0]
    assert (f.culprit_ranks, f.certain) == ((0, 1, 2, 3, 9), True), f.message
    assert [g for g in d.findings if g.root_cause] == [f]
    assert statuses == {r: STALLED if r in f.culprit_ranks else BLOCKED for r in range(16)}
