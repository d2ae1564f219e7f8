"""The peers endpoint (export/peer_api.py; its handler proxy: evidence/proxy.py) and the job-level
view's source (sources/peers.py), over a real web server: the same TLS and basic auth as /metrics,
cursors that move only what changed, discovery."""

import gc
import json
import socket
import time

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from frexport.cli.serve import build_sidecar, peer_api, start_web
from frexport.config import Config, DumpDir, Peers, validate
from frexport.decode.normalize import normalize
from frexport.decode.sandbox import DecoderPool, Limits
from frexport.export.peer_api import PeerApi
from frexport.live.state import LiveState
from frexport.model.trace_window import TraceWindow
from frexport.sources.health import HealthRegistry
from frexport.sources.peers import PeersSource
from frexport.web.server import WebServer
from tests.support.synth import dump, entry, healthy_job, write
from tests.unit.web.test_server import tls_files  # noqa: F401 - a fixture

STRIP = ("frames", "call_site")


def _same(a, b) -> bool:
    keep = [i for i, f in enumerate(a._fields) if f not in STRIP]
    return [a[i] for i in keep] == [b[i] for i in keep]


def test_round_trip_behind_tls_and_basic_auth(tmp_path, tls_files):  # noqa: F811
    crt, key = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    wc = tmp_path / "web.yml"
    wc.write_text(f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                  f"basic_auth_users:\n  jobview: '{hashed}'\n")
    d = write(tmp_path / "dumps", {r: dump(es, world=2) for r, es in healthy_job(world=2).items()})
    cfg = Config()
    cfg.sources.dump_dirs = [DumpDir(path=str(d), settle=0.1)]  # the dumps written before it looked: read once settled
    cfg.web.listen, cfg.web.config_file, cfg.peers.serve = "127.0.0.1:0", str(wc), True
    assert validate(cfg) == []
    sc, registry = build_sidecar(cfg)
    web = start_web(cfg, registry, sc.ready_event.is_set, peer_api(cfg, sc))
    try:
        end = time.monotonic() + 20
        while len(sc.state.latest_dumps()) < 2 and time.monotonic() < end:
            sc._collect()
            time.sleep(0.1)
        (tmp_path / "pw").write_text("s3cret\n")
        url = f"https://127.0.0.1:{web.port}"
        good = Peers(urls=[url], ca_file=str(crt), username="jobview", password_file=str(tmp_path / "pw"),
                     poll_interval=0.01)
        health = HealthRegistry()
        snaps = PeersSource(health, good, 256).collect()
        local = sc.state.latest_dumps()
        assert sorted(s.dump.rank for s in snaps) == [0, 1]
        for s in snaps:
            mine = local[s.dump.rank]
            assert len(s.dump.entries) == len(mine.entries) == 10
            assert all(_same(a, b) for a, b in zip(s.dump.entries, mine.entries))
            assert s.dump.pg_config == mine.pg_config and s.dump.dumped_at_ns == mine.dumped_at_ns
        # without the password, or without trusting the certificate: nothing, and the health says why
        for peers, reason in ((Peers(urls=[url], ca_file=str(crt), poll_interval=0.01), "http_status"),
                              (Peers(urls=[url], poll_interval=0.01), "tls")):
            h = HealthRegistry()
            assert PeersSource(h, peers, 256).collect() == []
            assert reason in str(h.__dict__), h.__dict__
    finally:
        sc.shutdown()
        web.stop()


def test_not_served_unless_asked_and_not_open_without_auth():
    cfg = Config()
    cfg.sources.dump_dirs = [DumpDir(path="/tmp")]
    cfg.peers.serve = True
    assert any(p.startswith("peers.serve:") for p in validate(cfg))
    cfg.peers.allow_unauthenticated = True
    assert validate(cfg) == []
    cfg.peers.serve = False
    sc, _ = build_sidecar(cfg)
    assert peer_api(cfg, sc) is None  # and the web server then answers 404 under /api/


def _state_server(window=8):
    state = LiveState()
    web = WebServer("127.0.0.1:0", CollectorRegistry(), lambda: True, api=PeerApi(state, window).handle)
    web.start()
    return state, web


def _ingest(state, rank, entries, at):
    d = normalize(dump(entries, world=2), f"rank {rank}", "pickle", rank=rank, dumped_at_ns=at, keep_frames=False)
    state.ingest(d, "test", at)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["in-process", "decoders"])
