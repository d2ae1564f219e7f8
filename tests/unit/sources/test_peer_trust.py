"""Issue 28, deliverable 1: the job-level view trusts a peer only for the ranks it owns.

A real sidecar's peers endpoint (PeerApi on the real web server) serves the true ranks; the hostile
pod is a loopback HTTP server answering edited bodies (tests/support/peers.py: no real sidecar sends
another pod's ranks or out-of-range values). The view is the real one (cli/jobview.build_jobview):
its source, state and live analysis, driven pass by pass.
"""

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from frexport.cli.jobview import build_jobview
from frexport.config import Config
from frexport.decode.normalize import normalize
from frexport.export.peer_api import PeerApi
from frexport.live.state import LiveState
from frexport.sources.peer_owners import Owners, fair_shares
from frexport.web.server import WebServer
from tests.support.peers import HostileSidecar
from tests.support.synth import dump, entry, healthy_job

WORLD = 4


def _stuck() -> dict[int, list[dict]]:
    """Ranks 0-2 wait in collective 11; rank 3 never issued it: rank 3 is the culprit."""
    job = healthy_job(world=WORLD)
    for r in range(WORLD - 1):
        job[r].append(entry(10, 11, state="scheduled", duration_ms=None, created=time.time_ns() - 120 * 10**9))
    return job


def _state(ranks: dict[int, list[dict]]) -> LiveState:
    state, now = LiveState(), time.time_ns()
    for r, es in ranks.items():
        state.ingest(normalize(dump(es, world=WORLD), f"rank {r}", "pickle", rank=r, dumped_at_ns=now,
                               keep_frames=False), "test", now)
    return state


def _body(ranks: dict[int, list[dict]]) -> dict:
    return json.loads(PeerApi(_state(ranks), 256).ranks_body({}))


class _Real:
    """A real sidecar's peers endpoint serving `ranks`."""

    def __init__(self, ranks):
        self.state = _state(ranks)
        self.web = WebServer("127.0.0.1:0", CollectorRegistry(), lambda: True, api=PeerApi(self.state, 256).handle)
        self.web.start()
        self.url = f"http://127.0.0.1:{self.web.port}"

    def close(self):
        self.web.stop()


@pytest.fixture
def job():
    stuck = _stuck()
    pods = [_Real({0: stuck[0], 1: stuck[1]}), _Real({2: stuck[2], 3: stuck[3]})]
    hostile = HostileSidecar()
    yield stuck, pods, hostile
    for p in pods:
        p.close()
    hostile.close()


def _view(urls, max_ranks=4096):
    cfg = Config()
    cfg.peers.urls, cfg.peers.poll_interval, cfg.max_ranks = list(urls), 0.0, max_ranks
    cfg.analysis.stall_after = 5.0
    cfg.decode.workers = 1
    cfg.decode.allow_no_memory_limit = True
    sc, registry = build_jobview(cfg)
    sc.sources[0].decoder = None  # bodies read in this process (the sandboxed path: tests/unit/sources/test_peers.py)
    return sc, registry


def _pass(sc):
    sc._collect()
    return sc.analysis.run(sc.state.latest_dumps(), set(), sc._contested())


def _culprits(result) -> list:
    return sorted({r for f in result.diagnosis.findings if f.root_cause for r in f.culprit_ranks})


def test_a_peer_claiming_another_pods_rank_is_a_collision_never_merged(job, caplog):
    stuck, pods, hostile = job
    lie = _body({3: healthy_job(world=WORLD, steps=12)[3]})  # "rank 3 completed collective 11"
    hostile.body = json.dumps(lie).encode()
    sc, registry = _view([p.url for p in pods])
    try:
        assert _culprits(_pass(sc)) == [3]
        sc.sources[0].cfg.urls.append(hostile.url)  # the hostile pod joins after rank 3's own pod owns it
        with caplog.at_level(logging.WARNING):
            result = _pass(sc)
        assert _culprits(result) == [3]  # its claim did not hide the hang
        assert sc.state.latest_dumps()[3].source == f"peer:{pods[1].url}"
        assert sc.sources[0].collisions == {3: (pods[1].url, (hostile.url,))}
        assert "rank 3 is claimed by peers" in caplog.text and hostile.url in caplog.text
        assert registry.get_sample_value("frexport_peer_rank_collisions") == 1
        assert registry.get_sample_value("frexport_peer_dropped_total", {"what": "collisions"}) == 1
        caplog.clear()
        _pass(sc)
        assert "claimed by" not in caplog.text  # said once, not every pass
    finally:
        sc.shutdown()


