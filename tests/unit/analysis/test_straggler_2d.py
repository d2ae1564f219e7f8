"""Stragglers in 2D parallelism (issue 27, class 3): lateness a rank inherits from a peer it waited
for is not its own; one finding per source of delay. On a real torch 2.13 gloo job (a 2x2 tp x dp
grid, rank 0 data-starved; fixtures straggler_2d and its mid-run snapshot) and on the issue's 4x4
grid simulated at the scale that 2 cores cannot run for real (16 ranks, gloo-shaped dumps)."""

import json

from tests.support import paths
from tests.support.filetimes import copies
from tests.support.synth import T0, dump, entry, write

FIXTURES = paths.REAL_FIXTURES


def _one_straggler(d):
    assert [f.kind for f in d.findings] == ["straggler"], [(f.kind, f.message) for f in d.findings]
    return d.findings[0]


def _same(diagnose, src, tmp_path):
    out = [diagnose(d) for _, d in copies(src, tmp_path)]
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out}) == 1
    return out[0]


def test_only_the_data_starved_rank_is_a_straggler(diagnose, tmp_path):
    """Rank 1 waits for rank 0 in tp, so it reaches its dp all_reduce with rank 3 late every step:
    inherited, not its own."""
    f = _one_straggler(_same(diagnose, FIXTURES / "straggler_2d", tmp_path))
    assert f.culprit_ranks == (0,) and f.blocked_ranks == (1, 2)
    assert 300 <= int(f.message.split("a median ")[1].split(" ms")[0]) <= 600  # it sleeps 0.4 s a step
    assert "inherits from a peer it waited for" in f.reason


def test_a_mid_run_snapshot_of_that_job_is_the_straggler_not_a_hang(diagnose, tmp_path):
    """Caught mid-run, the straggler's peers wait for it inside a collective: its usual lateness, or a
    hang that began just now; one look cannot tell, so it is said under the straggler, not as a
    second fault."""
    d = _same(diagnose, FIXTURES / "straggler_2d_midrun", tmp_path)
    f = _one_straggler(d)
    assert f.culprit_ranks == (0,)
    assert any(line.startswith("now: ") and "one look cannot tell" in line for line in f.details), f.details


def _grid(late_rank: int, lateness_ns: int, steps: int = 12, n: int = 4, nccl: bool = False) -> dict[int, list[dict]]:
    """An n x n tp x dp grid run step by step: each step all_reduces on tp (ranks n*i..n*i+n-1), then on
    dp (ranks j, j+n, ...); a collective ends when its last member arrives; `late_rank` starts every
    step `lateness_ns` late (its data loader). `nccl`: the entries carry NCCL's durations (from each
    member's start to the collective's end), as with timing enabled; else gloo's enqueue times only."""
    world = n * n
    tp = {r: r // n for r in range(world)}
    dp = {r: r % n for r in range(world)}
    free = {r: T0 + r * 1000 for r in range(world)}  # when each rank is done with its last collective
    job: dict[int, list[dict]] = {r: [] for r in range(world)}
    for step in range(steps):
        arrive = {r: free[r] + 50_000_000 + (lateness_ns if r == late_rank else 0) for r in range(world)}
        for kind, of, pg0 in (("tp", tp, 1), ("dp", dp, 1 + n)):
            done = {}
            for r in range(world):
                members = [m for m in range(world) if of[m] == of[r]]
                done[r] = max(arrive[m] for m in members) + 1_000_000
                g = str(pg0 + of[r])
                timing = ({"backend": "nccl", "state": "completed", "duration_ms": (done[r] - arrive[r]) / 1e6}
                          if nccl else {"backend": "gloo", "state": "scheduled", "retired": True, "duration_ms": None})
                job[r].append(entry(len(job[r]), step + 1, pg=(g, kind), pg_id=pg0 + of[r], created=arrive[r],
                                    line=20 if kind == "tp" else 21, **timing))
            arrive = {r: done[r] + 5_000_000 for r in range(world)}
        free = {r: arrive[r] for r in range(world)}
    groups = {str(1 + i): ("tp", [r for r in range(world) if tp[r] == i]) for i in range(n)}
    groups |= {str(1 + n + j): ("dp", [r for r in range(world) if dp[r] == j]) for j in range(n)}
    return {r: dump(es, world=world, groups={k: v for k, v in groups.items() if r in v[1]}) for r, es in job.items()}


def test_4x4_grid_names_one_straggler_not_its_tp_peers(diagnose, tmp_path):
    """The issue's 16-rank grid: rank 5, 1.5 s late every step, made rank 4, 6, 7 late to their own dp
    collectives; the finding names rank 5 alone and every rank it holds back directly."""
    d = diagnose(write(tmp_path, _grid(5, 1_500_000_000)))
    f = _one_straggler(d)
    assert f.culprit_ranks == (5,)
    assert f.blocked_ranks == (1, 4, 6, 7, 9, 13)  # its tp peers and its dp peers


def test_4x4_grid_with_nccl_durations_names_one_straggler(diagnose, tmp_path):
    """Judged by durations (NCCL timing): rank 5's tp peers wait long in tp and then reach dp late, so
    their dp durations are short; that is inherited from the wait in tp, not their own."""
    f = _one_straggler(diagnose(write(tmp_path, _grid(5, 1_500_000_000, nccl=True))))
    assert f.culprit_ranks == (5,) and "shorter collective durations" in f.message
    assert f.blocked_ranks == (1, 4, 6, 7, 9, 13)


def test_healthy_grid_has_no_straggler(diagnose, tmp_path):
    assert diagnose(write(tmp_path, _grid(5, 0))).findings == []
