"""The sidecar polling frexport.agent's live handler: every poll ends with what a full dump says.

The recorder is real: PyTorch 2.13 pickle dumps of one gloo process at three moments, served through
the agent's own `live_dump` on a unix socket the way its worker-server handler serves them."""

import os
import pickle
import subprocess
import sys
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from frexport.agent.live import LIVE_HANDLER, live_dump
from frexport.config import WorkerServers
from frexport.decode import scanned
from frexport.decode.read import decode_bytes
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.ports import free_port
from tests.support.unix_http import QuietHandler, serve_unix

# a 250-entry buffer dumped after 260 collectives, 10 more, then 500 more (the ring passes the cursor)
_RECORDER = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
for n, steps in enumerate((260, 10, 500)):
    for _ in range(steps):
        dist.all_reduce(t)
    open(f"{sys.argv[1]}/dump_{n}", "wb").write(torch._C._distributed_c10d._dump_fr_trace(True, False, False))
"""


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> list[bytes]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("fr")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               TORCH_FR_BUFFER_SIZE="250", OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", _RECORDER, str(out)], env=env, check=True, timeout=120,
                   capture_output=True)
    return [(out / f"dump_{n}").read_bytes() for n in range(3)]


class AgentRank:
    """A worker server with the agent's live handler over a recorder that is at `self.dump`."""

    def __init__(self, path: str, dump: bytes, live_hangs: bool = False, odd_pickle: bytes | None = None) -> None:
        self.dump, self.asked, self.formats, self.release = dump, [], [], threading.Event()
        rank = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                self.send(b'["%s", "fr_trace_json", "frexport_fr_pickle", "ping"]' % LIVE_HANDLER.encode())

            def do_POST(self):  # noqa: N802
                url = urlsplit(self.path)
                if url.path == "/handler/fr_trace_json":  # the layout of PyTorch's JSON, all entries
                    rank.asked.append("fr_trace_json")
                    return self.send(live_dump(lambda *flags: rank.dump, None))
                if url.path != f"/handler/{LIVE_HANDLER}":
                    return self.send(b"", status=404)
                query = parse_qs(url.query)
                after = query.get("after", [""])[0]
                rank.asked.append(after)
                rank.formats.append(query.get("format", ["json"])[0])
                if live_hangs:
                    rank.release.wait(30)
                fmt = query.get("format", ["json"])[0]
                if odd_pickle is not None and fmt == "pickle":
                    return self.send(odd_pickle)
                self.send(live_dump(lambda *flags: rank.dump, int(after) if after else None, fmt))

        self.server = serve_unix(path, Handler)


def _poll_each(tmp_path, rank: AgentRank, dumps) -> None:
    """Poll the rank once per dump: the sidecar's snapshot is that dump read whole, every time."""
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), poll_interval=0.0))
    state = LiveState()
    try:
        for n, dump in enumerate(dumps):
            rank.dump = dump
            assert pump(src, state) == 1
            got = state.latest_dumps()[0]
            want = decode_bytes(dump, "pickle", rank=0, keep_frames=False)
            # every field but the frames, which the live view never reads (evidence fetches the pickle)
            assert got.entries == tuple(e._replace(frames=(), call_site=None) for e in want.entries), n
            assert got.pg_status == want.pg_status and len(got.entries) == 250
    finally:
        src.stop()
        rank.server.shutdown()


@pytest.mark.torchjob
def test_each_poll_asks_once_and_ends_with_the_whole_buffer(tmp_path, dumps):
    rank = AgentRank(str(tmp_path / "rank-0.sock"), dumps[0])
    _poll_each(tmp_path, rank, dumps)
    # one request per poll: the whole buffer first (from PyTorch's fr_trace_json), then from the
        # oldest entry that may change (the first not retired, else the newest), and after the ring
        # passed that cursor, the one answer that holds the whole buffer is decoded as it is
    assert rank.asked == ["fr_trace_json", _cursor(dumps[0]), _cursor(dumps[1])]
    # from the cursor on, the agent's pickle with the old entries cut out, where the scanner reads it
    assert rank.formats == ["pickle" if scanned.available() else "json"] * 2


def _cursor(dump: bytes) -> str:
    entries = pickle.loads(dump)["entries"]
    return str(next((e for e in entries if not e["retired"]), entries[-1])["record_id"])


@pytest.mark.torchjob
def test_a_live_handler_that_cannot_answer_gives_way_to_pytorchs(tmp_path, dumps):
    # a trainer thread holding the GIL: the agent's Python handler hangs, PyTorch's C++ one answers
    rank = AgentRank(str(tmp_path / "rank-0.sock"), dumps[0], live_hangs=True)
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), poll_interval=0.0, timeout=0.5))
    state = LiveState()
    try:
        for dump in dumps:
            rank.dump = dump
            assert pump(src, state) == 1
            assert state.latest_dumps()[0].entries[-1].record_id == pickle.loads(dump)["entries"][-1]["record_id"]
        # the first poll takes the whole buffer from fr_trace_json; the live handler, asked once from
        # the cursor, hangs: that poll and the next are answered by fr_trace_json
        assert rank.asked == ["fr_trace_json", _cursor(dumps[0]), "fr_trace_json", "fr_trace_json"]
    finally:
        src.stop()
        rank.release.set()
        rank.server.shutdown()


@pytest.mark.torchjob
@pytest.mark.skipif(not scanned.available(), reason="the pickle answer is asked only where the scanner reads it")
def test_a_pickle_answer_it_cannot_read_turns_that_rank_to_json(tmp_path, dumps):
    # a pickle of a layout the scanner refuses (here: a bare list): that poll reads the whole buffer
    # from PyTorch's handler, and the rank's next polls ask the JSON answer, not the whole buffer again
    rank = AgentRank(str(tmp_path / "rank-0.sock"), dumps[0], odd_pickle=pickle.dumps([1, 2, 3], protocol=2))
    _poll_each(tmp_path, rank, dumps)
    assert rank.asked == ["fr_trace_json", _cursor(dumps[0]), "fr_trace_json", _cursor(dumps[1])]
    assert rank.formats == ["pickle", "json"]
