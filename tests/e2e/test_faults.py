"""Faults the sidecar must survive, each on real parts where one can produce it."""

import os
import subprocess
import sys
import threading
import time

import pytest

from frexport.config import DumpDir, WorkerServers
from frexport.decode.read import decode_bytes
from frexport.evidence.bundle import Bundle
from frexport.export.evidence import EvidenceWriter
from frexport.live.state import LiveState
from frexport.sources.dump_dir import DumpDirSource
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support import paths  # noqa: E402

sys.path.insert(0, str(paths.BENCHMARKS))
import pickle  # noqa: E402

from bench_sidecar import ReplayRank  # noqa: E402

from tests.support.live import pump  # noqa: E402
from tests.support.sidecar import Sidecar  # noqa: E402
from tests.support.synth import dump, entry  # noqa: E402


def _pickle(n, seq0=1):
    return pickle.dumps(dump([entry(i, seq0 + i) for i in range(n)], world=2), protocol=2)


def test_dump_rewritten_while_being_read_is_read_again(tmp_path, monkeypatch):
    """PyTorch may rewrite a rank's dump while we read it. A torn read is a decode error for
    that version only; the rewrite's own events make the final version be read."""
    d = tmp_path / "dumps"
    d.mkdir()
    state, health = LiveState(), HealthRegistry()
    src = DumpDirSource(health, DumpDir(str(d), settle=0.2))
    src.start()
    path = d / "trace_0"
    path.write_bytes(_pickle(5))
    import frexport.sources.dump_dir as dd

    real = dd.read_checked
    calls = []

    def torn(*args):  # a fake for the race itself (it cannot be timed reliably): the file is replaced
        if not calls:  # while the first read is in progress
            calls.append(1)
            path.write_bytes(_pickle(8)[:40])  # ...with a half-written version, read torn
            out = real(*args)
            time.sleep(0.05)
            path.write_bytes(_pickle(8))
            return out
        return real(*args)

    monkeypatch.setattr(dd, "read_checked", torn)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pump(src, state)
        d0 = state.latest_dumps().get(0)
        if d0 is not None and len(d0.entries) == 8:
            break
        time.sleep(0.05)
    src.stop()
    assert len(state.latest_dumps()[0].entries) == 8


def test_lost_inotify_events_are_covered_by_the_rescan(tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    state = LiveState()
    src = DumpDirSource(HealthRegistry(), DumpDir(str(d), settle=0.1, rescan_interval=0.5))
    src.start()
    src._observer.stop()  # as if the inotify queue overflowed: no events at all from here on
    src._observer.join(5)
    (d / "trace_3").write_bytes(_pickle(4))
    deadline = time.monotonic() + 10
    while 3 not in state.latest_dumps() and time.monotonic() < deadline:
        pump(src, state)
        time.sleep(0.1)
    assert len(state.latest_dumps()[3].entries) == 4


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 64 KiB filesystem (tmpfs; needs root, which CI and this machine have)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.fail("cannot mount a tmpfs (needs root)")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_no_space_for_the_evidence_bundle(tiny_disk):
    writer = EvidenceWriter(str(tiny_disk), max_bundles=5)
    big = decode_bytes(_pickle(2000), "x", rank=0)  # ~400 KB pickled: does not fit
    bundle = Bundle("missing_rank", "report\n", {}, {0: big, 1: big}, {}, {})
    assert writer.write(bundle) is None and writer.failed == 1
    assert [n for n in os.listdir(tiny_disk)] == []  # no half-written bundle left behind
    small = decode_bytes(_pickle(2), "x", rank=0)
    assert writer.write(Bundle("missing_rank", "r\n", {}, {0: small}, {}, {})) is not None  # and it recovers


def test_worker_server_restarting_on_a_new_socket(tmp_path):
    """A rank's trainer restarts: a new server process on the same socket path, record ids from 0.
    The rank gets a new epoch; nothing is counted twice."""
    state, health = LiveState(), HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=2, poll_interval=0.01))  # pumps not held back
    sock = str(tmp_path / "rank-0.sock")
    first = ReplayRank(0, sock, groups=2, entries=50, rate=100.0)
    pump(src, state)
    time.sleep(0.3)
    pump(src, state)
    counted = sum(state.view().collectives.values())
    first.server.shutdown()
    first.server.server_close()
    os.unlink(sock)
    time.sleep(0.1)
    second = ReplayRank(0, sock, groups=2, entries=50, rate=100.0, base=0)  # record ids from 0 again
    time.sleep(0.2)
    src._backoff.clear()
    pump(src, state)
    rs = state.view().ranks[0]
    assert rs.epoch == 1 and health.view()[0].up
    assert sum(state.view().collectives.values()) > counted  # the new process's entries are new
    second.server.shutdown()
    src.stop()


def test_scrapes_during_heavy_polling(tmp_path):
    servers = [ReplayRank(r, str(tmp_path / f"rank-{r}.sock"), rate=2000.0) for r in range(8)]
    with Sidecar("--sockets-dir", str(tmp_path), "--poll-interval", "0.2s",
                 env={"FREXPORT_ANALYSIS__INTERVAL": "0.2s"}) as sc:
        errors, times = [], []

        def scrape():
            for _ in range(40):
                t = time.monotonic()
                try:
                    body = sc.get("/metrics")
                    assert "frexport_build_info" in body
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)
                times.append(time.monotonic() - t)
                time.sleep(0.05)

        threads = [threading.Thread(target=scrape) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and max(times) < 2.0, (errors, max(times))
        assert sc.value("frexport_source_up", source="socket:rank-7") == 1.0
    for s in servers:
        s.server.shutdown()


def test_a_bug_on_one_rank_does_not_stop_the_others(tmp_path, monkeypatch):
    """A fake failure (a real part cannot be made to hit a bug on demand): decoding one rank raises."""
    servers = [ReplayRank(r, str(tmp_path / f"rank-{r}.sock"), groups=2, entries=20) for r in range(2)]
    state, health = LiveState(), HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=2))
    real = src._decode

    def flaky(t, recorder, body, now):
        if t.rank == 0:
            raise KeyError("a bug")
        return real(t, recorder, body, now)

    monkeypatch.setattr(src, "_decode", flaky)
    pump(src, state)
    by_name = {h.name: h for h in health.view()}
    assert by_name["socket:rank-0"].errors["internal"] == 1 and by_name["socket:rank-1"].up
    assert 1 in state.view().ranks
    src.stop()
    for s in servers:
        s.server.shutdown()