def test_two_new_claims_in_one_pass_use_neither(job):
    stuck, pods, hostile = job
    hostile.body = json.dumps(_body({3: healthy_job(world=WORLD, steps=12)[3]})).encode()
    sc, _ = _view([pods[0].url, pods[1].url, hostile.url])
    try:
        result = _pass(sc)
        assert 3 not in sc.state.latest_dumps()
        assert sc.sources[0].collisions[3][0] is None
        assert 3 not in _culprits(result)  # never blamed on the strength of a claim (it said missing_dump [3])
        hostile.body = json.dumps(_body({})).encode()  # it stops claiming: the real pod's rank is used
        assert _culprits(_pass(sc)) == [3]
    finally:
        sc.shutdown()


def test_a_peer_with_4096_fake_ranks_does_not_crowd_out_the_real_ranks(job, caplog):
    stuck, pods, hostile = job
    fake = {"rank": 0, "epoch": 0, "dumped_at_ns": time.time_ns(), "world_size": None, "first": None, "full": True,
            "version": "2.10", "comm_lib_version": None, "pg_status": [], "handlers": [], "entries": []}
    hostile.body = json.dumps({"format": 1, "now_ns": 1, "ranks": [{**fake, "rank": 100 + i}
                                                                    for i in range(4096)]}).encode()
    sc, registry = _view([hostile.url, pods[0].url, pods[1].url], max_ranks=64)
    try:
        with caplog.at_level(logging.WARNING):
            result = _pass(sc)
        held = sc.state.latest_dumps()
        assert {0, 1, 2, 3} <= set(held) and len(held) == 64  # the real ranks, and the rest of the cap
        assert _culprits(result) == [3]
        assert registry.get_sample_value("frexport_peer_ranks_over_share", {"peer": hostile.url}) == 4096 - 60
        # one line for the pass, not one per peer, and the cut in the metrics
        assert caplog.text.count("job view: took 64 of the 4100 ranks 3 peers sent (room for 64") == 1
        assert registry.get_sample_value("frexport_jobview_ranks_not_taken") == 4100 - 64
    finally:
        sc.shutdown()


def test_a_rank_a_peer_stops_sending_is_forgotten(job):
    _, pods, hostile = job
    fake = _body({0: healthy_job(world=1, steps=3)[0]})["ranks"][0]
    sc, _ = _view([hostile.url])
    try:
        for p in range(5):  # 100 new rank ids a pass: memory must follow what is sent, not what was
            hostile.body = json.dumps({"format": 1, "now_ns": 1, "ranks": [{**fake, "rank": 1000 * (p + 1) + i}
                                                                            for i in range(100)]}).encode()
            _pass(sc)
            assert sorted(sc.state.latest_dumps()) == list(range(1000 * (p + 1), 1000 * (p + 1) + 100))
            assert len(sc.sources[0]._held) == 100 and len(sc.sources[0].owners.owner) == 100
    finally:
        sc.shutdown()


def _edit(body: dict, rank: int, **changes) -> dict:
    for r in body["ranks"]:
        if r["rank"] == rank:
            for k, v in changes.items():
                if k.startswith("row_"):  # row_<column>=value: the first entry's column
                    from frexport.model.peer_rows import COLUMNS
                    r["entries"][0][COLUMNS.index(k[4:])] = v
                elif k.startswith("all_"):
                    from frexport.model.peer_rows import COLUMNS
                    for e in r["entries"]:
                        e[COLUMNS.index(k[4:])] = v
                else:
                    r[k] = v
    return body


@pytest.mark.parametrize("hostile_value", [
    {"all_timeout_ms": -10 ** 400},
    {"all_timeout_ms": 10 ** 400},
    {"row_collective_seq_id": 10 ** 400},
    {"row_duration_ms": 1e308},
    {"row_input_sizes": [[10 ** 30]]},
    {"world_size": 10 ** 12},
    {"pg_config": [["0", "default_pg", [0, 1, 2, 1_000_000_000]]]},
], ids=lambda v: next(iter(v)))
def test_one_hostile_value_drops_that_value_or_row_never_every_rank(job, hostile_value, caplog):
    stuck, pods, hostile = job
    # the pod of ranks 0-1 is hostile: one value of rank 1's out of the field rules
    hostile.body = json.dumps(_edit(_body({0: stuck[0], 1: stuck[1]}), 1, **hostile_value)).encode()
    sc, registry = _view([hostile.url, pods[1].url])
    try:
        with caplog.at_level(logging.WARNING):
            result = _pass(sc)
        assert sorted(sc.state.latest_dumps()) == [0, 1, 2, 3]
        assert _culprits(result) == [3]  # the analysis pass ran: no OverflowError, no billion-rank set
        assert result.stall_after_s > 0
    finally:
        sc.shutdown()


