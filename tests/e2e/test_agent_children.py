"""The agent acts only in real ranks: not in a rank's children, not in a launcher that carries RANK.

A real torch 2.13 gloo job under frexport-launch + torchrun, where each rank starts a spawned
DataLoader worker and a subprocess importing torch.distributed (both inherit RANK, LOCAL_RANK and
torchelastic's variables), and the torchrun launcher carries RANK=5 as the Kubeflow training
operator sets it (the pod index). The sidecar must keep seeing both real ranks progress through
their own sockets, and no rank 5.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from frexport.decode.read import decode_bytes
from frexport.sources.http_client import Target, request
from tests.support.ports import free_port
from tests.support.proctree import kill_tree
from tests.support.sidecar import Sidecar
from tests.support.torchjob import BIN, JOBS, TorchJob, wait_until

STEPS = 60


@pytest.mark.torchjob
@pytest.mark.slow
def test_children_and_launcher_never_take_a_ranks_socket(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": str(STEPS), "STEP_S": "0.1", "CHILD_S": "3", "HOLD_S": "60", "MARK_DIR": str(tmp_path),
           "RANK": "5"}  # on the launcher, as the training operator sets it; torchrun gives its workers their own
    with TorchJob("train_children.py", shared, nproc=2, env=env) as job, \
            Sidecar("--sockets-dir", str(shared), "--poll-interval", "0.5s", log=tmp_path / "serve.log") as sc:
        seen_ranks: set[int] = set()
        progress: dict[int, list[float]] = {0: [], 1: []}

        def sample() -> bool:
            for s in sc.samples():
                if s.name == "frexport_rank_status" and s.value == 1.0:
                    seen_ranks.add(int(s.labels["rank"]))
                if s.name == "frexport_pg_last_completed_collective" and s.labels["pg"] == "0":
                    progress[int(s.labels["rank"])].append(s.value)
            return all((tmp_path / f"done_{r}").exists() for r in range(2)) and \
                all(p and p[-1] >= STEPS for p in progress.values())

        job.wait_for(sample, timeout=120, what=f"the sidecar to see both ranks complete {STEPS} collectives "
                                               f"(last seen: { {r: p[-1:] for r, p in progress.items()} }, "
                                               f"ranks {sorted(seen_ranks)})")
        time.sleep(1.0)  # a few more polls: still the ranks' own sockets after the children are gone
        sample()
        assert seen_ranks == {0, 1}, f"a child or the launcher registered as a rank: {seen_ranks}"
        assert not (shared / "rank-5.sock").exists() and not (shared / "rank-5.json").exists()
        for r in range(2):
            assert (shared / f"rank-{r}.sock").exists(), "a child removed the rank's socket when it exited"
            meta = json.loads((shared / f"rank-{r}.json").read_text())
            assert meta["pid"] == int((tmp_path / f"pid_{r}").read_text()), "the socket belongs to another process"
            assert progress[r][-1] >= STEPS
    assert "Fatal Python error" not in job.output()


@pytest.mark.torchjob
def test_one_process_per_pod_rank_without_local_rank_is_served(tmp_path):
    # A PyTorchJob that runs `python train.py` directly: the operator sets RANK, WORLD_SIZE and
    # MASTER_* on the container and no LOCAL_RANK. The agent serves it once it initializes its group.
    shared = tmp_path / "shared"
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               STEPS="3", HOLD_S="60", MARK_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    env.pop("LOCAL_RANK", None)
    cmd = [str(BIN / "frexport-launch"), "--dir", str(shared), "--", sys.executable, str(JOBS / "train.py")]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (tmp_path / "done_0").exists() and (shared / "rank-0.json").exists(), timeout=90,
                   what="the rank's steps and its socket")
        assert json.loads((shared / "rank-0.json").read_text())["pid"] == proc.pid  # exec'd: same pid
        r = request(Target(unix_path=str(shared / "rank-0.sock")), "POST", "/handler/fr_trace_json")
        assert r.status == 200 and len(decode_bytes(r.body, "json", rank=0, only="json").entries) >= 3
    finally:
        kill_tree(proc.pid)
        proc.wait(30)