def test_cursors_move_only_what_changed_and_keep_the_window(sandboxed):
    state, web = _state_server(window=8)
    decoder = DecoderPool(1, Limits(require_memory_limit=False)) if sandboxed else None
    try:
        steps = [entry(i, i + 1) for i in range(40)]
        _ingest(state, 0, steps[:30], 1)
        src = PeersSource(HealthRegistry(), Peers(urls=[f"http://127.0.0.1:{web.port}"], poll_interval=0.0), 8,
                          decoder)
        bodies = []  # (what each answer held: the view's source only counts bytes)
        get = src._get
        src._get = lambda *a, **k: bodies.append(get(*a, **k)) or bodies[-1]
        first = src.collect()
        assert [e.record_id for e in first[0].dump.entries] == list(range(22, 30))
        # two new entries, the newest unfinished
        _ingest(state, 0, steps[:31] + [entry(31, 32, state="scheduled", duration_ms=None)], 2)
        second = src.collect()
        assert [e.record_id for e in second[0].dump.entries] == list(range(24, 32))
        sent = [json.loads(b)["ranks"][0]["entries"] for b in bodies]
        assert [len(rows) for rows in sent] == [8, 2]
        assert [row[1] for row in sent[1]] == [30, 31]  # (rows as kinds: [kind, record_id, ...])
        # nothing new but a fresher poll: a snapshot again (seen at), with only the unfinished entry moved
        _ingest(state, 0, steps[:31] + [entry(31, 32, state="completed")], 3)
        third = src.collect()
        assert third[0].dump.entries[-1].state == "completed" and third[0].dump.dumped_at_ns == 3
        # each window held is out of the collector's lists, as its entries are (model/untrack.py): the
        # young collection after a pass walked every new one, item by item
        assert not any(gc.is_tracked(s[0].dump.entries) for s in (first, second, third))
        assert [row[1] for row in json.loads(bodies[2])["ranks"][0]["entries"]] == [31]
        assert src.collect() == []  # nothing has changed since
    finally:
        web.stop()
        if decoder is not None:
            decoder.close()


@pytest.mark.parametrize("sandboxed", [False, True], ids=["in-process", "decoders"])
def test_a_rank_with_nothing_new_keeps_its_entries_and_its_trace(sandboxed):
    """A hung job's ranks send nothing new pass after pass, only fresher polls (and the op they hang in
    again, from their cursor): each snapshot keeps the same entries, so the view's trace of the rank only
    takes the new header instead of being followed again, rank by rank, every pass. What changes still
    moves: the op completing, then a new one."""
    state, web = _state_server(window=8)
    decoder = DecoderPool(1, Limits(require_memory_limit=False)) if sandboxed else None
    try:
        src = PeersSource(HealthRegistry(), Peers(urls=[f"http://127.0.0.1:{web.port}"], poll_interval=0.0), 8,
                          decoder)
        steps = [entry(i, i + 1) for i in range(20)]
        hung = steps[:12] + [entry(12, 13, state="started", duration_ms=None)]
        follower = TraceWindow(8)
        _ingest(state, 0, hung, 1)
        first = src.collect()[0].dump
        follower.update(first)
        for at in (2, 3):  # the hung op is sent again at each poll: the same values
            _ingest(state, 0, hung, at)
            again = src.collect()[0].dump
            assert again.dumped_at_ns == at and again.entries is first.entries
            rebuilds = follower.rebuilds
            assert follower.update(again).dumped_at_ns == at and follower.rebuilds == rebuilds
        _ingest(state, 0, steps[:13], 4)  # it completes
        done = src.collect()[0].dump
        assert done.entries is not first.entries and done.entries[-1].state == "completed"
        _ingest(state, 0, steps[:14], 5)
        assert [e.record_id for e in src.collect()[0].dump.entries] == list(range(6, 14))
    finally:
        web.stop()
        if decoder is not None:
            decoder.close()


def test_a_headless_service_is_every_address_it_resolves_to():
    calls = []

    def resolve(host, port, type):  # noqa: A002
        calls.append(host)
        return [(socket.AF_INET, type, 6, "", (a, port)) for a in ("10.0.0.7", "10.0.0.8", "10.0.0.7")] + \
            [(socket.AF_INET6, type, 6, "", ("fd00::9", port, 0, 0))]

    src = PeersSource(HealthRegistry(), Peers(service="train-frexport.ml.svc:9464", scheme="https"), 8,
                      resolve=resolve)
    assert src.peers() == ["https://10.0.0.7:9464", "https://10.0.0.8:9464", "https://[fd00::9]:9464"]
    src.peers()
    assert calls == ["train-frexport.ml.svc"]  # cached until the discovery interval


