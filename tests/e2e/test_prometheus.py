"""Real Prometheus scraping `frexport serve` on a real stalled torch job: the alert names the culprit only."""

import shutil
import subprocess

import pytest

from tests.support import paths
from tests.support.promserver import PromServer
from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob

RULES = paths.RULES


@pytest.mark.torchjob
def test_rank_stalled_fires_for_the_culprit_and_no_other(tmp_path):
    shared = tmp_path / "shared"
    env = {"STEPS": "500", "STEP_S": "0.05", "STUCK_RANK": "2", "STUCK_STEP": "10", "MARK_DIR": str(tmp_path)}
    with TorchJob("train.py", shared, env=env) as job, \
            Sidecar("--sockets-dir", str(shared), "--poll-interval", "1s", "--stall-after", "3s",
                    env={"FREXPORT_ANALYSIS__INTERVAL": "1s"}, log=tmp_path / "serve.log") as sc, \
            PromServer(targets=[(f"127.0.0.1:{sc.port}", {"job": "train", "namespace": "ml", "pod": "train-0"})],
                       rule_files=[str(RULES)]) as prom:
        # promtool accepts what a real scrape serves
        body = sc.get("/metrics")
        check = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=body, capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        job.wait_for(lambda: (tmp_path / "stuck").exists(), what="rank 2 to get stuck")
        prom.wait_for(lambda: prom.query('frexport_rank_status{status="stalled"} == 1'), timeout=30,
                      what="the stall in Prometheus")
        stalled = prom.query('frexport_rank_status{status="stalled"} == 1')
        assert [s["metric"]["rank"] for s in stalled] == ["2"]
        blocked = sorted(s["metric"]["rank"] for s in prom.query('frexport_rank_status{status="blocked"} == 1'))
        assert blocked == ["0", "1", "3"]

        def firing():
            return [a for a in prom.alerts() if a["labels"]["alertname"] == "FrexportRankStalled"
                    and a["state"] == "firing"]

        prom.wait_for(firing, timeout=120, what="FrexportRankStalled to fire")  # the rule waits 1 minute
        alerts = [a for a in prom.alerts() if a["labels"]["alertname"].startswith("Frexport")]
        assert [(a["labels"]["alertname"], a["labels"]["rank"]) for a in alerts if a["state"] == "firing"] == [
            ("FrexportRankStalled", "2")]
        a = firing()[0]
        assert a["labels"]["severity"] == "critical" and a["labels"]["op"] == "all_reduce"
        assert a["labels"]["pg_desc"] == "default_pg" and a["labels"]["job"] == "train"
        assert a["annotations"]["description"].startswith("Job train (namespace ml): rank 2 has held up all_reduce")
        # the cross-rank rule sees the same stuck rank from the group's progress
        lag = prom.query('max by (namespace, job, pg) (frexport_pg_last_completed_collective)'
                         ' - on (namespace, job, pg) group_right'
                         ' max by (namespace, job, pg, pg_desc, rank) (frexport_pg_last_completed_collective)')
        assert all(float(s["value"][1]) == 0 for s in lag)  # a hang stops everyone: nobody completes past it
