"""The earliest proven fault is the root cause (issue 27, class 4), on a real torch 2.13 gloo job: a
coalesced all_reduce where rank 1 passes an extra tensor. gloo fails the collective and a peer (rank
0) dies of it while the culprit lives. The mismatch is the one root cause; the victim's death (its
stale dump, or no dump at all) and the waits are listed under it. The call site is the user's line,
not contextlib's `__exit__` that closes the coalescing manager."""

import json
import shutil

from frexport.model.call_site import Frame, is_library_frame
from tests.support import paths
from tests.support.filetimes import copies

SRC = paths.REAL_FIXTURES / "coalesced_extra_tensor"
SITE = "coalesced_extra_tensor.py:13 reduce_gradients"


def _diagnoses(diagnose, src, tmp_path):
    out = [diagnose(d) for _, d in copies(src, tmp_path)]
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out}) == 1  # file times change nothing
    return out[0]


def _check(d, consequence_kind):
    assert d.verdict == "unhealthy" and len(d.findings) == 1, [(f.kind, f.message) for f in d.findings]
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id, f.op) == (
        "size_mismatch", (1,), (0, 2, 3), 5, "all_reduce")
    assert f.root_cause and f.certain and f.call_site.endswith(SITE), f.call_site
    assert [c.kind for c in f.consequences] == [consequence_kind]
    assert f.consequences[0].culprit_ranks == (0,)
    assert any(line.startswith("consequence: rank 0 ") for line in f.details)
    assert f.to_json()["consequences"][0]["culprit_ranks"] == [0]
    return f


def test_mismatch_outranks_the_victims_stale_dump(diagnose, tmp_path):
    f = _check(_diagnoses(diagnose, SRC, tmp_path), "missing_rank")
    # rank 0 answered no stack at the look where 1-3 did: it left the job
    assert f.consequences[0].message.startswith("rank 0 left the job after collective 4 of group 0")


def test_mismatch_outranks_the_victims_missing_dump(diagnose, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    (src / "trace_0").unlink()
    (src / "json" / "trace_0.json").unlink()
    # its ring neighbours failed out of the collective without it: it left the job, whatever its dump
    f = _check(_diagnoses(diagnose, src, tmp_path / "v"), "missing_rank")
    assert f.consequences[0].reason.endswith("it left no dump"), f.consequences[0].reason


def test_call_sites_skip_library_frames():
    """One rule (model/call_site.py) for the recorder's call sites and the stacks' whereabouts."""
    for lib in ["/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py", "/usr/lib/python3.12/functools.py",
                "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py",
                "C:\\Python311\\Lib\\contextlib.py", "<frozen runpy>"]:
        assert is_library_frame(Frame("f", lib, 1)), lib
    for user in ["/job/train.py", "/opt/conda/lib/python3.10/site-packages/megatron/core/utils.py",
                 "/home/me/torchtitan/train.py"]:
        assert not is_library_frame(Frame("f", user, 1)), user


def test_a_mismatch_that_completed_does_not_absorb_an_unrelated_missing_dump(diagnose, tmp_path):
    """size_mismatch: rank 3's larger broadcast buffer completes silently. Rank 0's dump removed: nothing
    hangs after the mismatch, so the missing dump is a finding of its own, not its consequence."""
    src = tmp_path / "src"
    shutil.copytree(paths.REAL_FIXTURES / "size_mismatch", src)
    (src / "trace_0").unlink()
    (src / "json" / "trace_0.json").unlink()
    d = _diagnoses(diagnose, src, tmp_path / "v")
    assert [(f.kind, f.culprit_ranks, f.consequences) for f in d.findings] == [
        ("size_mismatch", (3,), ()), ("missing_dump", (0,), ())]


def test_a_hang_long_after_a_mismatch_the_ranks_got_past_is_a_fault_of_its_own():
    """gloo completes a bf16/fp16 all_reduce silently: the ranks go on. Rank 2 then never issues
    collective 21: that hang has its own culprit, not the mismatch 15 collectives earlier."""
    from frexport.analysis.engine import analyze
    from tests.support.synth import STEP_NS, T0, dump, entry, traces

    job = {r: [entry(i, i + 1, created=T0 + i * STEP_NS + r * 1000, dtype="BFloat16" if (r == 1 and i == 5)
                     else "Float") for i in range(20)] for r in range(4)}
    for r in (0, 1, 3):
        job[r].append(entry(20, 21, state="started", created=T0 + 20 * STEP_NS))
    d = analyze(list(traces({r: dump(es, world=4) for r, es in job.items()}).values()))
    kinds = {(f.kind, f.culprit_ranks, f.root_cause) for f in d.findings}
    assert ("missing_rank", (2,), True) in kinds and ("dtype_mismatch", (1,), False) in kinds, kinds
