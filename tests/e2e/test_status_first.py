"""Status first, end to end on a real job: a stall is named as it passes the threshold, whatever the
analysis interval (issue 29: "a stall named within the threshold plus 1 s")."""

import time

import pytest

from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob, torch_envs

STALL_S = 3.0


def _named_after(job: TorchJob, mark_dir, named) -> float | None:
    """Seconds from rank 2's hang to `named()` first holding; None if it does not within 30 s past
    the threshold."""
    job.wait_for(lambda: (mark_dir / "stuck").exists(), timeout=120, what="rank 2 to get stuck")
    stuck_at = float((mark_dir / "stuck").read_text())
    while time.time() < stuck_at + STALL_S + 30:
        if named():
            return time.time() - stuck_at
        time.sleep(0.1)
    return None


@pytest.mark.torchjob
@pytest.mark.parametrize("version", sorted(torch_envs()))
def test_a_suspected_stall_is_analysed_often_so_it_is_named_as_it_passes_the_threshold(tmp_path, version):
    """The analysis runs every minute here; once status reads show rank 0, 1 and 3 waiting in a
    collective that stopped moving, it runs every `suspected_interval` (0.5 s) instead. On every torch:
    each offers its status differently (the agent reads 2.15's per-backend recorders)."""
    shared = tmp_path / "shared"
    env = {"STEPS": "400", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "40", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env, bin_dir=torch_envs()[version]) as job, \
            Sidecar("--sockets-dir", str(shared), "--stall-after", f"{STALL_S}s",
                    env={"FREXPORT_ANALYSIS__INTERVAL": "60s"}, log=tmp_path / "serve.log") as sc:
        after = _named_after(job, tmp_path, lambda: sc.statuses().get(2) == "stalled")
        output = sc.output()
    assert after is not None, output
    # threshold + 1 s is the goal on a quiet machine; the slack is for a loaded test machine, and far
    # below the minute the analysis interval alone would take
    assert after < STALL_S + 1.0 + 4.0, (after, output)


@pytest.mark.torchjob
def test_the_job_view_hears_a_pods_suspicion_and_names_the_stall_as_soon(tmp_path):
    """Issue 29, point 5: the job-level view analyses every minute here; the pod's sidecar says in its
    peers answer that it suspects a stall, and the view then analyses every 0.5 s too."""
    shared = tmp_path / "shared"
    env = {"STEPS": "400", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "40", "MARK_DIR": str(tmp_path)}
    slow = {"FREXPORT_ANALYSIS__INTERVAL": "60s"}
    with TorchJob("train.py", shared, env=env) as job, \
            Sidecar("--sockets-dir", str(shared), "--stall-after", f"{STALL_S}s", "--job-id", "train",
                    "--peers-api", "--peers-api-unauthenticated", env=slow, log=tmp_path / "serve.log") as pod, \
            Sidecar("--peer", f"http://127.0.0.1:{pod.port}", "--poll-interval", "1s", "--stall-after",
                    f"{STALL_S}s", env=slow, log=tmp_path / "jobview.log", command="jobview") as view:
        after = _named_after(job, tmp_path, lambda: "found missing_rank: rank 2 never issued" in view.output())
        output = view.output()
    assert after is not None, output
    # the pod's read and the view's pull each add up to a second to the pod's own latency
    assert after < STALL_S + 1.0 + 6.0, (after, output)
