"""One root cause per hang at scale (issue 37, class 2), on a real torch 2.13 gloo job
(tests/realjobs/scenarios/pp_dp_tp_stuck.py): 16 ranks, pp 2 x dp 2 x tp 4; stage 0's rank r sends its
activations to stage 1's rank r + 8 and receives its gradients back. Rank 9 sticks in host code before
its tp all_reduce: 8, 10, 11 wait for it in tp, stage 0's ranks 0-3 wait in recv (gloo records no
point-to-point op: their dumps show them waiting for nothing), 4-7 and 12-15 in their dp groups.

With the ranks' stacks, 0-3 are inside torch.distributed recv: blocked, folded under rank 9 as
consequences, with the peer each receives from where py-spy's arguments name it. Without stacks the
dumps cannot tell rank 9 from 0-3 (any of them may wait in a recv for another): one finding says so and
where each one's peers wait, instead of five equal root causes. Post-mortem on every file-time
variant; live, the candidates are stalled and the rest blocked. pp_dp_tp_stuck_24 is the same job with
dp 3, the issue's 24 ranks: rank 13 sticks."""

import json
import shutil

import pytest

from frexport.live.diagnosis import BLOCKED, STALLED
from tests.support import paths
from tests.support.captured import live_pass
from tests.support.filetimes import copies

# job -> (dp size, the stuck rank); tp 4, pp 2: stage 0's rank r feeds stage 1's rank r + 4 * dp
JOBS = {"pp_dp_tp_stuck": (2, 9), "pp_dp_tp_stuck_24": (3, 13)}


def _diagnose(diagnose, tmp_path, job: str, stacks: str):
    """The job's dumps with py-spy's and faulthandler's stacks, faulthandler's alone, or none."""
    src = tmp_path / "src"
    shutil.copytree(paths.REAL_FIXTURES / job, src)
    for p in (src / "stacks").iterdir():
        if stacks == "none" or (stacks == "faulthandler" and p.name.endswith(".pyspy_dump.txt")):
            p.unlink()
    out = {v: diagnose(d) for v, d in copies(src, tmp_path / "v")}
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out.values()}) == 1  # file times change nothing
    d = out["captured"]
    assert [f for f in d.findings if f.root_cause] == d.findings[:1], [(f.kind, f.message) for f in d.findings]
    return d, d.findings[0]


def _dp(job: str, r: int) -> tuple[tuple[int, ...], str]:
    """Stage 0's rank r's dp peers, and its dp group's name (created after the tp groups, one per tp rank)."""
    dp, _ = JOBS[job]
    return tuple(r + 4 * d for d in range(1, dp)), str(2 * dp + 1 + r)


@pytest.mark.parametrize("job", sorted(JOBS))
@pytest.mark.parametrize("stacks", ["pyspy", "faulthandler"])
def test_ranks_inside_recv_are_blocked_behind_the_one_root_cause(diagnose, tmp_path, job, stacks):
    dp, stuck = JOBS[job]
    world = 8 * dp
    d, f = _diagnose(diagnose, tmp_path, job, stacks)
    assert (f.kind, f.culprit_ranks) == ("missing_rank", (stuck,)), f.message
    assert f.blocked_ranks == tuple(r for r in range(world) if r != stuck)
    assert len(d.findings) == 1, [(g.kind, g.message) for g in d.findings]
    want = [((), (r, *_dp(job, r)[0])) for r in range(4)]
    assert [(c.culprit_ranks, c.blocked_ranks) for c in f.consequences] == want
    for r, c in enumerate(f.consequences):
        peers, group = _dp(job, r)
        assert c.message.startswith(f"rank {r} waits in torch.distributed recv (")
        assert "pp_dp_tp_stuck.py:32 stage0: blocked where the recorder does not show it, not a culprit" in c.message
        assert f"{'rank' if len(peers) == 1 else 'ranks'} {', '.join(map(str, peers))} wait" in c.message
        assert f"for it in all_reduce (collective 4 of group {group} (dp))" in c.message
        feeds = r + 4 * dp  # the stage 1 rank it receives its gradients from
        assert (f"(from rank {feeds}, {'the culprit' if feeds == stuck else 'blocked too'})" if stacks == "pyspy"
                else "(peer not known)") in c.message, c.message
        assert f"consequence: {c.message}" in f.details


@pytest.mark.parametrize("job", sorted(JOBS))
def test_without_stacks_the_candidates_are_said_to_be_indistinguishable(diagnose, tmp_path, job):
    dp, stuck = JOBS[job]
    d, f = _diagnose(diagnose, tmp_path, job, "none")
    cands = (0, 1, 2, 3, stuck)
    assert (f.kind, f.culprit_ranks, f.certain, d.verdict) == ("missing_rank", cands, False, "inconclusive")
    assert f.blocked_ranks == tuple(r for r in range(8 * dp) if r not in cands)
    assert f.message.startswith(f"ranks 0-3, {stuck} cannot be told apart by these dumps")
    assert "send or recv" in f.message and "gloo records no point-to-point op" in f.reason
    # where each candidate's peers wait for it, and where it was last
    line = next(x for x in f.details if x.startswith(f"rank {stuck} "))
    tp_peers = ", ".join(str(r) for r in range(4 * dp, 4 * dp + 4) if r != stuck)
    assert f"all_reduce (collective 4 of group {dp + 1} (tp)) that ranks {tp_peers} wait in" in line
    for r in range(4):
        line = next(x for x in f.details if x.startswith(f"rank {r} "))
        assert f"(collective 4 of group {_dp(job, r)[1]} (dp))" in line and "stage0" in line


@pytest.mark.parametrize("job", sorted(JOBS))
def test_live_the_candidates_are_stalled_the_rest_blocked(job):
    dp, stuck = JOBS[job]
    live = live_pass(paths.REAL_FIXTURES / job)
    f = live.diagnosis.findings[0]
    assert (f.culprit_ranks, f.certain) == ((0, 1, 2, 3, stuck), True), f.message
    assert [g for g in live.diagnosis.findings if g.root_cause] == live.new_root_causes == [f]
    assert live.statuses == {r: STALLED if r in f.culprit_ranks else BLOCKED for r in range(8 * dp)}