@pytest.mark.parametrize("bad", ["since=1:2", "since=a:0:1:1", "since=1:0:1:1,x"])
def test_bad_cursors_are_refused(bad):
    from frexport.export.peer_api import parse_cursors

    assert parse_cursors(bad) is None


@pytest.mark.parametrize("pyspy", [True, False], ids=["pyspy-on", "pyspy-off"])
def test_proxied_pyspy_is_rate_limited_and_honours_evidence_pyspy(tmp_path, pyspy):
    """Issue 28 (low): every proxied pyspy_dump ran py-spy again (it pauses the rank), and
    `evidence.pyspy: false` did not stop a peer from asking. The rank is a fake worker server
    (tests/support/fake_rank.py) listing pyspy_dump; the source and the endpoint are real."""
    from frexport.config import WorkerServers
    from frexport.evidence.proxy import HandlerProxy
    from frexport.sources.worker_server import WorkerServerSource
    from tests.support.fake_rank import FakeRank

    sockets = tmp_path / "s"
    sockets.mkdir()
    rank = FakeRank(0, str(sockets / "rank-0.sock"), 1, time.time() - 5, pyspy=True)
    src = WorkerServerSource(HealthRegistry(), WorkerServers(sockets_dir=str(sockets), poll_interval=0.0))
    try:
        state = LiveState()
        for s in src.collect():
            state.ingest(s.dump, s.source, s.taken_ns)
        api = PeerApi(state, 8, HandlerProxy(src, 5.0, pyspy=pyspy))
        listed = json.loads(api.ranks_body({}))["ranks"][0]["handlers"]
        first = api.handle("/api/v1/ranks/0/handler/pyspy_dump", "")
        second = api.handle("/api/v1/ranks/0/handler/pyspy_dump", "")
        if pyspy:
            assert "pyspy_dump" in listed and first[0] == 200 and second[0] == 429
            assert b"less than 30 s ago" in second[1] and rank.pyspy_requests == 1
        else:
            assert "pyspy_dump" not in listed and first[0] == second[0] == 404
            assert b"evidence.pyspy is off" in first[1] and rank.pyspy_requests == 0
        assert api.handle("/api/v1/ranks/0/handler/dump_traceback", "")[0] == 200  # stacks are not limited
    finally:
        src.stop()
        rank.close()


@pytest.mark.parametrize("sandboxed", [False, True], ids=["in-process", "decoders"])
def test_long_member_lists_travel_as_runs_and_arrive_whole(sandboxed):
    # a 4096-rank job's groups: the default one, a strided dp group, a list with no pattern
    world, dp, odd = list(range(4096)), list(range(3, 4096, 32)), [5, 9, 10, 11, 12, 400, 17, 18, 19, 20, 21, 1, 2,
                                                                   3, 4000, 4001, 7]
    state, web = _state_server()
    decoder = DecoderPool(1, Limits(require_memory_limit=False)) if sandboxed else None
    try:
        for r in (3, 35):
            d = normalize(dump([entry(0, 1, pg_id=1)], world=4096, groups={"1": ("dp", dp), "2": ("odd", odd)}),
                          f"rank {r}", "pickle", rank=r, dumped_at_ns=1, keep_frames=False)
            state.ingest(d, "test", 1)
        src = PeersSource(HealthRegistry(), Peers(urls=[f"http://127.0.0.1:{web.port}"], poll_interval=0.0), 8,
                          decoder)
        snaps = src.collect()
        got = {s.dump.rank: {c.desc: c.ranks for c in s.dump.pg_config} for s in snaps}
        assert got[3] == got[35] == {"default_pg": tuple(world), "dp": tuple(dp), "odd": tuple(odd)}
        assert got[3]["default_pg"] is got[35]["default_pg"]  # one tuple for every rank that lists it
        # the default group went as one run, not 4096 numbers
        assert src.bytes_total < 2 * 4096, src.bytes_total
    finally:
        web.stop()
        if decoder is not None:
            decoder.close()


def test_a_client_that_does_not_ask_for_runs_gets_lists():
    state = LiveState()
    state.ingest(normalize(dump([entry(0, 1)], world=64), "r0", "pickle", rank=0, dumped_at_ns=1, keep_frames=False),
                 "test", 1)
    status, body, _ = PeerApi(state, 8).handle("/api/v1/ranks", "")
    assert status == 200 and json.loads(body)["ranks"][0]["pg_config"][0][2] == list(range(64))


