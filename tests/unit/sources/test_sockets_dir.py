"""What a sockets directory may hold besides the agent's sockets: symlinks, too many sockets,
names that are not UTF-8. Real unix sockets (fake peers: they only need to answer one poll)."""

import os
import socket

from prometheus_client.exposition import generate_latest

from frexport.cli.serve import build_sidecar
from frexport.config import Config, WorkerServers
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.peers import FakePeer
from tests.unit.sources.test_hostile_peers import _reply


def _ok(conn):
    conn.sendall(_reply())


def test_symlinked_sockets_are_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    socks = tmp_path / "socks"
    elsewhere.mkdir()
    socks.mkdir()
    peer = FakePeer(str(elsewhere / "x.sock"), _ok)
    own = FakePeer(str(socks / "rank-0.sock"), _ok)
    os.symlink(elsewhere / "x.sock", socks / "rank-1.sock")
    try:
        src = WorkerServerSource(HealthRegistry(), WorkerServers(str(socks), timeout=1.0))
        assert [t.rank for t in src.targets()] == [0]
    finally:
        peer.close()
        own.close()


def test_max_ranks_bounds_the_targets(tmp_path):
    for r in range(12):  # sockets nobody listens on: a directory full of leftovers
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp_path / f"rank-{r}.sock"))
        s.close()
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), timeout=1.0), max_ranks=5)
    assert [t.rank for t in src.targets()] == [0, 1, 2, 3, 4]
    assert src.skipped_targets == 7


def test_a_socket_with_a_non_utf8_name_is_polled_and_scraped(tmp_path):
    socks = tmp_path / "socks"
    socks.mkdir()
    peer = FakePeer(os.fsencode(socks) + b"/rank-2\xff.sock", _ok)
    cfg = Config()
    cfg.sources.worker_servers = WorkerServers(str(socks), timeout=1.0)
    sidecar, registry = build_sidecar(cfg)
    try:
        src = sidecar.sources[0]
        state = sidecar.state
        assert pump(src, state) == 1 and 2 in state.latest_dumps()
        text = generate_latest(registry).decode()  # the scrape survives the name
        assert 'socket:rank-2\\\\xff' in text, [ln for ln in text.splitlines() if "rank-2" in ln]
    finally:
        peer.close()
        sidecar.shutdown()


def test_poll_of_a_large_body_is_decoded_in_the_sandbox(tmp_path):
    import json

    from frexport.decode.sandbox import DecoderPool, Limits
    from tests.support.synth import dump, entry

    body = json.dumps(dump([entry(i, i + 1) for i in range(300)], world=2)).encode()
    peer = FakePeer(str(tmp_path / "rank-0.sock"), lambda c: c.sendall(_reply(body=body)))
    pool = DecoderPool(1, Limits())
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), timeout=5.0), pool,
                             in_process_max_bytes=len(body) // 2)
    state = LiveState()
    try:
        assert pump(src, state) == 1, src.health.view()
        assert len(state.latest_dumps()[0].entries) == 300
        assert pool._count == 1  # the decoder did it
    finally:
        peer.close()
        pool.close()


def _bind(path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def test_a_socket_added_or_removed_is_seen_at_the_next_listing_even_inside_one_timestamp_tick(tmp_path):
    # the listing is reused while the directory's mtime stands still; a filesystem whose timestamps are
    # coarse can leave it unchanged across two changes, which is played here by putting it back
    _bind(tmp_path / "rank-0.sock")
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), timeout=1.0))
    assert [t.rank for t in src.targets()] == [0]
    before = os.stat(tmp_path)
    _bind(tmp_path / "rank-1.sock")
    os.utime(tmp_path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [t.rank for t in src.targets()] == [0, 1]  # changed this recently: listed again
    (tmp_path / "rank-0.sock").unlink()
    assert [t.rank for t in src.targets()] == [1]
    old = before.st_mtime_ns - 3_000_000_000  # long unchanged: the listing stands until the mtime moves
    os.utime(tmp_path, ns=(old, old))
    assert [t.rank for t in src.targets()] == [1]
    _bind(tmp_path / "rank-2.sock")
    assert [t.rank for t in src.targets()] == [1, 2]
