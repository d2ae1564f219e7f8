"""No verdict depends on file times (issue 27, class 5): every real job's dumps, copied with the
times the capture gave them (a moment after each rank's newest event), fresh (`cp`, `touch`, a git
checkout) and back-dated (2020), give the same diagnosis, culprits and durations. A post-mortem's
file times are no clock; only `clock=True` (the sidecar's polls) makes them one."""

import json

import pytest

from tests.support import paths
from tests.support.filetimes import copies

FIXTURES = paths.REAL_FIXTURES
# the verdict and the culprits of each real job's first finding (None: healthy)
EXPECTED = {
    "all_to_all_split_mismatch": ("unhealthy", (1,)),
    "coalesced_extra_tensor": ("unhealthy", (1,)),
    "collective_type_mismatch": ("unhealthy", (1,)),
    "crashed_rank": ("unhealthy", (3,)),
    "cross_group_order": ("unhealthy", (6,)),
    "died_between_collectives": ("inconclusive", (3,)),
    "dtype_mismatch": ("unhealthy", (1,)),
    "extra_allreduce": ("inconclusive", (0,)),
    "healthy": ("healthy", None),
    "healthy_midrun": ("inconclusive", (4, 5, 6)),
    "killed_in_allreduce": ("unhealthy", (2,)),
    "killed_in_allreduce_8": ("unhealthy", (2,)),
    "p2p_wrong_peer": ("unhealthy", (2,)),
    "pp_dp_tp_stuck": ("inconclusive", (9,)),
    "pp_dp_tp_stuck_24": ("inconclusive", (13,)),
    "size_mismatch": ("unhealthy", (3,)),
    "slow_rank": ("unhealthy", (1,)),
    "straggler_2d": ("unhealthy", (0,)),
    "straggler_2d_midrun": ("unhealthy", (0,)),
    "stuck_before_collective": ("inconclusive", (2,)),
    "uneven_exit": ("unhealthy", (3,)),
    "uneven_exit_stale": ("unhealthy", (3,)),
    # torch 2.15's FlightRecorderHook on an asynchronous out-of-tree backend (entries retired at issue)
    "hooked_mixed_wait_gloo": ("inconclusive", (2,)),
    "hooked_mixed_wait_hooked": ("inconclusive", (2,)),
    "hooked_op_mismatch": ("unhealthy", (1,)),
    "hooked_size_mismatch": ("unhealthy", (3,)),
    "hooked_split_group": ("inconclusive", (2,)),
    "hooked_stuck_tp": ("inconclusive", (5,)),
    # the same hang on the PyPI (CUDA) wheels of later torch
    "torch-2.14.1/stuck_before_collective": ("inconclusive", (2,)),
    "torch-2.15.0/stuck_before_collective": ("inconclusive", (2,)),
}


def test_every_real_job_is_covered():
    # (two-look snapshots are covered with the same three copies in test_looks.py)
    # (profiler traces and native stacks captured from real jobs are no dumps: profile_*, native_stacks)
    found = [p.name for p in FIXTURES.iterdir() if p.is_dir()
             and not p.name.startswith(("two_looks", "torch-", "profile_", "native_stacks"))]
    found += [f"{p.parent.name}/{p.name}" for p in FIXTURES.glob("torch-*/*") if p.is_dir()]
    assert sorted(found) == sorted(EXPECTED)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_same_diagnosis_whatever_the_file_times(diagnose, tmp_path, scenario):
    out = {variant: diagnose(d) for variant, d in copies(FIXTURES / scenario, tmp_path)}
    docs = {v: json.dumps(d.to_json(), sort_keys=True) for v, d in out.items()}
    assert len(set(docs.values())) == 1, docs
    d = out["captured"]
    verdict, culprits = EXPECTED[scenario]
    assert d.verdict == verdict, [(f.kind, f.message) for f in d.findings]
    if culprits is None:
        assert d.findings == []
    else:
        assert d.findings[0].culprit_ranks == culprits, [(f.kind, f.message) for f in d.findings]


def test_several_dumps_of_a_rank_the_newest_by_content_wins(diagnose, tmp_path):
    """Two attempts' dumps of every rank in one folder, the older one with the newer file time and the
    name that sorts last: the dumps' own events say which is newer, so the stuck job's last dumps are
    diagnosed, not the healthy attempt before (issue 27: no verdict on file times, names or order)."""
    import os
    import shutil

    from tests.support.synth import T0, dump, healthy_job, write

    old = write(tmp_path / "old", {r: dump(es, world=4) for r, es in healthy_job(steps=3).items()},
                prefix="trace_")
    for i, (last, earlier) in enumerate([("a_last", "z_earlier"), ("z_last", "a_earlier")]):
        d = tmp_path / f"d{i}"
        shutil.copytree(FIXTURES / "stuck_before_collective", d / last)
        (d / earlier).mkdir()
        for p in old.iterdir():
            shutil.copy(p, d / earlier / p.name)
            os.utime(d / earlier / p.name, ns=(T0 * 2, T0 * 2))  # the older attempt touched later
        out = diagnose(d)
        assert out.findings and out.findings[0].culprit_ranks == (2,), [f.message for f in out.findings]
