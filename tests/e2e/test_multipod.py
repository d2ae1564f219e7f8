"""The job-wide culprit across pods, with a real Prometheus and the shipped rules: 8 real `frexport serve`
sidecars of 8 ranks each, one per pod, on generated 64-rank Megatron-like dumps (tp inside a pod, dp and
pp across pods). Four jobs run side by side (one Prometheus job label each): a rank stuck before a
data-parallel collective (its peer is in another pod), a rank stuck mid-forward in its tp group with the
others blocked through pp and dp, a hang inside a dp collective every member issued, and a healthy job."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from frexport.model.dump import group_name
from tests.support import megatron, paths
from tests.support.promserver import PromServer
from tests.support.sidecar import Sidecar

SCENARIOS = {  # job -> (gen_dumps fault, fault group, culprit)
    "stuck-dp": ("missing_rank", "dp", 45),
    "stuck-tp": ("missing_rank", "tp_mid", 45),
    "hung-dp": ("not_completed", "dp", 45),
    "healthy": ("none", "tp", None),
}


@pytest.mark.slow
def test_eight_pods_name_the_culprit_and_only_it(tmp_path):
    metas, dirs = {}, {}
    for job, (fault, group, culprit) in SCENARIOS.items():
        out = tmp_path / job / "all"
        metas[job] = megatron.generate(out, fault, group, culprit, dumped_at_ns=time.time_ns())
        dirs[job] = megatron.split(out, tmp_path / job, fmt="json")

    def start(item):
        job, pod = item
        # a short stall threshold and analysis interval: the rules' `for: 1m` is the long part
        return Sidecar("--dump-dir", str(dirs[job][pod]), "--stall-after", "3s",
                       env={"FREXPORT_ANALYSIS__INTERVAL": "2s"}, log=tmp_path / f"{job}-{pod}.log")

    items = [(job, pod) for job in SCENARIOS for pod in range(megatron.PODS)]
    sidecars = {}
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = {item: pool.submit(start, item) for item in items}
        errors = []
        for item, fut in futures.items():
            try:
                sidecars[item] = fut.result()
            except AssertionError as exc:  # stop the others before failing
                errors.append(exc)
        assert not errors, errors[0]
        targets = [(f"127.0.0.1:{sc.port}", {"job": job, "namespace": "ml", "pod": f"{job}-{pod}"})
                   for (job, pod), sc in sidecars.items()]
        # 32 targets on a loaded 2-core machine: a 1 s scrape interval (and timeout) drops scrapes
        with PromServer(targets=targets, rule_files=[str(paths.RULES)], interval="3s") as prom:
            def alerts(job, state=None):
                # FrexportCollectiveNearTimeout rightly fires for every rank of a hang dumped by the
                # watchdog (pending 600 s of a 600 s timeout): it is about time left, not about blame
                return sorted((a["labels"]["alertname"], a["labels"].get("rank"), a["labels"].get("pod"),
                               a["labels"].get("pg"), a["labels"].get("op"))
                              for a in prom.alerts() if a["labels"].get("job") == job
                              and a["labels"]["alertname"].startswith("Frexport")
                              and (job == "healthy" or a["labels"]["alertname"] != "FrexportCollectiveNearTimeout")
                              and (state is None or a["state"] == state))

            def all_fired():
                return all(alerts(job, "firing") for job in ("stuck-dp", "stuck-tp", "hung-dp"))

            try:
                prom.wait_for(all_fired, timeout=240, what="the three hangs' alerts to fire")  # rules wait 1 minute
            except AssertionError:
                raise AssertionError({job: alerts(job) for job in SCENARIOS}) from None

            # no sidecar names, or gives a status to, a rank of another pod; none is "missing its dump"
            for series in ("frexport_rank_status", "frexport_rank_stall_seconds", "frexport_rank_waiting_since"
                           "_timestamp_seconds"):
                for s in prom.query(series):
                    job, pod = s["metric"]["job"], int(s["metric"]["pod"].rsplit("-", 1)[1])
                    assert int(s["metric"]["rank"]) in megatron.pod_ranks(pod), (series, s["metric"])
            assert prom.query('frexport_findings{kind="missing_dump"}') == []

            # a rank stuck before a dp collective: its peer (rank 37) is in pod 4; named once, with its pod
            # (its tp peers in pod 5 then wait for it too: either group may be the one the alert shows)
            assert metas["stuck-dp"]["group_ranks"] == [37, 45]
            stuck_dp = alerts("stuck-dp")
            assert [(a[0], a[1], a[2]) for a in stuck_dp] == [("FrexportRankStalled", "45", "stuck-dp-5")], stuck_dp
            # (NCCL-shaped: the groups are filed under nccl:<name>, model.dump.group_name)
            assert stuck_dp[0][3:] in ((group_name(metas["stuck-dp"]["pg_name"], "nccl"), "_reduce_scatter_base"),
                                       (group_name(metas["stuck-tp"]["pg_name"], "nccl"), "all_reduce")), stuck_dp
            # stuck mid-forward in tp: 63 ranks blocked through tp, pp and dp; only 45 fires
            stuck_tp = alerts("stuck-tp")
            assert [(a[0], a[1], a[2]) for a in stuck_tp] == [("FrexportRankStalled", "45", "stuck-tp-5")], stuck_tp
            blocked = prom.query('count(frexport_rank_status{job="stuck-tp",status="blocked"} == 1)')
            assert float(blocked[0]["value"][1]) == 63
            # every member issued the dp collective and it never finished: the group and op, no rank
            assert alerts("hung-dp") == [("FrexportCollectiveHung", None, None,
                                          group_name(metas["hung-dp"]["pg_name"], "nccl"), "_reduce_scatter_base")]
            # healthy: nothing fires, nothing is pending
            assert alerts("healthy") == []
            assert prom.query('frexport:rank_root_cause_seconds{job="healthy"}') == []
    finally:
        for sc in sidecars.values():
            sc.__exit__(None, None, None)