def test_fair_shares_are_max_min():
    assert fair_shares({"a": 8, "b": 8, "evil": 4096}, 64) == {"a": 8, "b": 8, "evil": 48}
    assert fair_shares({"a": 8, "b": 8}, 12) == {"a": 6, "b": 6}
    assert fair_shares({"a": 1, "b": 100, "c": 100}, 11) == {"a": 1, "b": 5, "c": 5}
    assert fair_shares({}, 10) == {}


def test_an_invented_rank_waiting_in_a_real_group_blames_no_one(job, caplog):
    """A peer owns the ranks it invents, but a rank outside a group's members cannot wait in it: it
    made the job's healthy ranks 0-3 look like culprits."""
    _, pods, hostile = job
    healthy = healthy_job(world=WORLD)
    real = [_Real({0: healthy[0], 1: healthy[1]}), _Real({2: healthy[2], 3: healthy[3]})]
    waiting = healthy[0] + [entry(10, 11, state="scheduled", duration_ms=None,
                                  created=time.time_ns() - 120 * 10**9)]
    hostile.body = json.dumps(_body({5000: waiting})).encode()
    sc, _ = _view([r.url for r in real] + [hostile.url])
    try:
        result = _pass(sc)
        assert 5000 in sc.state.latest_dumps() and _culprits(result) == []
        assert any("5000 recorded ops in process group 'nccl:0' without being among its members" in n
                   for n in result.diagnosis.notes)
    finally:
        sc.shutdown()
        for r in real:
            r.close()


def test_a_slow_peer_does_not_hold_up_the_others(job):
    """Issue 28 (medium): one slow or huge peer delayed every pass of the view."""
    _, pods, hostile = job
    hostile.body = json.dumps(_body({7: healthy_job(world=8, steps=3)[7]})).encode()
    hostile.hold = threading.Event()  # it answers only once let: slower than any pass, however loaded the machine
    sc, _ = _view([p.url for p in pods] + [hostile.url])
    src = sc.sources[0]
    src.cfg.timeout = 10.0
    src.pass_wait_s = 0.5  # what a pass waits for its peers (PASS_WAIT_S, 2 s): not for one slower than that
    try:
        start = time.monotonic()
        _pass(sc)
        assert time.monotonic() - start < 2.5  # the pass went on without it
        assert sorted(sc.state.latest_dumps()) == [0, 1, 2, 3]
        hostile.hold.set()  # its answer, when it comes, is taken at a later pass
        deadline = time.monotonic() + 8.0
        while 7 not in sc.state.latest_dumps() and time.monotonic() < deadline:
            time.sleep(0.05)
            sc._collect()
        assert 7 in sc.state.latest_dumps()
    finally:
        sc.shutdown()


@pytest.mark.parametrize("junk_mb", [1, 40])
def test_a_peer_cannot_push_junk_into_the_job_bundle(job, tmp_path, junk_mb, caplog):
    """Issue 28 (medium): a peer declaring its own rank the culprit answered its pickle with hundreds of
    MB of junk, held in memory and written into the job's bundle. Here the pod of ranks 2-3 is hostile:
    its rank 3 is the culprit and its pickle handler answers junk."""
    from frexport.evidence.job import JobEvidenceSink
    from frexport.export.evidence import EvidenceWriter

    stuck, pods, hostile = job
    body = _body({2: stuck[2], 3: stuck[3]})
    for r in body["ranks"]:
        r["handlers"] = ["frexport_fr_pickle"]
    hostile.body, hostile.handler_body = json.dumps(body).encode(), b"\x80\x02junk" * (junk_mb << 17)
    sc, _ = _view([pods[0].url, hostile.url])
    sink = JobEvidenceSink(EvidenceWriter(str(tmp_path / "ev")), sc.sources[0], 256, pyspy=False, deadline_s=20.0)
    try:
        result = _pass(sc)
        assert _culprits(result) == [3]
        with caplog.at_level(logging.WARNING):
            bundle = sink.write_incident(_incident(sc, result))
        files = {p.name: p.stat().st_size for p in Path(bundle).iterdir()}
        assert b"junk" not in (Path(bundle) / "trace_3").read_bytes()  # the rank's snapshot, re-encoded
        assert sum(files.values()) < 4 << 20
        assert "rank 3" in caplog.text  # and the log says why its pickle is not there
    finally:
        sc.shutdown()