@pytest.mark.parametrize("runs", [
    [[0, 1 << 20, 1]],  # more ranks than any job has
    [[0, 3, 0]], [[0, 3, -1]], [[5, 0, 1]],  # no step, backwards, empty
    [[200_000, 10, 10_000]],  # past the last rank a job can have
    [[0, 2, 1, 4]], [["0", 2, 1]], [[0, 2.0, 1]], "0-4095", [[0, True, 1]],
])
def test_hostile_runs_leave_the_members_unknown(runs):
    from frexport.decode.peer_rows import parse_body
    from frexport.model.peer_rows import FORMAT
    body = json.dumps({"format": FORMAT, "now_ns": 1, "ranks": [{
        "rank": 0, "epoch": 0, "entries": [], "pg_config": [["0", "default_pg", {"runs": runs}]]}]}).encode()
    _, ranks, dropped, _ = parse_body(body, "peer")
    assert dropped.ranks == 0 and ranks[0].pg_config[0].ranks is None
    assert ranks[0].pg_runs is None or ranks[0].pg_runs[0] is None


@pytest.mark.parametrize("sandboxed", [False, True], ids=["in-process", "decoders"])
def test_entries_arrive_as_the_pod_holds_them_whatever_their_text_and_numbers(sandboxed):
    """The body is written by msgspec where it can and by the standard library where msgspec refuses a
    value (a lone surrogate, which a pickled string can hold): either way the view gets the pod's rows."""
    from frexport.export.peer_api import _ROW
    from frexport.model.peer_rows import COLUMNS
    state, web = _state_server(window=8)
    decoder = DecoderPool(1, Limits(require_memory_limit=False)) if sandboxed else None
    try:
        for rank, desc in ((0, "dp ∑ 数据"), (1, "odd \udc80 half")):
            durations = (0.000_5, 1.234_567_8, 3e3, None)  # (fractions of a microsecond, and one unknown)
            es = [entry(i, i + 1, duration_ms=d, pg=("0", desc)) for i, d in enumerate(durations)]
            state.ingest(normalize(dump(es, world=2), f"rank {rank}", "pickle", rank=rank, dumped_at_ns=1,
                                   keep_frames=False), "test", 1)
        src = PeersSource(HealthRegistry(), Peers(urls=[f"http://127.0.0.1:{web.port}"], poll_interval=0.0), 8,
                          decoder)
        got = {s.dump.rank: [_ROW(e) for e in s.dump.entries] for s in src.collect()}
        held = {r: [_ROW(e) for e in d.entries] for r, d in state.latest_dumps().items()}
        assert got == held and {row[COLUMNS.index("pg_desc")] for row in got[1]} == {"odd \udc80 half"}
    finally:
        web.stop()
        if decoder is not None:
            decoder.close()


def test_a_window_merged_on_the_poll_thread_is_taken_only_from_what_is_still_held():
    """Each rank's window is merged on its poll's thread while other peers are still decoded; the view's
    thread takes it only where the held window it was merged from is still the one held, else merges
    again: a window merged from what is no longer held would bring back entries the view has moved past."""
    state, web = _state_server(window=8)
    try:
        peer = f"http://127.0.0.1:{web.port}"
        taken, again = (PeersSource(HealthRegistry(), Peers(urls=[peer], poll_interval=0.0), 8) for _ in "ab")
        steps = [entry(i, i + 1) for i in range(40)]
        _ingest(state, 0, steps[:30], 1)
        for src in (taken, again):
            src.collect()
        _ingest(state, 0, steps[:33], 2)
        answers = {}
        for src in (taken, again):
            src._index_held()  # (as collect does before its polls: the cursors of what is held)
            ranks, _, _ = src._parse(src._get(peer, src._ranks_path(peer)), peer)
            answers[src] = ranks[0], src._windows(peer, ranks)[0]
        r, fresh = answers[taken]
        snap = taken._merge(peer, r, fresh)
        assert snap.dump.entries is fresh.entries  # taken as it was merged
        assert [e.record_id for e in snap.dump.entries] == list(range(25, 33))
        # the held window changed after the merge (here: as if its older entries had been dropped)
        r, stale = answers[again]
        held = again._held[(peer, 0)]
        held.entries = held.entries[4:]
        reference = PeersSource(HealthRegistry(), Peers(urls=[peer], poll_interval=0.0), 8)
        reference._held[(peer, 0)] = type(held)(peer, held.epoch, held.entries, held.cursor, held.pg_config)
        want = reference._merge(peer, r)
        got = again._merge(peer, r, stale)
        assert got.dump.entries is not stale.entries
        assert [e.record_id for e in got.dump.entries] == [e.record_id for e in want.dump.entries]
        assert again._held[(peer, 0)].cursor == reference._held[(peer, 0)].cursor
    finally:
        web.stop()
