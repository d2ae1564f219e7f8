"""Issue 28, deliverable 6: a short hostile-peer soak of the job-level view (about 75 s).

Two real sidecars' peers endpoints (PeerApi on the real web server) serve a 4-rank job that hangs
(rank 3 never issues collective 11). Beside them, hostile pods (loopback HTTP servers answering
edited bodies, tests/support/peers.py: no real sidecar sends these) do everything issue 28 lists at
once, every pass: 100 fresh rank ids with unfinished entries (memory), a claim that rank 3 completed
(a collision), 4096 fake ranks (crowding), and rows out of the field rules (timeout_ms -10**400, a
member rank 1000000000, a sequence number of 400 digits). The real view (build_jobview: source,
state, live analysis, job evidence sink) runs pass after pass. Flat and right: every pass names rank
3, exactly one bundle for the one hang (with the collision in it), the view holds what is sent now,
and RSS does not climb.
"""

import json
import os
import time
from pathlib import Path

import pytest

from frexport.decode.normalize import normalize
from frexport.model.peer_rows import COLUMNS
from tests.support.peers import HostileSidecar
from tests.support.synth import dump, healthy_job
from tests.unit.sources.test_peer_trust import WORLD, _body, _culprits, _Real, _stuck, _view

SECONDS = int(os.environ.get("FREXPORT_SOAK_SECONDS", 75))
HANG_AT_S = 10
WARMUP_S = SECONDS // 4


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    n = len(samples)
    mt, mr = sum(t for t, _ in samples) / n, sum(r for _, r in samples) / n
    return 60 * sum((t - mt) * (r - mr) for t, r in samples) / sum((t - mt) ** 2 for t, _ in samples)


def _rotating(p: int, template: dict) -> bytes:
    return json.dumps({"format": 1, "now_ns": time.time_ns(),
                       "ranks": [{**template, "rank": 100_000 + 100 * (p % 500) + i} for i in range(100)]}).encode()


def _bad_rows(stuck) -> bytes:
    body = _body({5000: stuck[0]})
    r = body["ranks"][0]
    r["pg_config"] = [["0", "default_pg", [0, 1, 2, 1_000_000_000]]]
    for e in r["entries"]:
        e[COLUMNS.index("timeout_ms")] = -10 ** 400
    r["entries"][0][COLUMNS.index("collective_seq_id")] = 10 ** 400
    return json.dumps(body).encode()


@pytest.mark.slow
def test_jobview_hostile_peer_soak(tmp_path):
    stuck, healthy = _stuck(), healthy_job(world=WORLD)
    pods = [_Real({0: healthy[0], 1: healthy[1]}), _Real({2: healthy[2], 3: healthy[3]})]  # the hang comes later
    unfinished = [e for e in _body({0: stuck[0]})["ranks"][0]["entries"]][-1:] * 1
    template = {**_body({0: stuck[0]})["ranks"][0], "entries": unfinished * 1}
    fake = {**template, "entries": []}
    rotating = HostileSidecar()
    liar = HostileSidecar(json.dumps(_body({3: healthy_job(world=WORLD, steps=12)[3]})).encode())
    crowd = HostileSidecar(json.dumps({"format": 1, "now_ns": 1, "ranks": [{**fake, "rank": 20_000 + i}
                                                                           for i in range(4096)]}).encode())
    bad = HostileSidecar(_bad_rows(stuck))
    hostile = [rotating, liar, crowd, bad]
    sc, registry = _view([p.url for p in pods], max_ranks=256)
    sc.cfg.interval = 0.0
    evidence = tmp_path / "evidence"
    from frexport.evidence.job import JobEvidenceSink
    from frexport.export.evidence import EvidenceWriter

    sink = JobEvidenceSink(EvidenceWriter(str(evidence)), sc.sources[0], 256, pyspy=False, deadline_s=5.0)
    sc.sinks.append(sink)
    sink.start()
    src = sc.sources[0]
    samples, passes, wrong, held_max = [], 0, [], 0
    try:
        assert _culprits(_pass(sc)) == []  # the real pods first: they own their ranks
        src.cfg.urls.extend(h.url for h in hostile)
        start, hung = time.monotonic(), False
        while (now := time.monotonic() - start) < SECONDS:
            if not hung and now >= HANG_AT_S:  # ranks 0-2 enter collective 11; rank 3 never does
                hung = True
                for r in range(WORLD - 1):
                    at = time.time_ns()
                    pods[r // 2].state.ingest(normalize(dump(stuck[r], world=WORLD), f"rank {r}", "pickle", rank=r,
                                                        dumped_at_ns=at, keep_frames=False), "test", at)
            rotating.body = _rotating(passes, template)
            result = _pass(sc)
            passes += 1
            if _culprits(result) != ([3] if hung else []):
                wrong.append((passes, _culprits(result)))
            held_max = max(held_max, len(src._held), len(sc.state.latest_dumps()))
            if now >= WARMUP_S:
                samples.append((now, _rss_mb()))
        time.sleep(1.0)  # the sink's thread finishes its bundle
    finally:
        sink.stop(10)
        sc.shutdown()
        for s in hostile + pods:
            s.close()
    bundles = [p for p in evidence.iterdir() if not p.name.startswith(".")]
    slope, peak = _slope_mb_per_min(samples), max(r for _, r in samples)
    report = {"passes": passes, "rss_start_mb": round(samples[0][1], 1), "rss_end_mb": round(samples[-1][1], 1),
              "rss_peak_mb": round(peak, 1), "rss_slope_mb_per_min": round(slope, 2), "held_max": held_max,
              "bundles": len(bundles), "collisions": dict(src.collisions),
              "rows_dropped": src.rows_dropped_total, "ranks_dropped": src.ranks_dropped_total,
              "wrong": wrong[:5], "bundle_names": sorted(b.name for b in bundles)}
    print(report)
    Path(os.environ.get("FREXPORT_SOAK_REPORT", os.devnull)).write_text(json.dumps(report, default=str))
    assert passes >= 30 and wrong == [], report
    assert held_max <= 256, report  # max_ranks, whatever the peers send
    assert len(bundles) == 1, report  # one hang, one bundle, however long the peers go on
    text = (bundles[0] / "report.txt").read_text()
    assert "rank 3 is claimed by peers" in text and liar.url in text
    assert json.loads((bundles[0] / "report.json").read_text())["rank_collisions"]["3"]["refused"] == [liar.url]
    assert src.rows_dropped_total > 0 and src.ranks_dropped_total > 0
    assert slope < 10.0, report  # flat: 100 new rank ids a pass are forgotten as they go


def _pass(sc):
    sc._collect()
    result = sc.analysis.run(sc.state.latest_dumps(), set())
    sc._hand_out([], result, set())
    return result