def _incident(sc, result):
    from frexport.live.sink import Pass

    return Pass(time.time_ns(), [], result, result, sc.state.latest_dumps())


def test_a_rank_handed_over_is_the_new_owners_even_after_a_future_dated_one(job):
    """A peer that owned rank 3 first, dating it 200 s ahead, then let go: the real pod's snapshot,
    older by that clock, must not be refused as older than the liar's."""
    stuck, pods, hostile = job
    lie = _body({3: healthy_job(world=WORLD, steps=12)[3]})
    lie["ranks"][0]["dumped_at_ns"] = time.time_ns() + 200 * 10**9
    hostile.body = json.dumps(lie).encode()
    sc, _ = _view([pods[0].url, hostile.url])
    try:
        _pass(sc)
        assert sc.state.latest_dumps()[3].source == f"peer:{hostile.url}"
        hostile.body = json.dumps(_body({})).encode()
        sc.sources[0].cfg.urls.append(pods[1].url)
        assert _culprits(_pass(sc)) == [3]
        assert sc.state.latest_dumps()[3].source == f"peer:{pods[1].url}"
    finally:
        sc.shutdown()


def test_the_view_sizes_itself_to_the_world_most_peers_report(caplog):
    """2048 pods of 8 with max_ranks 4096 were each cut to a fair share of 2 (a quarter of the job, 2048
    log lines a pass). The view takes the world most peers report over max_ranks, so nothing is cut;
    one peer reporting a bigger world cannot size it."""
    from frexport.sources.health import HealthRegistry
    from frexport.sources.peers import PeersSource, _PeerState

    src = PeersSource(HealthRegistry(), Config().peers, 256, max_ranks=4096)
    peers = [f"p{i}" for i in range(2048)]
    src._peers = {p: _PeerState(world=16384) for p in peers}
    src._peers["p0"].world = 1 << 18  # one liar
    assert src._capacity(peers) == 16384
    src.world_size = 8192  # the chart's worldSize / the flag wins
    assert src._capacity(peers) == 8192
    src.world_size = None
    src._peers = {p: _PeerState() for p in peers}  # nobody says: max_ranks
    assert src._capacity(peers) == 4096


def test_unfinished_entries_a_peer_keeps_sending_for_a_rank_are_bounded(job):
    """A peer sending ever new unfinished entries for its rank: the older unfinished ones were all kept
    (85 -> 953 MB in 50 s); at most a window of them is now, beside the window itself."""
    from tests.support.synth import entry

    _, pods, hostile = job
    sc, _ = _view([hostile.url])
    window = sc.sources[0].window
    try:
        for p in range(6):
            es = [entry(p * 500 + i, p * 500 + i + 1, state="scheduled", retired=False, duration_ms=None)
                  for i in range(500)]
            body = _body({0: es})
            body["ranks"][0]["full"] = p == 0  # after the first, what is new since the cursor, as peers send
            hostile.body = json.dumps(body).encode()
            _pass(sc)
            held = sc.sources[0]._held[(hostile.url, 0)].entries
            assert len(held) <= 2 * window, (p, len(held))
        assert held[0].record_id == 0  # the oldest unfinished one, where the rank waits, is kept
    finally:
        sc.shutdown()


def test_owners_settled_on_the_same_claims_again_stay_as_they_are_until_a_rank_is_released():
    owners = Owners()
    owners.claims = {"a": frozenset({0, 1}), "b": frozenset({1, 2})}
    assert owners.settle() == []
    assert owners.owner == {0: "a", 2: "b"} and set(owners.collisions) == {1}
    owners.claims = {"a": frozenset({0, 1}), "b": frozenset({1, 2})}  # the same claims, new sets
    assert owners.settle() == [] and owners.owner == {0: "a", 2: "b"} and set(owners.collisions) == {1}
    assert owners.release("a", 0)
    owners.claims = {"a": frozenset({0, 1}), "b": frozenset({1, 2})}
    owners.settle()
    assert owners.owner == {0: "a", 2: "b"}  # still claimed by a alone: a owns it again
    owners.claims = {"a": frozenset({1}), "b": frozenset({1, 2})}
    assert owners.settle() == [("a", 0)] and owners.owner == {2: "b"}
