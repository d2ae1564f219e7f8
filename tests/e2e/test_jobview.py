"""The job-level view of a real multi-node hang: a torch 2.13 gloo job of two "nodes" on this machine (two
`torchrun --nnodes 2` launches, one c10d rendezvous on localhost, 2 ranks each, each under its own
`frexport-launch` directory with its own `frexport serve`), a real Prometheus with the shipped rules
scraping both sidecars, and `frexport jobview` pulling both over their peers endpoint. A rank of node 1
hangs in its data loader before the all_reduce of the default group, which spans both nodes."""

import json
import time

import pytest

from tests.support import paths
from tests.support.ports import free_port
from tests.support.promserver import PromServer
from tests.support.sidecar import Sidecar
from tests.support.torchjob import JOBS, TorchJob

POLL = "1s"
TRAIN = (JOBS / "train.py").read_text().splitlines()


def _line(text: str) -> int:
    return next(i for i, line in enumerate(TRAIN, 1) if text in line)


def _rank_labels(sc: Sidecar) -> set[int]:
    return {int(s.labels["rank"]) for s in sc.samples() if "rank" in s.labels}


@pytest.mark.slow
@pytest.mark.torchjob
def test_a_hang_across_nodes_is_named_once_and_diagnosed_in_one_bundle(tmp_path):
    port = free_port()
    env = {"STEPS": "100000", "STEP_S": "0.05", "STUCK_STEP": "15", "MARK_DIR": str(tmp_path)}
    node_env = [env, dict(env, STUCK_LOCAL_RANK="1")]
    dirs = [tmp_path / f"node{n}" / "shared" for n in (0, 1)]
    jobs, sidecars = [], []
    try:
        for n in (0, 1):
            dirs[n].parent.mkdir()
            rdzv = ("--nnodes=2", f"--node-rank={n}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                    "--rdzv-id=train")
            jobs.append(TorchJob("train.py", dirs[n], nproc=2, env=node_env[n], rendezvous=rdzv, name=f"-node{n}"))
        for n in (0, 1):
            sidecars.append(Sidecar("--sockets-dir", str(dirs[n]), "--poll-interval", POLL, "--stall-after", "3s",
                                    "--job-id", "train", "--peers-api", "--peers-api-unauthenticated",
                                    env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}, log=tmp_path / f"serve{n}.log"))
        view = Sidecar(*[a for sc in sidecars for a in ("--peer", f"http://127.0.0.1:{sc.port}")],
                       "--poll-interval", POLL, "--stall-after", "3s", "--evidence-dir", str(tmp_path / "evidence"),
                       env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}, log=tmp_path / "jobview.log", command="jobview")
        sidecars.append(view)
        jobs[1].wait_for(lambda: (tmp_path / "stuck_rank").exists(), timeout=120, what="a rank of node 1 to hang")
        stuck = int((tmp_path / "stuck_rank").read_text())
        node_ranks = [sorted(int(p.stem.split("-")[1]) for p in d.glob("rank-*.sock")) for d in dirs]
        assert stuck in node_ranks[1] and sorted(node_ranks[0] + node_ranks[1]) == [0, 1, 2, 3], node_ranks

        targets = [(f"127.0.0.1:{sc.port}", {"job": "train", "namespace": "ml", "pod": f"train-{n}"})
                   for n, sc in enumerate(sidecars[:2])]
        with PromServer(targets=targets, rule_files=[str(paths.RULES)], interval="2s") as prom:
            def alerts(state=None):
                return sorted((a["labels"]["alertname"], a["labels"].get("rank"), a["labels"].get("pod"))
                              for a in prom.alerts() if a["labels"]["alertname"].startswith("Frexport")
                              and a["labels"]["alertname"] != "FrexportCollectiveNearTimeout"
                              and (state is None or a["state"] == state))

            try:
                prom.wait_for(lambda: alerts("firing"), timeout=180, what="the alert to fire")
            except AssertionError:
                raise AssertionError(alerts()) from None
            assert alerts() == [("FrexportRankStalled", str(stuck), "train-1")]

        # the node-0 sidecar judges only its own ranks: blocked, and no series of a node-1 rank
        assert set(sidecars[0].statuses()) == set(node_ranks[0])
        assert set(sidecars[0].statuses().values()) == {"blocked"}
        assert _rank_labels(sidecars[0]) <= set(node_ranks[0])

        # the job-level view: one bundle for the whole job
        evidence = tmp_path / "evidence"
        end = time.monotonic() + 60
        while time.monotonic() < end and not list(evidence.glob("*/manifest.json")):
            time.sleep(0.5)
        bundles = [p.parent for p in evidence.glob("*/manifest.json")]
        assert len(bundles) == 1, (bundles, view.output())
        bundle = bundles[0]
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["reason"] == "missing_rank" and manifest["ranks"] == [0, 1, 2, 3]
        assert stuck in manifest["with_frames"]
        report = (bundle / "report.txt").read_text()
        call = f"train.py:{_line('dist.all_reduce(batch)')} train_step"
        hang = f"train.py:{_line('time.sleep(0.5)  # the data loader never returns')} load_batch"
        assert f"rank {stuck} hangs at " in report and hang in report, report
        assert "missing_rank [root cause]" in report and "all_reduce" in report, report
        assert f"call site: {JOBS / call}" in report, report
        assert f"culprit: {stuck}" in report, report
        assert "3 ranks" in report and "wait in all_reduce" in report, report
        assert (bundle / "stacks" / f"rank_{stuck}.traceback.txt").exists()
        assert {p.name for p in bundle.glob("trace_*")} == {f"trace_{r}" for r in range(4)}
    finally:
        for sc in sidecars:
            sc.__exit__(None, None, None)
        for job in jobs:
            job.kill()
